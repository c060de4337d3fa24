"""Durations, as every option that takes one reads them: ``90s``, ``10m``, ``2h``, ``1h30m``, ``1d``, or seconds.

One parser for ``submit --time``, the daemons' seconds (``--lost-after 10m``),
their config files (a number of seconds or such a string) and the tools'.
Light (no import past the standard library): the command line imports it on
every call.
"""

from __future__ import annotations

import argparse
import math
import re
import time

MAX_SECONDS = 1e9  # about 31 years: past any timeout or limit a cluster means
_UNITS = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?")
EXAMPLES = "90s, 10m, 2h, 1h30m, 1d or a number of seconds"


def parse_seconds(text: str, *, zero: bool = False) -> float:
    """Seconds of ``text`` (see the module docstring), more than zero (or zero too, with ``zero``).

    ``ValueError`` with a one-line reason for anything else.
    """
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        match = _UNITS.fullmatch(text)
        if not text or match is None:
            raise ValueError(f"expected a duration such as {EXAMPLES}, got {text!r}") from None
        d, h, m, s = match.groups()
        seconds = int(d or 0) * 86400 + int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)
    if math.isnan(seconds):
        raise ValueError(f"expected a duration such as {EXAMPLES}, got {text!r}")
    if zero and seconds < 0:
        raise ValueError(f"must be 0 or more, got {text}")
    if not zero and not seconds > 0:
        raise ValueError(f"must be positive, got {text}")
    if seconds >= MAX_SECONDS:
        raise ValueError(f"must be under {MAX_SECONDS:.0f} seconds, got {text}")
    return seconds


def duration(value: str) -> float:
    """An argparse type: a duration of more than zero, in seconds."""
    try:
        return parse_seconds(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_or_zero(value: str) -> float:
    """An argparse type: a duration of zero or more, in seconds."""
    try:
        return parse_seconds(value, zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Their type in a TOML config file (daemon/cli/config.py): a number of seconds, or a string such as "10m".
duration.toml_type = duration_or_zero.toml_type = "duration"  # type: ignore[attr-defined]


def parse_since(text: str, *, now: float | None = None) -> float:
    """The wall time (seconds since the epoch) of ``--since``: a date or date-time (ISO, local
    time unless it names its zone: ``2026-12-01``, ``2026-12-01T09:30``, ``2026-12-01 09:30+00:00``)
    or a duration ago (``2h``, ``1d``: see ``parse_seconds``).  ``ValueError`` with one line."""
    text = text.strip()
    try:
        from datetime import datetime  # lazily: only --since takes a date

        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    try:
        ago = parse_seconds(text)
    except ValueError:
        raise ValueError(f"expected a date (2026-12-01), a date and time (2026-12-01T09:30) "
                         f"or a duration ago ({EXAMPLES}), got {text!r}") from None
    return (time.time() if now is None else now) - ago


def since(value: str) -> float:
    """An argparse type: ``parse_since``."""
    try:
        return parse_since(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
