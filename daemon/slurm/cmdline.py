"""The Slurm-style commands' command lines: getopt_long's spellings and Slurm's time formats.

Light (the short-lived commands pay their imports): no argparse, getopt or regular expressions.
"""

from __future__ import annotations

import time


class UsageProblem(ValueError):
    """A command line that cannot work as written (exit status 2)."""


# ---- the command line ----------------------------------------------------------------------------


def parse_argv(argv: list[str], options: dict[str, tuple[str, bool]],
               lists: frozenset[str] = frozenset()) -> tuple[dict[str, object], list[str]]:
    """Slurm's getopt_long spellings: ``-j 1``, ``-j1``, ``--jobs=1``, ``--jobs 1``, ``-hX``, a
    unique prefix of a long option.  ``options``: spelling (``-j``, ``--jobs``) -> (key, takes a value).
    A repeated option's last value wins, but for the keys in ``lists``, whose values add up
    (``sacct -j 1 -j 2``, as submitit calls it, is ``-j 1,2``).  (values by key, operands)."""
    values: dict[str, object] = {}
    rest: list[str] = []

    def put(key: str, value: str) -> None:
        values[key] = f"{values[key]},{value}" if key in lists and key in values else value

    longs = [o for o in options if o.startswith("--")]
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name not in options:
                matches = [o for o in longs if o.startswith(name)]
                if len(matches) != 1:
                    raise UsageProblem(f"unrecognized option '{name}'" if not matches
                                       else f"option '{name}' is ambiguous")
                name = matches[0]
            key, wants = options[name]
            if wants:
                if not eq:
                    if i >= len(argv):
                        raise UsageProblem(f"option '{name}' requires an argument")
                    value, i = argv[i], i + 1
                put(key, value)
            elif eq:
                raise UsageProblem(f"option '{name}' doesn't allow an argument")
            else:
                values[key] = True
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                flag = "-" + arg[j]
                if flag not in options:
                    raise UsageProblem(f"invalid option -- '{arg[j]}'")
                key, wants = options[flag]
                if wants:
                    value = arg[j + 1:]
                    if not value:
                        if i >= len(argv):
                            raise UsageProblem(f"option requires an argument -- '{arg[j]}'")
                        value, i = argv[i], i + 1
                    put(key, value)
                    break
                values[key] = True
                j += 1
        else:
            rest.append(arg)
    return values, rest


def split_list(text: str) -> list[str]:
    """``a,b c`` -> ['a', 'b', 'c']: Slurm's lists take commas (and, quoted, spaces)."""
    return [part for chunk in text.split(",") for part in chunk.split() if part]


def parse_time(text: str, now: float) -> float:
    """sacct -S/-E's times: ``now[{+|-}N[unit]]``, ``today``, ``midnight``, ``noon``, ``YYYY-MM-DD[THH:MM[:SS]]``,
    ``MM/DD[/YY]``, ``MMDD[YY]``, ``HH:MM[:SS]`` (today), seconds since the epoch with a leading ``@``."""
    text = text.strip()
    lower = text.lower()
    local = time.localtime(now)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    if lower.startswith("now"):
        rest = lower[3:]
        if not rest:
            return now
        sign = 1 if rest[0] == "+" else -1 if rest[0] == "-" else 0
        digits = rest[1:]
        k = 0
        while k < len(digits) and digits[k].isdigit():
            k += 1
        unit = digits[k:]
        scale = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
                 "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
                 "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}.get(unit)
        if not sign or not k or scale is None:
            raise UsageProblem(f"invalid time specification '{text}'")
        return now + sign * int(digits[:k]) * scale
    named = {"today": 0, "midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
    if lower in named:
        return midnight + named[lower] * 3600
    if text.startswith("@") and text[1:].isdigit():
        return float(text[1:])
    try:
        if "-" in text:  # YYYY-MM-DD[THH:MM[:SS]]
            day, _, clock = text.partition("T")
            year, month, mday = (int(p) for p in day.split("-"))
            hh, mm, ss = _clock(clock) if clock else (0, 0, 0)
            return time.mktime((year, month, mday, hh, mm, ss, 0, 0, -1))
        if "/" in text:  # MM/DD[/YY]
            parts = [int(p) for p in text.split("/")]
            year = local.tm_year if len(parts) == 2 else 2000 + parts[2] % 100
            return time.mktime((year, parts[0], parts[1], 0, 0, 0, 0, 0, -1))
        if ":" in text:  # HH:MM[:SS] today
            hh, mm, ss = _clock(text)
            return midnight + hh * 3600 + mm * 60 + ss
        if text.isdigit() and len(text) in (4, 6):  # MMDD[YY]
            year = local.tm_year if len(text) == 4 else 2000 + int(text[4:])
            return time.mktime((year, int(text[:2]), int(text[2:4]), 0, 0, 0, 0, 0, -1))
    except (ValueError, OverflowError):
        pass
    raise UsageProblem(f"invalid time specification '{text}'")


def _clock(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(":")]
    if not 2 <= len(parts) <= 3:
        raise ValueError(text)
    return parts[0], parts[1], parts[2] if len(parts) == 3 else 0
