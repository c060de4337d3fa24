"""Controller handlers for what joined agents say: completions, starts, refusals,
heartbeats and resync report pages, all reconciled on one path (``reconcile``).

Functions of ``(tx, ...)`` (a ``model.transaction.Transaction``); ``on_message``
is the one registered in the controller's dispatch table.
"""

from __future__ import annotations

from . import agent_links
from . import events as E
from . import facts as F
from . import messages as M
from ._check import MAX_NAME
from .errors import RemoteProtocolError
from .jobs import JobRecord, JobState
from .resync import ResyncRound
from .session import AgentSession
from .transaction import Transaction, silence_clock


def same_submission(ours: str | None, theirs: str | None) -> bool:
    """Whether a report is about our submission; uid None on either side (a legacy peer or log) matches."""
    return ours is None or theirs is None or ours == theirs


def on_message(tx: Transaction, ev: E.MessageFromAgent) -> None:
    name = tx.conns.get(ev.conn)
    if name is None:
        return  # the connection is gone (or never joined): nothing it says counts
    session = tx.sessions[name]
    session.last_heard = silence_clock(ev)
    msg = ev.message
    try:
        if isinstance(msg, M.Finished):
            on_finished(tx, session, msg)
        elif isinstance(msg, M.Started):
            on_started(tx, session, msg)
        elif isinstance(msg, M.ResyncReport):
            on_report_page(tx, session, msg, ev.now)
        elif isinstance(msg, M.Heartbeat):
            on_heartbeat(tx, session, msg, ev)
        elif isinstance(msg, M.DispatchRefused):
            on_dispatch_refused(tx, session, msg)
        else:
            raise RemoteProtocolError(f"unexpected {msg.TYPE} message from a joined agent")
    except RemoteProtocolError as exc:
        if tx.applied:
            raise  # a refusal after a fact cannot undo it: Controller.handle reports the corruption
        agent_links.refuse(tx, ev.conn, str(exc))
    else:
        if session.generation is not None:  # sent after it stored its Welcome's generation
            session.shown_generation = max(session.shown_generation, session.generation)


def on_finished(tx: Transaction, session: AgentSession, msg: M.Finished) -> None:
    entry = M.ReportEntry(job=msg.job, attempt=msg.attempt, status=M.EntryStatus.FINISHED,
                          exit_code=msg.exit_code, signal=msg.signal, started_at=msg.started_at,
                          finished_at=msg.finished_at, uid=msg.uid, timed_out=msg.timed_out,
                          usage=msg.usage, oom=msg.oom, not_run=msg.not_run)
    outcome = reconcile(tx, session, entry, queried=False, via="report")
    tx.send(session, lambda seq: M.Ack(seq=seq, job=msg.job, attempt=msg.attempt, outcome=outcome))


def on_started(tx: Transaction, session: AgentSession, msg: M.Started) -> None:
    job = tx.state.jobs.get(msg.job)
    if job is None or not same_submission(job.uid, msg.uid):
        # A process for a job this history never issued, or for another
        # submission of its id (a rolled-back state): it must not run on.
        if job is None:
            tx.reserve_ids(msg.job)
        kill_orphan(tx, session, msg.job, msg.attempt, msg.uid)
        return
    if (job.state is JobState.RUNNING and job.agent == session.name
            and job.attempt == msg.attempt and job.started_at is None):
        tx.apply(F.JobStarted(job=msg.job, attempt=msg.attempt, started_at=msg.started_at))


def on_dispatch_refused(tx: Transaction, session: AgentSession, msg: M.DispatchRefused) -> None:
    """The agent ran nothing for this dispatch: the attempt is lost, try again under a new one."""
    job = tx.state.jobs.get(msg.job)
    if (job is None or job.state is not JobState.RUNNING or job.agent != session.name
            or job.attempt != msg.attempt or not same_submission(job.uid, msg.uid)):
        return  # about an attempt that is no longer current here: nothing to undo
    tx.attempt_lost(job, f"dispatch refused by agent {session.name}: {msg.reason}"[:MAX_NAME])


