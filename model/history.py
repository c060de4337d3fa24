"""A job's history, folded from the fact log: every attempt and why each ended.

Pure: the daemon reads the facts (from its store) and hands them here.  A
snapshot that pruned the log keeps job records, not their history: when the
job's submission is no longer in the facts given, ``compacted`` says so and
the attempts shown start where the log does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from . import facts as F
from .resources import Usage


@dataclass(slots=True)
class Attempt:
    attempt: int
    agent: str | None = None
    placed: str = "dispatched"  # "dispatched" by the scheduler, or "adopted" from an agent that ran it
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    via: str | None = None  # how the outcome arrived: "report", "round" (None: not recorded)
    ended: str = "running"  # running, finished, timed out, oom, not run, requeued, cancelled
    reason: str | None = None  # why it was requeued or cancelled
    gpus: tuple[int, ...] = ()  # the GPU indices its dispatch (or adoption) recorded
    usage: Usage | None = None  # what it used, as its agent measured it (None: not measured, or not finished)

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "agent": self.agent, "placed": self.placed, "started_at": self.started_at,
                "finished_at": self.finished_at, "exit_code": self.exit_code, "signal": self.signal,
                "via": self.via, "ended": self.ended, "reason": self.reason, "gpus": list(self.gpus),
                "usage": self.usage.to_dict() if self.usage is not None else None}


@dataclass(slots=True)
class JobHistory:
    job: str
    compacted: bool = True  # the submission is not among the facts: older history was pruned by a snapshot
    submitted_at: float | None = None
    attempts: dict[int, Attempt] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # requeues and cancels, in log order

    def _attempt(self, number: int) -> Attempt:
        entry = self.attempts.get(number)
        if entry is None:
            entry = self.attempts[number] = Attempt(attempt=number)
        return entry

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "compacted": self.compacted, "submitted_at": self.submitted_at,
                "attempts": [a.to_dict() for a in sorted(self.attempts.values(), key=lambda a: a.attempt)],
                "events": list(self.events)}


def job_history(job: str, facts: Iterable[F.Fact]) -> JobHistory:
    """Fold the facts about ``job`` (others are skipped) into its history."""
    h = JobHistory(job=job)
    cancel_requested = False
    requeue_asked: set[int] = set()  # attempts a user requeued while they ran
    for fact in facts:
        if getattr(fact, "job", None) != job:
            continue
        kind = type(fact)
        if kind is F.JobSubmitted:
            h.compacted, h.submitted_at = False, fact.submitted_at
        elif kind is F.JobDispatched:
            a = h._attempt(fact.attempt)
            a.agent, a.gpus = fact.agent, fact.gpus
        elif kind is F.JobAdopted:
            a = h._attempt(fact.attempt)
            a.agent, a.placed, a.gpus = fact.agent, "adopted", fact.gpus
            a.started_at = fact.started_at if fact.started_at is not None else a.started_at
        elif kind is F.JobStarted:
            h._attempt(fact.attempt).started_at = fact.started_at
        elif kind is F.JobFinished:
            a = h._attempt(fact.attempt)
            a.ended, a.exit_code, a.signal, a.finished_at, a.via = (
                "finished", fact.exit_code, fact.signal, fact.finished_at, fact.via)
            a.usage = fact.usage
            if cancel_requested:  # the process ended after the kill the cancel sent: the job is CANCELLED
                a.ended, a.reason = "cancelled", "cancelled by a user while running"
            elif fact.attempt in requeue_asked:  # stopped for a user's requeue: not the job's outcome
                a.ended, a.reason = "requeued", "requeued by a user while running: runs again as a new attempt"
            elif fact.timed_out:  # the supervisor stopped it at the job's --time limit
                a.ended, a.reason = "timed out", "stopped at its time limit"
            elif fact.oom:  # past its --mem, or (none given, or all its agent's jobs together) the agent's memory
                a.ended, a.reason = "oom", "killed for exceeding its memory limit (--mem, or its agent's memory)"
            elif fact.not_run is not None:  # the agent refused to start it (exit 126/127)
                a.ended, a.reason = "not run", f"not run: {fact.not_run}"
            if fact.started_at is not None and a.started_at is None:
                a.started_at = fact.started_at
        elif kind is F.JobRequeued:
            a = h._attempt(fact.attempt)
            a.ended, a.reason = "requeued", fact.reason
            if fact.requeued_at is not None:  # v2: when the controller gave it up (older facts did not say)
                a.finished_at = fact.requeued_at
            h.events.append({"event": "requeued", "attempt": fact.attempt, "reason": fact.reason})
        elif kind is F.JobRequeueRequested:
            requeue_asked.add(fact.attempt)
            h.events.append({"event": "requeue_requested", "attempt": fact.attempt,
                             "reason": "requeued by a user while running"})
        elif kind is F.JobCancelRequested:
            cancel_requested = True
            h.events.append({"event": "cancel_requested", "attempt": max(h.attempts, default=None),
                             "reason": "cancelled by a user while running"})
        elif kind is F.JobCancelConfirmed:
            a = h._attempt(fact.attempt)
            a.ended, a.reason = "cancelled", "cancelled by a user; its process is gone"
            if fact.confirmed_at is not None:  # v2, likewise
                a.finished_at = fact.confirmed_at
            h.events.append({"event": "cancelled", "attempt": fact.attempt, "reason": a.reason})
        elif kind is F.JobCancelled:
            event = {"event": "cancelled", "attempt": None, "reason": fact.reason or "cancelled by a user before it ran"}
            if fact.cancelled_at is not None:  # v3: when (older facts did not say)
                event["at"] = fact.cancelled_at
            h.events.append(event)
        elif kind is F.JobHeld:
            h.events.append({"event": "held", "attempt": None, "reason": "held by a user"})
        elif kind is F.JobReleased:
            h.events.append({"event": "released", "attempt": None, "reason": "released by a user"})
        elif kind is F.JobRestarted:
            cancel_requested = False  # the new attempt starts afresh
            h.events.append({"event": "requeued", "attempt": fact.attempt,
                             "reason": "requeued by a user: runs again as a new attempt"})
    return h
