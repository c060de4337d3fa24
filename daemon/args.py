"""Argument types that several commands' parsers use (`reckon` itself, `reckon bench`, `reckon chaos`).

They sit below every command, so a command's options never import another command.  argparse
alone: the command line builds every parser on every call.  ``toml_type`` tells a config file's
reader what the option reads (daemon/cli/config.py).
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a CLI call's import; mypy knows the name)
if TYPE_CHECKING:
    from pathlib import Path


def path(value: str) -> "Path":
    """A ``pathlib.Path``, imported only when a path option is given (pathlib costs a submit some ms)."""
    from pathlib import Path

    return Path(value)


def positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


positive.toml_type = "number"  # type: ignore[attr-defined]