def on_heartbeat(tx: Transaction, session: AgentSession, msg: M.Heartbeat, ev: E.MessageFromAgent) -> None:
    if session.round is not None or msg.seen_seq != session.seq or ev.token is None:
        return  # a round is open, or the agent has not seen all we sent: no fair comparison yet
    theirs, ours = (msg.running, msg.digest), tx.state.placement_digest(session.name)
    if theirs == ours:
        session.unrepaired = None
        return
    if session.unrepaired == (ev.conn, theirs, ours):
        return  # a round already saw exactly this disagreement: wait for a change
    # Anti-entropy: the agent's set and ours disagree at a quiet moment.
    session.unrepaired = (ev.conn, theirs, ours)
    agent_links.arm_round(tx, session, ev.token, tx.placed_on(session.name), ev.now, welcome=False)


def on_report_page(tx: Transaction, session: AgentSession, page: M.ResyncReport, now: float) -> None:
    rnd = session.round
    if rnd is None or rnd.token != page.token:
        # A page of a round that ended or never was: discard it, say so, change nothing.
        tx.send(session, lambda seq: M.refusal(session.version, M.RefusalCode.STALE_ROUND,
                                               "stale resync round token", seq=seq))
        return
    entries = rnd.add_page(page)
    if entries is None:
        return
    apply_report(tx, session, rnd, entries)


def apply_report(tx: Transaction, session: AgentSession, rnd: ResyncRound, entries: list[M.ReportEntry]) -> None:
    """Apply a whole report once, then resolve the round."""
    tx.volatile.applied_rounds.append(rnd.token)
    for entry in entries:
        queried = rnd.queried.get(entry.job) == entry.attempt
        reconcile(tx, session, entry, queried=queried, via="round")
    session.end_round()
    token = rnd.token
    # Req 7.3: every change of the round (and the cleared RECONCILING flag) is
    # on the scheduler's notification path before the round counts as done.
    tx.note_agent(session.name)
    tx.flush_notes()
    tx.emit(E.RoundEnded(agent=session.name, token=token))
    tx.send(session, lambda seq: M.ResyncDone(seq=seq, token=token))
    # Cancels requested while the agent was away: repeat the kill now.
    for job_id, attempt in tx.placed_on(session.name).items():
        job = tx.state.jobs[job_id]
        if job.cancel_requested:
            uid = session.uid_for(job.uid)
            tx.send(session, lambda seq, j=job_id, a=attempt, u=uid: M.Kill(seq=seq, job=j, attempt=a, uid=u))
        elif job.requeue_requested:  # a user's requeue of the running attempt (version 7): stopped the same way
            uid = session.uid_for(job.uid)
            tx.send(session, lambda seq, j=job_id, a=attempt, u=uid: M.Kill(seq=seq, job=j, attempt=a, uid=u))


# ---- reconciling one fact from an agent ------------------------------------------------------


