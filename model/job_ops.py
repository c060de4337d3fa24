"""Controller handlers for the job operations: submits (single and array),
cancels, holds, releases, user requeues, the operator's forget, and the
scheduler's dispatches.

Functions of ``(tx, event)`` (a ``model.transaction.Transaction``), registered
in the controller's dispatch table; like every handler they decide and apply
facts through ``tx.apply`` (the one seam), and raise ``LocalProtocolError``
(changing nothing) for a request that does not apply.
"""

from __future__ import annotations

from . import events as E
from . import facts as F
from . import messages as M
from .id_marks import mark_for_submit
from .admission import beyond_the_user_limit, unrunnable_reason, with_default_mem
from .arrays import array_member
from .errors import LocalProtocolError, PermissionDenied
from .jobs import JobRecord, JobSpec, JobState
from .partitions import admit, may_run_on, startable
from .permissions import check, owner_of, require
from .policy import array_full, dependency_refusal, ready, user_limit_refusal
from .resources import lowest_free
from .transaction import Transaction


def check_submit(tx: Transaction, spec: JobSpec, caller: E.Caller | None = None) -> None:
    """Refuse (change nothing) a submit whose dependencies are unknown or can never complete, or
    that asks more CPUs than its owner may ever run at once."""
    refusal = dependency_refusal(tx.state, spec) or beyond_the_user_limit(tx.config.user_limits,
                                                                          owner_of(caller), spec)
    if refusal is not None:
        raise LocalProtocolError(refusal)
    if spec.nice < 0:  # a push up the queue is an operator's to give (Slurm's rule)
        require(caller, "nice", None)


def on_submit_array(tx: Transaction, ev: E.SubmitArray) -> None:
    # The default memory first: the partition's limits and the fit judge what the job will ask.
    template = with_default_mem(ev.spec, tx.config.default_mem_per_cpu)
    template = admit(tx.state.partitions, template, ev.caller)  # its partition's refusals, default time
    if not ev.queue_anyway and (refusal := unrunnable_reason(tx.state, template)) is not None:
        raise LocalProtocolError(refusal)
    check_submit(tx, template, ev.caller)
    state = tx.state
    mark_for_submit(tx, count=len(ev.array.indices()))  # every member's id, before any
    array_id = state.next_job_id()  # the first job's id names the array
    for n, index in enumerate(ev.array.indices()):
        spec = array_member(template, array_id=array_id, index=index, max_running=ev.array.max_running,
                            array=ev.array)
        uid = ev.uids[n] if ev.uids is not None else None
        job_id = state.next_job_id()
        tx.apply(F.JobSubmitted(job=job_id, spec=spec, submitted_at=ev.now, uid=uid,
                                owner=owner_of(ev.caller)))
        if ev.hold:  # in the same call: one group commit, never seen unheld
            tx.apply(F.JobHeld(job=job_id))


def on_hold(tx: Transaction, ev: E.HoldJob) -> None:
    job = tx.state.job(ev.job)
    require(ev.caller, "hold", job.owner, job=job.id)
    if job.state is not JobState.PENDING:
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: only a PENDING job can be held")
    if job.held:
        return  # already held: holding twice changes nothing
    tx.apply(F.JobHeld(job=job.id))


def on_release(tx: Transaction, ev: E.ReleaseJob) -> None:
    job = tx.state.job(ev.job)
    require(ev.caller, "release", job.owner, job=job.id)
    if not job.held:
        raise LocalProtocolError(f"job {job.id} is not held")
    if job.state is not JobState.PENDING:  # a cancelled job keeps its hold (Slurm's JobHeldUser): nothing to release
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: only a PENDING job can be released")
    tx.apply(F.JobReleased(job=job.id))


def on_update(tx: Transaction, ev: E.UpdateJob) -> None:
    """An operator sets a job's priority adjustment (model/priority.py): it is recomputed and
    noted at once, so the scheduler moves the job in its queue."""
    job = tx.state.job(ev.job)
    require(ev.caller, "prioritize", job.owner, job=job.id)
    if job.terminal:
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: its priority no longer matters")
    if job.priority_adjust == ev.priority:
        return  # already so: changes nothing
    tx.volatile.priorities.pop(job.id, None)  # recomputed at its note, with the new adjustment
    tx.apply(F.JobPriorityAdjusted(job=job.id, priority=ev.priority))


