"""Job arrays: the ``--array`` syntax and the expansion into jobs.

``START-END[:STEP][%MAX]`` (or a single index ``N``) names the indices, or, as
Slurm's ``--array``, a comma-separated list of them with one ``%MAX`` at the end
for the whole array (``1-3,7,10-20:5%4``: indices 1 2 3 7 10 15 20, at most 4
running); indices named twice are one job, in increasing order (Slurm's bitmap).  One
array submit becomes one JobSubmitted fact per index, all in one ``handle``
call (one group commit).  The array's id is its first job's id (like Slurm's
array master job): every job of the array carries it as ``spec.array_id`` and
in its environment as ``RECKON_ARRAY_ID``, and its index as ``array_index`` and
``RECKON_ARRAY_INDEX``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ._check import check_int
from .jobs import JobSpec

MAX_ARRAY_JOBS = 100_000  # jobs of one array submit
MAX_ARRAY_INDEX = (1 << 31) - 1
ENV_ARRAY_ID = "RECKON_ARRAY_ID"
ENV_ARRAY_INDEX = "RECKON_ARRAY_INDEX"

_TOKEN = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
SYNTAX_HELP = "expected START-END[:STEP][%MAX], N, or a list of them, e.g. 1-100:2%10 or 1,3,5-9:2%4"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrayRange:
    """Indices ``start, start+step, ... <= end``, at most ``max_running`` running at once; or, for
    a list (``listed``), exactly those indices (increasing; ``start``/``end`` their first and last,
    ``step`` the list's first ``:STEP``, else 1: what Slurm puts in SLURM_ARRAY_TASK_STEP)."""

    start: int
    end: int
    step: int = 1
    max_running: int | None = None
    listed: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_int("array start", self.start, minimum=0, maximum=MAX_ARRAY_INDEX)
        check_int("array end", self.end, minimum=0, maximum=MAX_ARRAY_INDEX)
        check_int("array step", self.step, minimum=1, maximum=MAX_ARRAY_INDEX)
        if self.end < self.start:
            raise ValueError(f"array range {self.start}-{self.end} ends before it starts")
        if self.max_running is not None:
            check_int("array %MAX", self.max_running, minimum=1, maximum=1 << 20)
        if self.listed is not None:
            if not isinstance(self.listed, tuple) or not self.listed:
                raise ValueError("array listed must be a non-empty tuple of indices")
            for i in self.listed:
                check_int("array index", i, minimum=0, maximum=MAX_ARRAY_INDEX)
            if any(a >= b for a, b in zip(self.listed, self.listed[1:])):
                raise ValueError("array listed indices must increase")
            if (self.listed[0], self.listed[-1]) != (self.start, self.end):
                raise ValueError("array start and end must be its first and last listed index")
        if self.count > MAX_ARRAY_JOBS:
            raise ValueError(f"an array has at most {MAX_ARRAY_JOBS} jobs, {self.count} asked")

    @property
    def count(self) -> int:
        if self.listed is not None:
            return len(self.listed)
        return (self.end - self.start) // self.step + 1

    def indices(self) -> range | tuple[int, ...]:
        if self.listed is not None:
            return self.listed
        return range(self.start, self.end + 1, self.step)


def parse_array(text: str) -> ArrayRange:
    """``"1-1000:2%10"`` or ``"1,3,5-9:2%4"`` -> ArrayRange; ``ValueError`` naming the syntax otherwise.

    Each item is checked as a range of its own; the items' counts together are held to
    MAX_ARRAY_JOBS (before overlaps merge: no index set of the whole text is built first).
    """
    if not isinstance(text, str):
        raise ValueError(f"bad array {text!r}: {SYNTAX_HELP}")
    body, pct, limit = text.strip().partition("%")
    matches = [_TOKEN.fullmatch(item) for item in body.split(",")]
    if any(m is None for m in matches) or (pct and not limit.isdecimal()):
        raise ValueError(f"bad array {text!r}: {SYNTAX_HELP}")
    max_running = int(limit) if pct else None
    ranges = []
    for match in matches:
        start, end, step = match.groups()  # type: ignore[union-attr]
        ranges.append(ArrayRange(start=int(start), end=int(end if end is not None else start), step=int(step or 1),
                                 max_running=max_running))
    if len(ranges) == 1:
        return ranges[0]
    total = sum(r.count for r in ranges)
    if total > MAX_ARRAY_JOBS:
        raise ValueError(f"an array has at most {MAX_ARRAY_JOBS} jobs, {total} asked")
    listed = tuple(sorted({i for r in ranges for i in r.indices()}))
    step = next((int(m.group(3)) for m in matches if m.group(3) is not None), 1)  # type: ignore[union-attr]
    return ArrayRange(start=listed[0], end=listed[-1], step=step, max_running=max_running, listed=listed)


SLURM_ARRAY_SHAPE = ("SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")


def array_member(spec: JobSpec, *, array_id: str, index: int, max_running: int | None,
                 array: ArrayRange | None = None) -> JobSpec:
    """The spec of one job of the array: the template plus its array fields and environment.
    With ``slurm_env`` (version 7) the array's shape too (``array``): its task count, min, max and
    step (Slurm's: the first ``:STEP`` of the text, else 1) are known here only, not to the agent
    that runs one of its jobs."""
    names = (ENV_ARRAY_ID, ENV_ARRAY_INDEX) + (SLURM_ARRAY_SHAPE if spec.slurm_env else ())
    env = tuple(p for p in spec.env if p[0] not in names) + ((ENV_ARRAY_ID, array_id), (ENV_ARRAY_INDEX, str(index)))
    if spec.slurm_env and array is not None:
        last = array.indices()[-1]
        env += tuple(zip(SLURM_ARRAY_SHAPE, (str(array.count), str(array.start), str(last), str(array.step))))
    return replace(spec, env=env, array_id=array_id, array_index=index, array_max=max_running)
