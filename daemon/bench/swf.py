"""Reading the Standard Workload Format (SWF) of the Parallel Workloads Archive.

https://www.cs.huji.ac.il/labs/parallel/workload/swf.html: one job a line, 18 whitespace-separated
numeric fields, -1 where a value is unknown; header comments start with ``;`` (``; MaxProcs: 100``).
The fields a replay uses: 1 job number, 2 submit time, 3 wait time, 4 run time, 5 allocated
processors, 8 requested processors, 9 requested time, 11 status (1 completed, 0 failed, 5
cancelled), 12 user, 13 group.

A malformed line is a ``SwfError`` naming its line, in one line.  ``replay_skip`` says which jobs a
replay leaves out, following the format's own definitions: a job whose run time or processors are
unknown (or zero processors), and a cancelled job that never ran (cancelled while queued: run time
0).  Failed jobs ran and held their processors until they ended, so they are replayed (the
production figures of a log count them too).  Pure: no I/O but ``read``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

FIELDS = 18
UNKNOWN = -1
COMPLETED, FAILED, CANCELLED = 1, 0, 5

# The 18 fields, in order, by their names in the format's definition (for the error lines).
FIELD_NAMES = (
    "job number", "submit time", "wait time", "run time", "allocated processors", "average CPU time",
    "used memory", "requested processors", "requested time", "requested memory", "status", "user id",
    "group id", "executable number", "queue number", "partition number", "preceding job", "think time",
)
# Fields the format allows to be fractional (times); the rest are integers.
_TIME_FIELDS = frozenset({1, 2, 3, 5, 8, 17})


class SwfError(ValueError):
    """A malformed SWF file: the message names the file and line, in one line."""


@dataclass(frozen=True, slots=True)
class SwfJob:
    """One job line; None where the log says -1 (unknown)."""

    number: int
    submit: float
    wait: float | None
    run: float | None
    procs: int | None  # allocated processors (field 5), else the requested ones (field 8)
    requested_time: float | None
    status: int | None
    user: int | None
    group: int | None
    line: int  # where it is in the file


@dataclass(slots=True)
class SwfTrace:
    jobs: list[SwfJob]
    header: dict[str, str] = field(default_factory=dict)  # "; Key: value" comments, the first of each key

    def _int_header(self, key: str) -> int | None:
        value = self.header.get(key)
        return int(value) if value is not None else None

    @property
    def max_procs(self) -> int | None:
        return self._int_header("MaxProcs")

    @property
    def max_nodes(self) -> int | None:
        return self._int_header("MaxNodes")

    @property
    def unix_start(self) -> int:
        """The epoch time of the log's time 0 (0 if the header does not say)."""
        return self._int_header("UnixStartTime") or 0


def _value(text: str, index: int, where: str) -> float | int | None:
    try:
        value: float | int = float(text) if index in _TIME_FIELDS else int(text)
    except ValueError:
        kind = "a number" if index in _TIME_FIELDS else "an integer"
        raise SwfError(f"{where}: field {index + 1} ({FIELD_NAMES[index]}) is {text!r}, not {kind}") from None
    if value == UNKNOWN:
        return None
    if value < 0:
        raise SwfError(f"{where}: field {index + 1} ({FIELD_NAMES[index]}) is {text}: negative, and not -1 (unknown)")
    if value != value or value in (float("inf"), float("-inf")):
        raise SwfError(f"{where}: field {index + 1} ({FIELD_NAMES[index]}) is {text}: not a finite number")
    return value


def _header(text: str, header: dict[str, str], where: str) -> None:
    """A ``; Key: value`` comment: kept (the first of each key); MaxProcs and MaxNodes must be integers."""
    body = text[1:].strip()
    key, sep, value = body.partition(":")
    key, value = key.strip(), value.strip()
    if not sep or not key or " " in key:
        return  # a comment, a continuation line, or an empty ";"
    if key in ("MaxProcs", "MaxNodes", "UnixStartTime"):  # the ones a replay reads
        try:
            count = int(value)
        except ValueError:
            raise SwfError(f"{where}: header {key} is {value!r}, not an integer") from None
        if count < (0 if key == "UnixStartTime" else 1):
            raise SwfError(f"{where}: header {key} is {count}: it must be positive")
    header.setdefault(key, value)


def parse(lines: Iterable[str], source: str = "<swf>") -> SwfTrace:
    """The trace in ``lines`` (``source`` names it in errors)."""
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    for number, text in enumerate(lines, 1):
        where = f"{source}: line {number}"
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith(";"):
            _header(stripped, header, where)
            continue
        parts = stripped.split()
        if len(parts) != FIELDS:
            raise SwfError(f"{where}: {len(parts)} field{'s' if len(parts) != 1 else ''}, an SWF job line has {FIELDS}")
        v = [_value(part, i, where) for i, part in enumerate(parts)]
        if v[0] is None:
            raise SwfError(f"{where}: the job number is unknown (-1)")
        if v[1] is None:
            raise SwfError(f"{where}: job {v[0]}'s submit time is unknown (-1)")
        procs = v[4] if v[4] is not None else v[7]
        jobs.append(SwfJob(number=int(v[0]), submit=float(v[1]), wait=v[2], run=v[3], procs=procs,  # type: ignore[arg-type]
                           requested_time=v[8], status=v[10], user=v[11], group=v[12], line=number))  # type: ignore[arg-type]
    return SwfTrace(jobs=jobs, header=header)


def read(path: str | Path) -> SwfTrace:
    """Parse the SWF file at ``path``; ``SwfError`` for a malformed one, ``OSError`` for an unreadable one."""
    with open(path, encoding="ascii", errors="replace") as f:
        return parse(f, str(path))


def replay_skip(job: SwfJob) -> str | None:
    """Why a replay leaves ``job`` out, or None if it replays it (see the module docstring)."""
    if job.run is None:
        return "run time unknown"
    if not job.procs:
        return "no processors"
    if job.status == CANCELLED and job.run <= 0:
        return "cancelled before it ran"
    return None