def on_requeue(tx: Transaction, ev: E.RequeueJob) -> None:
    """A finished job runs again as a new attempt.  A RUNNING one (version 7) is stopped as a
    cancel stops it, and goes back to PENDING when its attempt ends (model/state.py _finished):
    a requeue, not a retry.  A PENDING job is refused: it has not run yet."""
    job = tx.state.job(ev.job)
    require(ev.caller, "requeue", job.owner, job=job.id)
    if job.state is JobState.RUNNING:
        if job.requeue_requested:
            return  # asked already: one request requeues once (INV-REQUEUE-ONCE)
        if job.cancel_requested:
            raise LocalProtocolError(f"job {job.id} is being cancelled: requeue it once it has ended")
        tx.apply(F.JobRequeueRequested(job=job.id, attempt=job.attempt))
        send_kill(tx, job)
        return
    if not job.terminal:
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: it has not run yet")
    tx.apply(F.JobRestarted(job=job.id, attempt=job.attempt))


def send_kill(tx: Transaction, job: JobRecord) -> None:
    """Tell the job's agent to stop the current attempt, if it can hear it now (else a round's end
    repeats it: reports.apply_report)."""
    session = tx.sessions.get(job.agent or "")
    if session is not None and session.connected and session.round is None:
        uid = session.uid_for(job.uid)
        tx.send(session, lambda seq: M.Kill(seq=seq, job=job.id, attempt=job.attempt, uid=uid))


def on_signal(tx: Transaction, ev: E.SignalJob) -> None:
    """Signal a RUNNING job's processes now (version 7): no fact, a ``Signal`` to its agent."""
    job = tx.state.job(ev.job)
    require(ev.caller, "signal", job.owner, job=job.id)  # allowed as a cancel is; the refusal says signal
    if job.state is not JobState.RUNNING:
        raise LocalProtocolError(f"job {job.id} is {job.state.value}: only a RUNNING job can be signalled")
    session = tx.sessions.get(job.agent or "")
    if session is None or not session.connected or session.round is not None:
        raise LocalProtocolError(f"job {job.id}'s agent {job.agent} is not reachable now: try again")
    if session.version < M.SIGNAL_SINCE:
        raise LocalProtocolError(f"job {job.id}'s agent {job.agent} speaks protocol version {session.version}: "
                                 f"signals need {M.SIGNAL_SINCE} (upgrade reckon there)")
    uid = session.uid_for(job.uid)
    tx.send(session, lambda seq: M.Signal(seq=seq, job=job.id, attempt=job.attempt, signal=ev.signal,
                                          batch_only=ev.batch_only, uid=uid, full=ev.full))


def on_cancel_array(tx: Transaction, ev: E.CancelJob) -> None:
    """Cancel every PENDING or RUNNING job of the array ``ev.job``; finished ones stay as they are."""
    members = tx.state.arrays.get(ev.job)
    if members is None:
        raise LocalProtocolError(f"job {ev.job} is not an array")
    # All or nothing: every job of the array must be the caller's (model/permissions.py).
    refused = [(job_id, tx.state.jobs[job_id].owner) for job_id in members
               if check(ev.caller, "cancel", tx.state.jobs[job_id].owner, job=job_id) is not None]
    if refused:
        if len(refused) == len(members):
            require(ev.caller, "cancel", refused[0][1], job=ev.job)  # the whole array is another's
        assert ev.caller is not None  # token mode is never refused
        owners = sorted({owner.user if owner is not None else "no user" for _, owner in refused})
        shown = ", ".join(job_id for job_id, _ in refused[:5]) + (" ..." if len(refused) > 5 else "")
        raise PermissionDenied(f"array {ev.job}: job(s) {shown} belong to {', '.join(owners)}: "
                               f"{ev.caller.user} may not cancel them (nothing cancelled)")
    for job_id in members:
        job = tx.state.jobs[job_id]
        if not job.terminal and not job.cancel_requested:
            on_cancel(tx, E.CancelJob(job=job_id, now=ev.now, whole_array=False, caller=ev.caller))


