"""Job policies: retries, dependencies, holds and array throttles.

Pure functions of the job table.  ``state.apply`` asks ``retry_due`` when an
attempt ends (so replay decides exactly as live did); the controller asks
``ready`` for the scheduler's notes and ``doomed_dependants`` when a job ends
without completing; ``array_full`` gates dispatch.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from .jobs import TERMINAL_STATES, JobRecord, JobSpec, JobState
from .scheduler import UserLimits
from .singleton import NameLoad, blocker


class JobTable(Protocol):
    """What these policies read of the controller's state (``state.ControllerState`` is one).

    A protocol, not an import of ``state``: ``state.apply`` asks ``retry_due``, so ``state``
    imports this module and this module must not import it back."""

    @property
    def jobs(self) -> Mapping[str, JobRecord]: ...

    @property
    def dependants(self) -> Mapping[str, list[str]]: ...

    @property
    def array_running(self) -> Mapping[str, int]: ...

    @property
    def user_running(self) -> Mapping[str, list[int]]: ...

    @property
    def named(self) -> Mapping[tuple, NameLoad] | None: ...

TIMEOUT_REASON = "timeout"  # JobRecord.reason of a job its supervisor stopped at its time limit


def retry_due(spec: JobSpec, *, retried: int, exit_code: int | None, signal: int | None,
              timed_out: bool, cancel_requested: bool, oom: bool = False) -> bool:
    """Whether a finished attempt is run again instead of ending the job FAILED.

    Retried: a non-zero exit (any, or one of ``retry_on_exit``) or, without
    ``retry_on_exit``, a death by signal.  Never retried: success, a cancelled
    job, an attempt stopped at its time limit (it would most likely time out
    again), one killed for exceeding its memory (so would the next), and a job that has used up
    its ``retries``.  A lost attempt is not
    a failure: it is requeued by the controller and does not count here.
    """
    if cancel_requested or timed_out or oom or retried >= spec.retries:
        return False
    if signal is None and exit_code == 0:
        return False
    if spec.retry_on_exit:
        return signal is None and exit_code in spec.retry_on_exit
    return True


NOT_OK_STATES = frozenset({JobState.FAILED, JobState.CANCELLED})
# Which end states meet each kind of dependency (after = afterok, after_any, after_not_ok).
_MEETS = {"after": frozenset({JobState.COMPLETED}), "after_any": TERMINAL_STATES, "after_not_ok": NOT_OK_STATES}
_FLAG = {"after": "--after", "after_any": "after_any", "after_not_ok": "after_not_ok"}


def ready(state: JobTable, job: JobRecord, now: float | None = None) -> bool:
    """A PENDING job the scheduler may place: not held, its begin time reached (``now``: the
    controller's clock, ``Volatile.clock``; None: a job with a begin time is not ready), no other
    job of its name and owner in the way (singleton), every dependency met (after: COMPLETED;
    after_any: ended in any state; after_not_ok: ended FAILED or CANCELLED)."""
    if job.state is not JobState.PENDING or job.held:
        return False
    spec = job.spec
    if spec.begin is not None and (now is None or now < spec.begin):
        return False
    if spec.singleton and blocker(state.named, job) is not None:
        return False
    for kind, deps in (("after", spec.after), ("after_any", spec.after_any), ("after_not_ok", spec.after_not_ok)):
        meets = _MEETS[kind]
        for dep in deps:
            other = state.jobs.get(dep)
            if other is None or other.state not in meets:
                return False
    return True


def dependency_refusal(state: JobTable, spec: JobSpec) -> str | None:
    """Why a submit with dependencies is refused (unknown, or can never be met), or None."""
    for kind, deps in (("after", spec.after), ("after_any", spec.after_any), ("after_not_ok", spec.after_not_ok)):
        for dep in deps:
            other = state.jobs.get(dep)
            if other is None:
                return f"unknown job {dep!r} in {_FLAG[kind]}"
            if kind == "after" and other.state in NOT_OK_STATES:
                return f"job {dep} in --after already ended {other.state.value}: it will never complete"
            if kind == "after_not_ok" and other.state is JobState.COMPLETED:
                return f"job {dep} in after_not_ok already ended COMPLETED: it will never fail"
    return None


def doomed_dependants(state: JobTable, job: JobRecord) -> list[tuple[str, str]]:
    """(dependant, reason) for each PENDING job waiting on ``job`` whose dependency it can no longer
    meet: ``after`` when it ended FAILED or CANCELLED, ``after_not_ok`` when it ended COMPLETED."""
    if job.state in NOT_OK_STATES:
        # Only the job's own reason (a timeout), never a dependency's: reasons do not nest.
        own = job.reason if job.state is JobState.FAILED and job.reason else None
        why = f"dependency {job.id} ended {job.state.value}" + (f" ({own})" if own else "")
        return [(dep_id, why) for dep_id in state.dependants.get(job.id, ())
                if state.jobs[dep_id].state is JobState.PENDING and job.id in state.jobs[dep_id].spec.after]
    if job.state is JobState.COMPLETED:
        why = f"dependency {job.id} ended COMPLETED (after_not_ok)"
        return [(dep_id, why) for dep_id in state.dependants.get(job.id, ())
                if state.jobs[dep_id].state is JobState.PENDING and job.id in state.jobs[dep_id].spec.after_not_ok]
    return []


def array_full(state: JobTable, job: JobRecord) -> bool:
    """Whether the job's array already runs its ``%MAX`` jobs."""
    spec = job.spec
    if spec.array_max is None or spec.array_id is None:
        return False
    return state.array_running.get(spec.array_id, 0) >= spec.array_max


def user_limit_refusal(state: JobTable, limits: UserLimits, job: JobRecord) -> str | None:
    """Why ``job`` may not start now for its owner's per-user limits, or None.  The controller
    decides as it does for slots (a stale proposal cannot start a job past them), and ``why
    pending`` says the same line."""
    if job.owner is None or not limits.any:
        return None
    running, cpus = state.user_running.get(job.owner.user, (0, 0))
    return limits.refusal(job.owner.user, running, cpus, job.spec.slots)
