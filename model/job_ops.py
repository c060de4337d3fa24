"""Controller handlers for the batch-system operations of protocol version 4:
array submits, holds, releases, user requeues, array cancels, and the
cancellation of jobs whose dependency can no longer complete.

Functions of ``(controller, event, out)``, registered in
``Controller._HANDLERS``; like every handler they decide and apply facts
through ``Controller._apply`` (the one seam), and raise
``LocalProtocolError`` (changing nothing) for a request that does not apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import events as E
from . import facts as F
from . import messages as M
from . import startup
from .admission import unrunnable_reason
from .arrays import array_member
from .errors import LocalProtocolError
from .jobs import JobState
from .policy import dependency_refusal, doomed_dependants

if TYPE_CHECKING:  # pragma: no cover
    from .controller import Controller, _Out


def check_submit(controller: "Controller", spec) -> None:
    """Refuse (change nothing) a submit whose dependencies are unknown or can never complete."""
    refusal = dependency_refusal(controller.state, spec)
    if refusal is not None:
        raise LocalProtocolError(refusal)


def on_submit_array(controller: "Controller", ev: E.SubmitArray, out: "_Out") -> None:
    if not ev.queue_anyway and (refusal := unrunnable_reason(controller.state, ev.spec)) is not None:
        raise LocalProtocolError(refusal)
    check_submit(controller, ev.spec)
    state = controller.state
    startup.mark_for_submit(controller, out, count=len(ev.array.indices()))  # every member's id, before any
    array_id = state.next_job_id()  # the first job's id names the array
    for n, index in enumerate(ev.array.indices()):
        spec = array_member(ev.spec, array_id=array_id, index=index, max_running=ev.array.max_running)
        uid = ev.uids[n] if ev.uids is not None else None
        controller._apply(out, F.JobSubmitted(job=state.next_job_id(), spec=spec, submitted_at=ev.now, uid=uid))


def on_hold(controller: "Controller", ev: E.HoldJob, out: "_Out") -> None:
    job = controller.state.job(ev.job)
    if job.state is not JobState.PENDING:
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: only a PENDING job can be held")
    if job.held:
        return  # already held: holding twice changes nothing
    controller._apply(out, F.JobHeld(job=job.id))


def on_release(controller: "Controller", ev: E.ReleaseJob, out: "_Out") -> None:
    job = controller.state.job(ev.job)
    if not job.held:
        raise LocalProtocolError(f"job {job.id} is not held")
    controller._apply(out, F.JobReleased(job=job.id))


def on_requeue(controller: "Controller", ev: E.RequeueJob, out: "_Out") -> None:
    """A finished job runs again as a new attempt.  A PENDING or RUNNING job is
    refused: it has not finished (cancel a running one first, then requeue)."""
    job = controller.state.job(ev.job)
    if not job.terminal:
        hint = ": cancel it first, then requeue it" if job.state is JobState.RUNNING else ""
        raise LocalProtocolError(f"job {job.id} is {job.state.value}, not finished{hint}")
    controller._apply(out, F.JobRestarted(job=job.id, attempt=job.attempt))


def on_cancel_array(controller: "Controller", ev: E.CancelJob, out: "_Out") -> None:
    """Cancel every PENDING or RUNNING job of the array ``ev.job``; finished ones stay as they are."""
    members = controller.state.arrays.get(ev.job)
    if members is None:
        raise LocalProtocolError(f"job {ev.job} is not an array")
    for job_id in members:
        job = controller.state.jobs[job_id]
        if not job.terminal and not job.cancel_requested:
            on_cancel(controller, E.CancelJob(job=job_id, now=ev.now, whole_array=False), out)


def cancel_doomed(controller: "Controller", job_id: str, out: "_Out") -> None:
    """A job ended FAILED or CANCELLED: cancel the PENDING jobs waiting on it, with the reason.
    Their own dependants follow, as each JobCancelled passes through ``_apply`` again."""
    state = controller.state
    for dependant, reason in doomed_dependants(state, state.jobs[job_id]):
        if state.jobs[dependant].state is JobState.PENDING:  # an earlier cancel in this loop may have got it
            controller._apply(out, F.JobCancelled(job=dependant, reason=reason))


def on_forget(controller: "Controller", ev: E.ForgetAgent, out: "_Out") -> None:
    """The operator's word that a disconnected agent is gone: its jobs may run elsewhere now.

    If the machine is in fact alive, its processes of these attempts keep
    running: the jobs may run twice.  That is why only an operator may
    say so, and never of a connected agent.
    """
    info = controller.state.agents.get(ev.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {ev.agent!r}")
    session = controller.sessions.get(ev.agent)
    if session is not None and session.connected:
        raise LocalProtocolError(f"agent {ev.agent} is connected: stop it before forgetting it")
    for job_id in sorted(info.running, key=lambda j: (len(j), j)):
        job = controller.state.jobs[job_id]
        if job.cancel_requested:
            controller._apply(out, F.JobCancelConfirmed(job=job_id, attempt=job.attempt))
        else:
            controller._apply(out, F.JobRequeued(job=job_id, attempt=job.attempt, reason="agent forgotten by the operator"))
    controller._apply(out, F.AgentForgotten(agent=ev.agent))
    controller.sessions.pop(ev.agent, None)


def on_submit(controller: "Controller", ev: E.SubmitJob, out: "_Out") -> None:
    if not ev.queue_anyway and (refusal := unrunnable_reason(controller.state, ev.spec)) is not None:
        raise LocalProtocolError(refusal)
    check_submit(controller, ev.spec)
    startup.mark_for_submit(controller, out)
    controller._apply(out, F.JobSubmitted(job=controller.state.next_job_id(), spec=ev.spec, submitted_at=ev.now, uid=ev.uid))


def on_cancel(controller: "Controller", ev: E.CancelJob, out: "_Out") -> None:
    if ev.whole_array or (ev.whole_array is None and ev.job in controller.state.arrays):
        on_cancel_array(controller, ev, out)
        return
    job = controller.state.job(ev.job)  # LocalProtocolError for an unknown job
    if job.state is JobState.PENDING:
        controller._apply(out, F.JobCancelled(job=job.id))
    elif job.state is JobState.RUNNING:
        if job.cancel_requested:
            return  # already asked: cancelling twice changes nothing
        controller._apply(out, F.JobCancelRequested(job=job.id))
        session = controller.sessions.get(job.agent or "")
        if session is not None and session.connected and session.round is None:
            uid = session.uid_for(job.uid)
            controller._send(out, session, lambda seq: M.Kill(seq=seq, job=job.id, attempt=job.attempt, uid=uid))
    else:
        raise LocalProtocolError(f"job {job.id} is already {job.state.value}")
