"""A job spec's wire form (``JobSpec.to_dict``'s shape), built without the model: the light clients'.

`reckon submit`, the Slurm-style commands and ``import reckon`` send a plain dict; the controller
reads it with ``JobSpec.from_dict`` and refuses a bad one in one line.  Importing the model's
JobSpec (dataclasses, inspect, enum, re) was a third of a submit's start-up, so only the checks a
user most often trips over stay here, cheap and with the model's own words (a usage error before
any connection): counts, sizes, durations, generic resources.  The limits are the model's
(tests/daemon/test_blocking_spec.py compares them, and the dicts, with ``JobSpec``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any, Iterable

# model/jobs.py and model/resources.py (not imported: see the docstring).
MAX_SLOTS = 1 << 16
MAX_RETRIES = 1000
MAX_AFTER = 1000
MAX_TIME_LIMIT = 365 * 24 * 3600.0
MAX_MEM = 1 << 60
MAX_GPUS = 1024
MAX_GRES_NAMES = 64
MAX_GRES_COUNT = 1 << 30
SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_NAME_REST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def check_int(name: str, value: object, minimum: int, maximum: int) -> None:
    """model/_check.py's check_int, word for word."""
    if type(value) is not int:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")


def format_size(value: int | None) -> str:
    """model.resources.format_size: ``4G``, ``512M``, ``768K``, else one decimal (``23.5G``)."""
    if value is None:
        return "-"
    for suffix in ("T", "G", "M", "K"):
        unit = SIZE_UNITS[suffix]
        if value >= unit and value % unit == 0 and (suffix != "K" or value < SIZE_UNITS["M"]):
            return f"{value // unit}{suffix}"
    for suffix in ("T", "G", "M"):
        unit = SIZE_UNITS[suffix]
        if value >= unit:
            return f"{value / unit:.1f}{suffix}"
    return f"{value}B"


def parse_size(text: str) -> int:
    """model.resources.parse_size without its regular expression: ``512M``, ``4G``, ``1.5G``, ``2048`` (MiB)."""
    if not isinstance(text, str):
        raise ValueError(f"a size must be a string like 512M or 4G, got {type(text).__name__}")
    body = text.strip(" \t\n\r\f\v")
    if body[-1:] in ("B", "b"):  # the model's (?:i?[Bb])?
        body = body[:-1]
        if body[-1:] == "i":
            body = body[:-1]
    unit = "M"
    if body[-1:].upper() in SIZE_UNITS:
        unit, body = body[-1].upper(), body[:-1]
    number = body.rstrip(" \t\n\r\f\v")
    whole, dot, fraction = number.partition(".")
    if not (whole.isdecimal() and (not dot or fraction.isdecimal())):
        raise ValueError(f"bad size {text!r}: a number with an optional K, M, G or T suffix (512M, 4G)")
    value = int(float(number) * SIZE_UNITS[unit])
    if not 0 < value <= MAX_MEM:
        raise ValueError(f"bad size {text!r}: it must be more than 0 and at most {format_size(MAX_MEM)}")
    return value


def parse_gres(items: Iterable[str]) -> list[list[Any]]:
    """``["license:2", "fpga"]`` -> ``[["fpga", 1], ["license", 2]]`` (the wire's pairs); a repeated
    name's counts add up; the model's words for a bad one."""
    counts: dict[str, int] = {}
    for item in items:
        kind, sep, count = item.partition(":")
        try:
            n = int(count) if sep else 1
        except ValueError:
            raise ValueError(f"bad generic resource {item!r}: NAME or NAME:COUNT") from None
        counts[kind] = counts.get(kind, 0) + n
    if len(counts) > MAX_GRES_NAMES:
        raise ValueError(f"gres names more than {MAX_GRES_NAMES} generic resources")
    for kind in sorted(counts):
        if not kind:
            raise ValueError("gres name must not be empty")
        if len(kind) > 64:
            raise ValueError("gres name is longer than 64 characters")
        if (not (kind[0].isascii() and kind[0].isalpha()) or not _NAME_REST.issuperset(kind)
                or kind == "gpu"):
            raise ValueError(f"bad generic resource name {kind!r}: a letter, then letters, digits, _ . -"
                             + (" (GPUs are --gpus)" if kind == "gpu" else ""))
        check_int(f"gres count of {kind}", counts[kind], 1, MAX_GRES_COUNT)
    return [[kind, counts[kind]] for kind in sorted(counts)]


