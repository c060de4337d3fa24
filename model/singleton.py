"""``--dependency=singleton``: one job at a time per (owner, name).

Slurm's rule (slurmctld job_scheduler.c ``_find_singleton_job``): a singleton job may start only
when no other job of the same user and name is RUNNING, and none submitted before it (a lower
id) is still PENDING.  The other jobs need not be singletons themselves.  In token mode every
job belongs to one user (the key's user is None).

The index (``ControllerState.named``) holds, for each (user, name) with a live job, the ids of
its RUNNING jobs and the ids of its PENDING ones, sorted: a singleton job's check is O(1), and a
change of one job's state O(log n) plus the list's shift.  ``state.apply`` keeps it (one hook,
for the fact's own job: no fact changes another job's state), so replay rebuilds it; ``restore``
rebuilds it from the records and ``validate_state`` recomputes it.  It is None (and costs
nothing) until the first singleton job is submitted: then it is built from the job table once.
Pure.
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
        load = named.get(key_of(job))
        if load is None:
            named[key_of(job)] = NameLoad(pending=[_order(job)])
        else:
            bisect.insort(load.pending, _order(job))
    elif job.state is JobState.RUNNING:
        load = named.get(key_of(job))
        if load is None:
            named[key_of(job)] = NameLoad(running=(job.id,))
        else:
            load.running = (*load.running, job.id)


def moved(jobs: Mapping[str, JobRecord], named: dict[NameKey, NameLoad], job: JobRecord,
          before: JobState | None) -> tuple[str, ...]:
    """``job`` went from ``before`` (None: it is new) to its current state: update the index, and
    return the PENDING singleton jobs whose readiness may have changed (the key's first pending
    job before and after: only the first can be free to start).  Called by ``state.apply``."""
    key = key_of(job)
    load = named.get(key)
    if load is None:  # the key's first live job: nobody else to tell
        enter(named, job)
        return ()
    pending = load.pending
    first = pending[0][1] if pending else None
    if before is JobState.PENDING:
        order = _order(job)
        at = bisect.bisect_left(pending, order)
        if at < len(pending) and pending[at] == order:
            del pending[at]
    elif before is JobState.RUNNING:
        load.running = () if load.running == (job.id,) else tuple(j for j in load.running if j != job.id)
    if job.state is JobState.PENDING:
        bisect.insort(pending, _order(job))
    elif job.state is JobState.RUNNING:
        load.running = (*load.running, job.id)
    if not pending:
        if not load.running:
            del named[key]
        return () if first is None or first == job.id else _singletons(jobs, (first,))
    after = pending[0][1]
    if first is None or first == after:
        return () if after == job.id else _singletons(jobs, (after,))
    return _singletons(jobs, tuple(j for j in (first, after) if j != job.id))


def _singletons(jobs: Mapping[str, JobRecord], ids: tuple[str, ...]) -> tuple[str, ...]:
    """The ones of ``ids`` that are singleton jobs (others never wait on the index)."""
    return tuple(job_id for job_id in ids if jobs[job_id].spec.singleton)


def any_singleton(jobs: Mapping[str, JobRecord]) -> bool:
    """Whether the table has a singleton job: only then is the index kept (jobs are never removed,
    so replay, a restore and the live state agree on when it began)."""
    return any(job.spec.singleton for job in jobs.values())


def blocker(named: Mapping[NameKey, NameLoad] | None, job: JobRecord) -> str | None:
    """The job that keeps the PENDING singleton ``job`` waiting (RUNNING, or PENDING and submitted
    before it), or None when it may start as far as singleton goes."""
    load = named.get(key_of(job)) if named is not None else None
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


def normal(named: Mapping[NameKey, NameLoad] | None) -> dict | None:
    """The index in a form two equal indexes share (its running tuples in any order)."""
    if named is None:
        return None
    return {key: (sorted(load.running), list(load.pending)) for key, load in named.items()}
