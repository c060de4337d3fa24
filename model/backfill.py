"""EASY backfill's arithmetic: when a blocked job could start, and what may start before it.

The scheduler (model/scheduler.py) walks the queue in priority order and starts every job that
fits.  Under the ``backfill`` policy the first job of each partition that does not fit gets a
*reservation*: the agent where it can start soonest, and when, assuming every running job
ends at its time limit (started + time_limit).  A job further down the queue may then start on
that agent only if it ends before the reservation's start (it has a time limit and now + limit
<= start) or if it fits in what the reserved job leaves over at that start (the reservation's
``extra``), which it then consumes.  So no job started by backfill can delay a reserved job's
start: the invariant INV-BACKFILL-PROMISE (docs/invariants.md), checked by
tests/model/test_backfill.py.

A running job without a time limit ends, as far as this arithmetic knows, never: a job that
needs its resources gets no reservation (its start is unknown), and nothing is held back for
it.  Pure functions over plain tuples: no state of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

INFINITY = math.inf


class Usage(NamedTuple):
    """What one job holds of an agent: slots (CPUs), memory (None: none), GPUs, gres."""

    slots: int
    mem: int | None = None
    gpus: int = 0
    gres: tuple[tuple[str, int], ...] = ()


class Release(NamedTuple):
    """A running (or just proposed) job on an agent: when it ends at the latest, what it frees."""

    end: float  # INFINITY: no time limit
    usage: Usage


@dataclass(slots=True)
class Reservation:
    """A blocked job's promised start on one agent, and what is left over there at that time."""

    job: str
    agent: str
    start: float
    extra_slots: int
    extra_mem: int | None  # None: the agent schedules no memory
    extra_gpus: int
    extra_gres: dict[str, int] = field(default_factory=dict)

    def admits(self, usage: Usage, now: float, time_limit: float | None) -> bool:
        """Whether a job of ``usage`` may start on this agent now without delaying the promise:
        it ends before the reserved start, or it fits in what the reserved job leaves over."""
        if time_limit is not None and now + time_limit <= self.start:
            return True
        return self._fits_extra(usage)

    def _fits_extra(self, usage: Usage) -> bool:
        if usage.slots > self.extra_slots or usage.gpus > self.extra_gpus:
            return False
        if usage.mem is not None and (self.extra_mem is None or usage.mem > self.extra_mem):
            return False
        return all(count <= self.extra_gres.get(kind, 0) for kind, count in usage.gres)

    def consume(self, usage: Usage, now: float, time_limit: float | None) -> None:
        """Account for a job ``admits`` let start: one that outlasts the start takes from the extra."""
        if time_limit is not None and now + time_limit <= self.start:
            return
        self.extra_slots -= usage.slots
        self.extra_gpus -= usage.gpus
        if usage.mem is not None and self.extra_mem is not None:
            self.extra_mem -= usage.mem
        for kind, count in usage.gres:
            self.extra_gres[kind] = self.extra_gres.get(kind, 0) - count


class Free(NamedTuple):
    """What is free on an agent now (after this pass's proposals)."""

    slots: int
    mem: int | None
    gpus: int
    gres: tuple[tuple[str, int], ...]


def earliest_start(job: str, agent: str, need: Usage, free: Free, releases: Iterable[Release],
                   now: float) -> Reservation | None:
    """When ``need`` fits on ``agent`` at the earliest, if every job there ends at its limit.

    None when it never does by what is known (a job without a time limit holds what it needs, or
    the agent is too small).  O(r log r) in the jobs running there."""
    slots, mem, gpus = free.slots, free.mem, free.gpus
    gres = dict(free.gres)
    if mem is None and need.mem is not None:
        return None  # the agent schedules no memory: the job never runs there
    start = now
    for end, held in sorted(releases, key=lambda r: r.end):
        if _covers(need, slots, mem, gpus, gres):
            break
        if end == INFINITY:
            return None
        start = max(now, end)
        slots += held.slots
        gpus += held.gpus
        if mem is not None and held.mem is not None:
            mem += held.mem
        for kind, count in held.gres:
            gres[kind] = gres.get(kind, 0) + count
    if not _covers(need, slots, mem, gpus, gres):
        return None
    for kind, count in need.gres:
        gres[kind] -= count
    return Reservation(job=job, agent=agent, start=start, extra_slots=slots - need.slots,
                       extra_mem=None if mem is None else mem - (need.mem or 0),
                       extra_gpus=gpus - need.gpus, extra_gres=gres)


def _covers(need: Usage, slots: int, mem: int | None, gpus: int, gres: dict[str, int]) -> bool:
    if need.slots > slots or need.gpus > gpus:
        return False
    if need.mem is not None and (mem is None or need.mem > mem):
        return False
    return all(count <= gres.get(kind, 0) for kind, count in need.gres)