def job_spec(command: list[str] | tuple[str, ...], *, name: str | None = None, cwd: str | None = None,
             env: Iterable[tuple[str, str]] | dict[str, str] = (), cpus: int = 1, mem: int | str | None = None,
             gpus: int = 0, gres: Iterable[str] | dict[str, int] = (), time_limit: float | None = None,
             retries: int = 0, retry_on_exit: Iterable[int] = (), after: Iterable[str] = (),
             output: str | None = None, error: str | None = None, **more: Any) -> dict[str, Any]:
    """The wire dict of a job (``JobSpec.to_dict``'s: a field at its default left out).

    ``name`` defaults to the command's file name; ``mem`` is bytes, or a size text (``4G``);
    ``gres`` names (``"license:2"``) or a name -> count map; ``more`` goes into the dict as given
    (a newer field: the controller checks it).  ``ValueError`` in one line for what is checked here.
    """
    argv = list(command)
    if not argv:
        raise ValueError("command must not be empty")
    for i, arg in enumerate(argv):
        if type(arg) is not str:
            raise ValueError(f"command[{i}] must be a string, got {type(arg).__name__}")
    if name is None:
        name = argv[0].rstrip("/").rpartition("/")[2] or argv[0]
    pairs = [[k, v] for k, v in (env.items() if isinstance(env, dict) else env)]
    check_int("slots", cpus, 1, MAX_SLOTS)
    spec: dict[str, Any] = {"name": name, "command": argv, "cwd": cwd, "env": pairs, "slots": cpus}
    if time_limit is not None:
        if type(time_limit) not in (int, float) or not 0 < time_limit <= MAX_TIME_LIMIT:
            raise ValueError(f"time_limit must be a number of seconds in (0, {MAX_TIME_LIMIT:.0f}]")
        spec["time_limit"] = time_limit
    check_int("retries", retries, 0, MAX_RETRIES)
    if retries:
        spec["retries"] = retries
    codes = list(retry_on_exit)
    for code in codes:
        check_int("retry_on_exit code", code, 1, 255)
    if codes:
        if not retries:
            raise ValueError("retry_on_exit needs retries > 0")
        spec["retry_on_exit"] = codes
    deps = [after] if isinstance(after, str) else list(after)
    if len(deps) > MAX_AFTER:
        raise ValueError(f"the dependencies name more than {MAX_AFTER} jobs")
    if len(set(deps)) != len(deps):
        raise ValueError("the dependencies name a job twice")
    if deps:
        spec["after"] = deps
    if output is not None:
        spec["output"] = output
    if error is not None:
        spec["error"] = error
    if mem is not None:
        spec["mem"] = parse_size(mem) if isinstance(mem, str) else mem
        check_int("mem", spec["mem"], 1, MAX_MEM)
    check_int("gpus", gpus, 0, MAX_GPUS)
    if gpus:
        spec["gpus"] = gpus
    wanted = parse_gres(f"{k}:{v}" for k, v in gres.items()) if isinstance(gres, dict) else parse_gres(gres)
    if wanted:
        spec["gres"] = wanted
    spec.update(more)
    return spec


MAX_ARRAY_JOBS = 100_000  # model/arrays.py
MAX_ARRAY_INDEX = (1 << 31) - 1
ARRAY_SYNTAX = "expected START-END[:STEP][%MAX], N, or a list of them, e.g. 1-100:2%10 or 1,3,5-9:2%4"


def check_array(text: str) -> None:
    """model.arrays.parse_array's checks, without its regular expression (the controller parses it again)."""
    array_items(text)


def array_items(text: str) -> tuple[list[tuple[int, int, int]], int | None]:
    """``1,3,5-9:2%4`` -> ([(1, 1, 1), (3, 3, 1), (5, 9, 2)], 4): model.arrays.parse_array's
    items (first, last, step) and ``%MAX``, with its checks and words."""
    body = text.strip() if isinstance(text, str) else ""
    rest, pct, limit = body.partition("%")
    if pct and not limit.isdecimal():
        raise ValueError(f"bad array {text!r}: {ARRAY_SYNTAX}")
    items: list[tuple[int, int, int]] = []
    total = 0
    for item in rest.split(","):
        span, colon, step = item.partition(":")
        start, dash, end = span.partition("-")
        parts = [start] + ([end] if dash else []) + ([step] if colon else [])
        if not all(p.isdecimal() for p in parts) or (colon and not dash):
            raise ValueError(f"bad array {text!r}: {ARRAY_SYNTAX}")
        items.append((int(start), int(end if dash else start), int(step or 1)))
    for first, last, every in items:
        check_int("array start", first, 0, MAX_ARRAY_INDEX)
        check_int("array end", last, 0, MAX_ARRAY_INDEX)
        check_int("array step", every, 1, MAX_ARRAY_INDEX)
        if last < first:
            raise ValueError(f"array range {first}-{last} ends before it starts")
        if pct:
            check_int("array %MAX", int(limit), 1, 1 << 20)
        count = (last - first) // every + 1
        if count > MAX_ARRAY_JOBS:
            raise ValueError(f"an array has at most {MAX_ARRAY_JOBS} jobs, {count} asked")
        total += count
    if total > MAX_ARRAY_JOBS:
        raise ValueError(f"an array has at most {MAX_ARRAY_JOBS} jobs, {total} asked")
    return items, int(limit) if pct else None