def on_forget(tx: Transaction, ev: E.ForgetAgent) -> None:
    """The operator's word that a disconnected agent is gone: its jobs may run elsewhere now.

    If the machine is in fact alive, its processes of these attempts keep
    running: the jobs may run twice.  That is why only an operator may
    say so, and never of a connected agent.
    """
    info = tx.state.agents.get(ev.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {ev.agent!r}")
    require(ev.caller, "forget", None, node=ev.agent)
    session = tx.sessions.get(ev.agent)
    if session is not None and session.connected:
        raise LocalProtocolError(f"agent {ev.agent} is connected: stop it before forgetting it")
    for job_id in tx.placed_on(ev.agent):
        tx.attempt_lost(tx.state.jobs[job_id], "agent forgotten by the operator")
    tx.apply(F.AgentForgotten(agent=ev.agent))
    tx.sessions.pop(ev.agent, None)


def on_submit(tx: Transaction, ev: E.SubmitJob) -> None:
    spec = with_default_mem(ev.spec, tx.config.default_mem_per_cpu)  # before the partition's limits judge it
    spec = admit(tx.state.partitions, spec, ev.caller)  # its partition's refusals, default time
    if not ev.queue_anyway and (refusal := unrunnable_reason(tx.state, spec)) is not None:
        raise LocalProtocolError(refusal)
    check_submit(tx, spec, ev.caller)
    mark_for_submit(tx)
    job_id = tx.state.next_job_id()
    tx.apply(F.JobSubmitted(job=job_id, spec=spec, submitted_at=ev.now, uid=ev.uid,
                            owner=owner_of(ev.caller)))
    if ev.hold:  # in the same call: one group commit, never seen unheld
        tx.apply(F.JobHeld(job=job_id))


def on_cancel(tx: Transaction, ev: E.CancelJob) -> None:
    if ev.whole_array or (ev.whole_array is None and ev.job in tx.state.arrays):
        on_cancel_array(tx, ev)
        return
    job = tx.state.job(ev.job)  # LocalProtocolError for an unknown job
    require(ev.caller, "cancel", job.owner, job=job.id)
    if job.state is JobState.PENDING:
        tx.apply(F.JobCancelled(job=job.id, cancelled_at=ev.now))
    elif job.state is JobState.RUNNING:
        if job.cancel_requested:
            return  # already asked: cancelling twice changes nothing
        tx.apply(F.JobCancelRequested(job=job.id))
        if not job.requeue_requested:  # else the requeue's kill is on its way already
            send_kill(tx, job)
    else:
        raise LocalProtocolError(f"job {job.id} is already {job.state.value}")


# ---- the scheduler's proposals ------------------------------------------------------------------


def on_dispatch(tx: Transaction, ev: E.DispatchProposed) -> None:
    job = tx.state.jobs.get(ev.job)
    session = tx.sessions.get(ev.agent)
    info = tx.state.agents.get(ev.agent)
    ok = (
        job is not None and job.state is JobState.PENDING and ready(tx.state, job, tx.clock)
        and not array_full(tx.state, job) and tx.start_gate is None
        and session is not None and session.connected and not session.reconciling
        and info is not None and not info.drained and info.shortfall(job.spec) is None
        and user_limit_refusal(tx.state, tx.config.user_limits, job) is None
        # Issue #22: only onto an agent of the job's partition, while that partition starts jobs.
        and (not tx.state.partitions or (may_run_on(tx.state.partitions, job.spec, ev.agent)
                                         and startable(tx.state.partitions, job)))
        # Version 7 fields go only to agents that read them (an older one would run the job wrong).
        and (session.version >= M.SPEC7_SINCE or not job.spec.uses_v7)
    )
    if not ok:
        # Req 5.4: fail at once; the job stays PENDING.  Re-send the truth so
        # the scheduler's tentative view is corrected.
        if job is not None:
            tx.note_job(job)
        if info is not None:  # never teach the scheduler an agent the controller does not know
            tx.note_agent(ev.agent)
        return
    assert job is not None and session is not None
    assert info is not None
    # The lowest free GPU indices of the agent: a fact, so a replay or a restart gives the job the same ones.
    gpus = lowest_free(info.resources.gpus, info.gpus_held, job.spec.gpus) if job.spec.gpus else ()
    tx.apply(F.JobDispatched(job=job.id, attempt=job.attempt, agent=ev.agent, gpus=gpus))
    spec, uid = job.spec.for_agent(), session.uid_for(job.uid)  # no scheduling-only (v8) fields
    owner = session.owner_for(job.owner)
    tx.send(session, lambda seq: M.Dispatch(seq=seq, job=job.id, attempt=job.attempt, spec=spec, uid=uid,
                                            owner=owner, gpus=gpus))


def on_undelivered(tx: Transaction, ev: E.DispatchUndelivered) -> None:
    """A dispatch that never left: the attempt cannot have run, so it is
    redone at once (a cancel meanwhile is simply confirmed), not left RUNNING
    until the agent rejoins."""
    job = tx.state.jobs.get(ev.job)
    # An attempt is dispatched once, to one agent: (job, attempt) names that dispatch.
    if job is None or job.state is not JobState.RUNNING or job.attempt != ev.attempt:
        return  # already settled (a round, a loss, a finish): nothing left to redo
    tx.attempt_lost(job, "dispatch not delivered")
