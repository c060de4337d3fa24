"""``--dependency=singleton``: one job at a time per (owner, name).

Slurm's rule (slurmctld job_scheduler.c ``_find_singleton_job``): a singleton job may start only
when no other job of the same user and name is RUNNING, and none submitted before it (a lower
id) is still PENDING.  The other jobs need not be singletons themselves.  In token mode every
job belongs to one user (the key's user is None).

The index (``ControllerState.named``) holds, for each (user, name) with a live job, the ids of
its RUNNING jobs and the ids of its PENDING ones, sorted: a singleton job's check is O(1), and a
change of one job's state O(log n) plus the list's shift.  ``state.apply`` keeps it (one hook,
for the fact's own job: no fact changes another job's state), so replay rebuilds it; ``restore``
rebuilds it from the records and ``validate_state`` recomputes it.  Pure.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Mapping

from .jobs import JobRecord, JobState

NameKey = tuple  # (the owner's user name, or None in token mode; the job's name)


@dataclass(slots=True)
class NameLoad:
    """The live jobs of one (user, name)."""

    # Ids of its RUNNING jobs: a tuple (usually the shared empty one: an index entry per live job
    # costs little), replaced when it changes.
    running: tuple[str, ...] = ()
    pending: list[tuple[int, str]] = field(default_factory=list)  # its PENDING jobs by _order, sorted

    def first_pending(self) -> str | None:
        return self.pending[0][1] if self.pending else None


def key_of(job: JobRecord) -> NameKey:
    return (job.owner.user if job.owner is not None else None, job.spec.name)


def _order(job: JobRecord) -> tuple[int, str]:
    """Submit order: the controller issues decimal ids in sequence (state._submitted), so the
    shorter id is the older, and equal lengths sort as text."""
    return (len(job.id), job.id)


def enter(named: dict[NameKey, NameLoad], job: JobRecord) -> None:
    """Count ``job`` in its current state (a live one; a terminal job is not counted)."""
    if job.state is JobState.PENDING:
        load = named.setdefault(key_of(job), NameLoad())
        bisect.insort(load.pending, _order(job))
    elif job.state is JobState.RUNNING:
        load = named.setdefault(key_of(job), NameLoad())
        load.running = (*load.running, job.id)


def moved(jobs: Mapping[str, JobRecord], named: dict[NameKey, NameLoad], job: JobRecord,
          before: JobState | None) -> tuple[str, ...]:
    """``job`` went from ``before`` (None: it is new) to its current state: update the index, and
    return the PENDING singleton jobs whose readiness may have changed (the key's first pending
    job before and after: only the first can be free to start).  Called by ``state.apply``."""
    key = key_of(job)
    load = named.get(key)
    first = load.first_pending() if load is not None else None
    if load is not None:
        if before is JobState.PENDING:
            at = bisect.bisect_left(load.pending, _order(job))
            if at < len(load.pending) and load.pending[at] == _order(job):
                del load.pending[at]
        elif before is JobState.RUNNING:
            load.running = tuple(j for j in load.running if j != job.id)
    enter(named, job)
    load = named.get(key)
    if load is None:
        return ()
    after = load.first_pending()
    if not load.running and not load.pending:
        del named[key]
    out = []
    for job_id in {first, after} - {None, job.id}:
        other = jobs[job_id]  # type: ignore[index]
        if other.spec.singleton:
            out.append(other.id)
    return tuple(sorted(out))


def blocker(named: Mapping[NameKey, NameLoad], job: JobRecord) -> str | None:
    """The job that keeps the PENDING singleton ``job`` waiting (RUNNING, or PENDING and submitted
    before it), or None when it may start as far as singleton goes."""
    load = named.get(key_of(job))
    if load is None:
        return None
    if load.running:
        return min(load.running, key=lambda j: (len(j), j))
    if load.pending and load.pending[0] < _order(job):
        return load.pending[0][1]
    return None


def rebuild(jobs: Mapping[str, JobRecord]) -> dict[NameKey, NameLoad]:
    """The index of a job table (restore, validate_state)."""
    named: dict[NameKey, NameLoad] = {}
    for job in jobs.values():
        enter(named, job)
    return named


def normal(named: Mapping[NameKey, NameLoad]) -> dict:
    """The index in a form two equal indexes share (its running tuples in any order)."""
    return {key: (sorted(load.running), list(load.pending)) for key, load in named.items()}