def reconcile(tx: Transaction, session: AgentSession, entry: M.ReportEntry, *, queried: bool,
              via: str) -> M.AckOutcome:
    """The one path for what an agent says about (job, attempt): completion
    reports, round entries for queried jobs and unqueried extras alike."""
    job = tx.state.jobs.get(entry.job)
    if job is None:
        # An id this history never issued: the agent kept it across a rollback
        # of our state.  Never issue it (or any id below it) again, and stop
        # its process: nothing here will ever want its outcome.
        tx.reserve_ids(entry.job)
        if entry.status is M.EntryStatus.RUNNING:
            kill_entry(tx, session, entry)
        return M.AckOutcome.UNKNOWN_JOB
    if job.terminal:
        if entry.status is M.EntryStatus.RUNNING:
            kill_entry(tx, session, entry)
        return M.AckOutcome.ALREADY_TERMINAL
    if not same_submission(job.uid, entry.uid):
        # Another submission that had this id (before a rollback of our
        # state): its outcome is never this job's, and it is never adopted.
        here = job.state is JobState.RUNNING and job.agent == session.name and job.attempt == entry.attempt
        if here and queried:  # the agent holds our attempt for someone else: ours never ran there
            tx.attempt_lost(job, "agent holds this attempt for another submission")
        if entry.status is M.EntryStatus.RUNNING:
            kill_entry(tx, session, entry)
        return M.AckOutcome.STALE_ATTEMPT
    here = job.state is JobState.RUNNING and job.agent == session.name and job.attempt == entry.attempt
    adoptable = job.state is JobState.PENDING and job.attempt == entry.attempt and not job.cancel_requested
    status = entry.status
    if status is M.EntryStatus.UNRECOGNIZED:
        # Only a queried attempt can be unrecognized; the agent knows nothing
        # of it, so no outcome is invented: requeue (or finish a cancel).
        if here and queried:
            tx.attempt_lost(job, "unrecognized by agent")
        return M.AckOutcome.STALE_ATTEMPT
    if not here and not adoptable:
        reserve_attempt(tx, job, entry)
        if status is M.EntryStatus.RUNNING:
            kill_entry(tx, session, entry)
        return M.AckOutcome.STALE_ATTEMPT
    if not here and len(entry.gpus) != job.spec.gpus:
        # The agent says it runs the job on another number of GPUs than it asks: not an attempt
        # this controller could have placed, so not adopted (INV-GPU-ONCE); it is stopped.
        reserve_attempt(tx, job, entry)
        tx.emit(E.Warn(message=f"not adopting job {job.id} attempt {entry.attempt} on {session.name}: it asks "
                               f"{job.spec.gpus} GPU(s) and the agent reports {list(entry.gpus)}"))
        if status is M.EntryStatus.RUNNING:
            kill_entry(tx, session, entry)
        return M.AckOutcome.STALE_ATTEMPT
    if not here:  # adoptable: the agent proves it ran an attempt we never placed
        info = tx.state.agents.get(session.name)
        for gpu in entry.gpus:  # shared with a job dispatched meanwhile: the operator hears of it
            holders = sorted(info.gpus_held.get(gpu, ())) if info is not None else []
            if holders:
                tx.emit(E.Warn(message=f"job {job.id} attempt {entry.attempt} adopted on GPU {gpu} of "
                                       f"{session.name}, which job(s) {', '.join(holders)} hold too (a restored "
                                       f"state gave it away): nothing more goes on it until they end"))
        tx.apply(F.JobAdopted(job=job.id, attempt=entry.attempt, agent=session.name, started_at=entry.started_at,
                              gpus=entry.gpus))
    if status is M.EntryStatus.RUNNING:
        if entry.started_at is not None and job.started_at is None:
            tx.apply(F.JobStarted(job=job.id, attempt=job.attempt, started_at=entry.started_at))
        return M.AckOutcome.APPLIED
    assert entry.finished_at is not None
    tx.apply(F.JobFinished(job=job.id, attempt=job.attempt, exit_code=entry.exit_code,
                           signal=entry.signal, finished_at=entry.finished_at,
                           started_at=entry.started_at, via=via, timed_out=entry.timed_out,
                           usage=entry.usage, oom=entry.oom, not_run=entry.not_run))
    return M.AckOutcome.APPLIED

    info = tx.state.agents.get(session.name)
    offered = info.resources.gpus if info is not None and info.resources is not None else ()
    for index in entry.gpus:
        if index not in offered:
            return f"the agent offers no GPU {index}"
        holder = info.gpus_held.get(index) if info is not None else None
        if holder is not None:
            return f"GPU {index} is held by job {holder}"
    return None


def reserve_attempt(tx: Transaction, job: JobRecord, entry: M.ReportEntry) -> None:
    """An attempt of this submission that this history has not issued yet, reported from a lost
    one (our state was restored from an older copy): it is answered as stale, so the agent lets
    its outcome go, and it must never be issued again (INV-ACK-MEANS-RECORDED): a dispatch of
    that (job, attempt) would be taken by the agent for the one it holds, and never run."""
    issuable = entry.attempt > job.attempt or (job.state is JobState.PENDING and entry.attempt == job.attempt)
    if issuable and entry.attempt > job.attempts_reserved:
        tx.apply(F.JobAttemptsReserved(job=job.id, upto=entry.attempt))


def kill_entry(tx: Transaction, session: AgentSession, entry: M.ReportEntry) -> None:
    kill_orphan(tx, session, entry.job, entry.attempt, entry.uid)


def kill_orphan(tx: Transaction, session: AgentSession, job: str, attempt: int, uid: str | None) -> None:
    """The agent runs an attempt that is no longer current anywhere: stop it."""
    if session.connected:
        uid = session.uid_for(uid)
        tx.send(session, lambda seq: M.Kill(seq=seq, job=job, attempt=attempt, uid=uid))


def reserve_reported_ids(tx: Transaction, ev: object) -> None:
    """Post-handle hook: one JobIdsReserved above every id agents reported that this history never issued."""
    if tx.reserve_upto < tx.state.next_job:
        return
    tx.apply(F.JobIdsReserved(upto=tx.reserve_upto))
    tx.emit(E.Warn(message=(
        f"an agent reported job {tx.reserve_upto}, which this controller never issued (was its state "
        f"restored from an older copy?): ids up to {tx.reserve_upto} will not be issued again, and any "
        f"such process still running is killed")))
