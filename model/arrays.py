"""Job arrays: the ``--array`` range syntax and the expansion into jobs.

``START-END[:STEP][%MAX]`` (or a single index ``N``) names the indices; one
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

_SYNTAX = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?(?:%(\d+))?$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrayRange:
    """Indices ``start, start+step, ... <= end``, at most ``max_running`` running at once."""

    start: int
    end: int
    step: int = 1
    max_running: int | None = None

    def __post_init__(self) -> None:
        check_int("array start", self.start, minimum=0, maximum=MAX_ARRAY_INDEX)
        check_int("array end", self.end, minimum=0, maximum=MAX_ARRAY_INDEX)
        check_int("array step", self.step, minimum=1, maximum=MAX_ARRAY_INDEX)
        if self.end < self.start:
            raise ValueError(f"array range {self.start}-{self.end} ends before it starts")
        if self.max_running is not None:
            check_int("array %MAX", self.max_running, minimum=1, maximum=1 << 20)
        if self.count > MAX_ARRAY_JOBS:
            raise ValueError(f"an array has at most {MAX_ARRAY_JOBS} jobs, {self.count} asked")

    @property
    def count(self) -> int:
        return (self.end - self.start) // self.step + 1

    def indices(self) -> range:
        return range(self.start, self.end + 1, self.step)


def parse_array(text: str) -> ArrayRange:
    """``"1-1000:2%10"`` -> ArrayRange; ``ValueError`` naming the syntax otherwise."""
    match = _SYNTAX.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"bad array {text!r}: expected START-END[:STEP][%MAX] or N, e.g. 1-100:2%10")
    start, end, step, limit = match.groups()
    return ArrayRange(start=int(start), end=int(end if end is not None else start), step=int(step or 1),
                      max_running=int(limit) if limit is not None else None)


SLURM_ARRAY_SHAPE = ("SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX")


def array_member(spec: JobSpec, *, array_id: str, index: int, max_running: int | None,
                 array: ArrayRange | None = None) -> JobSpec:
    """The spec of one job of the array: the template plus its array fields and environment.
    With ``slurm_env`` (version 7) the array's shape too (``array``): its task count, min and max
    are known here only, not to the agent that runs one of its jobs."""
    names = (ENV_ARRAY_ID, ENV_ARRAY_INDEX) + (SLURM_ARRAY_SHAPE if spec.slurm_env else ())
    env = tuple(p for p in spec.env if p[0] not in names) + ((ENV_ARRAY_ID, array_id), (ENV_ARRAY_INDEX, str(index)))
    if spec.slurm_env and array is not None:
        last = array.indices()[-1]
        env += tuple(zip(SLURM_ARRAY_SHAPE, (str(array.count), str(array.start), str(last))))
    return replace(spec, env=env, array_id=array_id, array_index=index, array_max=max_running)
