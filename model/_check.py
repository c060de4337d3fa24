"""Small validators used by every event, message and fact constructor.

They raise ``ValueError`` with a message naming the field; the message codec
turns that into ``RemoteProtocolError`` for peer input.
"""

from __future__ import annotations

from typing import Any

MAX_NAME = 200


# Each check starts with the common good case in one cheap test (exact types:
# bool is an int subclass and must not pass), and only then works out what is
# wrong.  They run for every field of every message, fact and event.

_INF = float("inf")


def check_str(name: str, value: Any, *, allow_empty: bool = False, max_len: int = MAX_NAME) -> None:
    if type(value) is str and (value or allow_empty) and len(value) <= max_len:
        return
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")
    if len(value) > max_len:
        raise ValueError(f"{name} is longer than {max_len} characters")


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> None:
    if (type(value) is int and (minimum is None or value >= minimum)
            and (maximum is None or value <= maximum)):
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")


def check_opt_int(name: str, value: Any, **kw: Any) -> None:
    if value is not None:
        check_int(name, value, **kw)


def check_time(name: str, value: Any) -> None:
    if type(value) is float and 0.0 <= value < _INF:  # False for NaN
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if value != value or value < 0 or value == float("inf"):  # NaN, negative or infinite
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def check_opt_time(name: str, value: Any) -> None:
    if value is not None:
        check_time(name, value)


def check_bytes(name: str, value: Any, *, min_len: int = 1, max_len: int = 256) -> None:
    if not isinstance(value, bytes):
        raise ValueError(f"{name} must be bytes, got {type(value).__name__}")
    if not min_len <= len(value) <= max_len:
        raise ValueError(f"{name} must be {min_len}..{max_len} bytes long")


def check_tuple_of(name: str, value: Any, kind: type) -> None:
    if not isinstance(value, tuple):
        raise ValueError(f"{name} must be a tuple")
    for i, item in enumerate(value):
        if not isinstance(item, kind):
            raise ValueError(f"{name}[{i}] must be {kind.__name__}, got {type(item).__name__}")


def require_keys(where: str, data: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a map, got {type(data).__name__}")
    for key in keys:
        if key not in data:
            raise ValueError(f"{where} is missing field {key!r}")


MAX_UID = 64


def check_opt_uid(name: str, value: Any) -> None:
    """A submission's uid (random, from the daemon) or None for a legacy peer or log."""
    if value is not None:
        check_str(name, value, max_len=MAX_UID)
