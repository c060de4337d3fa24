"""``--begin``: a job is not dispatched before its spec's ``begin`` time.

Time reaches the model only in events: the controller's clock (``Volatile.clock``) is the latest
``now`` it has handled (the highest: a wall clock stepping back never makes a released job wait
again).  ``policy.ready`` compares a job's begin with it.  The scheduler must hear of a job again
when the clock passes its begin, without a walk of every pending job: the jobs noted while their
begin is ahead wait in a heap by begin time, and after every handled event (``due``, a POST_HANDLE
hook) those whose time has come are noted again.  The daemon's tick (every second, always) makes
sure the clock moves when nothing else happens.  Volatile: rebuilt from the state at a start.
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable

from .jobs import JobRecord, JobState

# The volatile view and the transaction (model/transaction.py) are ``Any`` here: that module
# imports this one (no import circle, not even for the type checker).
Volatile = Transaction = Any


def watch(volatile: Volatile, job: JobRecord) -> None:
    """Keep a PENDING job whose begin is ahead of the clock until its time comes (once)."""
    begin = job.spec.begin
    if begin is not None and begin > volatile.clock and job.state is JobState.PENDING \
            and job.id not in volatile.begin_queued:
        volatile.begin_queued.add(job.id)
        heapq.heappush(volatile.begin_heap, (begin, int(job.id), job.id))


def watch_all(volatile: Volatile, jobs: Iterable[JobRecord]) -> None:
    """A start: every pending job with a begin time (one walk, as replay's)."""
    for job in jobs:
        if job.spec.begin is not None:
            watch(volatile, job)


def advance(volatile: Volatile, event: Any) -> None:
    """The clock moves to the event's ``now`` (never back)."""
    now = getattr(event, "now", None)
    if now is not None and now > volatile.clock:
        volatile.clock = now


def due(tx: Transaction) -> None:
    """After every handled event (model.controller's POST_HANDLE): note again every job whose begin
    the clock has reached (a heap pop each)."""
    heap = tx.volatile.begin_heap
    clock = tx.volatile.clock
    while heap and heap[0][0] <= clock:
        _, _, job_id = heapq.heappop(heap)
        tx.volatile.begin_queued.discard(job_id)
        job = tx.state.jobs.get(job_id)
        if job is not None and job.state is JobState.PENDING:
            tx.note_job(job)


def waiting_reason(job: JobRecord, clock: float) -> str | None:
    """``reckon show``'s words for a job whose begin is ahead, else None."""
    begin = job.spec.begin
    if begin is None or begin <= clock:
        return None
    return f"waiting for its begin time (--begin): {begin - clock:.0f}s from now (BeginTime)"
