"""The controller: every protocol decision on the controller side.

``Controller.handle(event) -> list[Command]`` is the only entry point.  Facts
are applied at once through ``state.apply`` (the seam replay also runs) and
returned in one ``Append`` that precedes every ``Send`` they cause: the daemon
releases sends only once the facts are durable.  Connection state (who is
connected, rounds, heartbeats) is volatile and rebuilt as agents rejoin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import events as E
from . import batches
from . import job_ops
from . import names
from . import facts as F
from . import messages as M
from ._check import MAX_NAME
from .errors import LocalProtocolError, RemoteProtocolError
from .jobs import JobRecord, JobState
from .nodes import node_state, on_drain, on_resume
from .policy import array_full, ready
from . import startup
from .resync import ResyncRound
from .scheduler import AgentNote, DispatchHold, JobNote
from .state import ControllerState, apply, replay, restore


_MAX_ID_DIGITS = 18  # a reported id longer than this can never collide with one we issue


def _same_submission(ours: str | None, theirs: str | None) -> bool:
    """Whether a report is about our submission; uid None on either side (a legacy peer or log) matches."""
    return ours is None or theirs is None or ours == theirs


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    page_size: int = 1000  # jobs per resync query page
    round_timeout: float = 30.0  # seconds a round may stay open
    lost_after: float | None = None  # seconds of silence before a disconnected agent's jobs are requeued

    def __post_init__(self) -> None:
        if not isinstance(self.page_size, int) or not 1 <= self.page_size <= M.MAX_PAGE_ENTRIES:
            raise ValueError(f"page_size must be in 1..{M.MAX_PAGE_ENTRIES}")
        if not self.round_timeout > 0:
            raise ValueError("round_timeout must be positive")
        if self.lost_after is not None and not self.lost_after > 0:
            raise ValueError("lost_after must be positive or None")


@dataclass(slots=True)
class AgentSession:
    """Volatile: what the controller knows of an agent's current connection."""

    name: str
    conn: int | None = None  # None while disconnected
    seq: int = 0  # messages sent on the current connection
    round: ResyncRound | None = None
    last_heard: float = 0.0  # on the silence clock (events' mono, else now): see _silence_clock
    lost: bool = False
    version: int = M.PROTOCOL_VERSION  # the protocol version of the current connection (its Join's)
    identity: str | None = None  # the identity the current connection's Join claimed (None: an older agent)
    instance: str | None = None  # the agent process of the current connection (its Join's; None: an older agent)
    generation: int | None = None  # the join generation the current connection's Welcome carries (None: none)
    shown_generation: int = 0  # the newest one the agent has shown it stored by sending after its Welcome
    latest_conn: int = 0  # the newest connection that joined as this agent: a Join on an older one is stale
    # (conn, agent's (count, digest), ours) of the last heartbeat disagreement a
    # round was armed for.  The same disagreement again on the same connection
    # is one no round repairs (e.g. a killed orphan still dying): it waits until
    # either side changes instead of arming a round every heartbeat.
    unrepaired: tuple[int, tuple[int, int], tuple[int, int]] | None = None

    def uid_for(self, uid: str | None) -> str | None:
        """What to send as a submission uid: nothing to an agent older than version 3."""
        return uid if self.version >= M.UIDS_SINCE else None

    @property
    def connected(self) -> bool:
        return self.conn is not None

    @property
    def reconciling(self) -> bool:
        return self.round is not None


@dataclass(slots=True)
class _Out:
    """Commands of one ``handle`` call; facts gathered into one leading Append."""

    facts: list[F.Fact] = field(default_factory=list)
    commands: list[E.Command] = field(default_factory=list)
    # Changed jobs and agents not yet noted to the scheduler.  Noted once per
    # handle with their final values: a round applying 100k facts to one agent
    # sends one agent note, not 100k.
    changed_jobs: dict[str, JobRecord] = field(default_factory=dict)
    changed_agents: dict[str, None] = field(default_factory=dict)
    # The highest job id agents reported that the history never issued: one
    # JobIdsReserved for all of them at the end of the handle call, not one per entry.
    reserve_upto: int = 0

    def result(self) -> list[E.Command]:
        return ([E.Append(facts=tuple(self.facts))] if self.facts else []) + self.commands


def _silence_clock(ev: object) -> float:
    """The time silence is measured on: monotonic when the daemon gives it, so a
    wall-clock step never makes an agent look silent (or heard from)."""
    mono = getattr(ev, "mono", None)
    return mono if mono is not None else ev.now  # type: ignore[attr-defined]


class Controller:
    def __init__(self, config: ControllerConfig | None = None, state: ControllerState | None = None) -> None:
        self.config = config or ControllerConfig()
        self.state = state or ControllerState()
        self.sessions: dict[str, AgentSession] = {}
        self._conns: dict[int, str] = {}  # live connection -> agent name
        self.applied_rounds: list[bytes] = []  # tokens whose reports were applied (each at most once)
        self.started = False  # ControllerStarted was handled (once per start; replay never sets it)
        self.start_gate: startup.StartGate | None = None  # dispatch held after a start: model.startup

    # ---- construction -----------------------------------------------------

    @classmethod
    def from_log(cls, facts: list[F.Fact], config: ControllerConfig | None = None,
                 snapshot: dict | None = None) -> "Controller":
        """Recover: restore the snapshot (if any), then replay the facts after it."""
        state = restore(snapshot) if snapshot is not None else ControllerState()
        return cls(config, replay(facts, state))

    def initial_notes(self) -> list[E.Command]:
        """Notifications that bring a fresh scheduler up to the current state."""
        out = _Out()
        for job in self.state.jobs.values():
            # RUNNING jobs of a throttled array too: the scheduler counts them against %MAX.
            if job.state is JobState.PENDING or (job.state is JobState.RUNNING and job.spec.array_max is not None):
                self._note_job(out, job)
        for name in self.state.agents:
            self._note_agent(out, name)
        self._flush_notes(out)
        if self.start_gate is not None:
            out.commands.append(E.Notify(note=DispatchHold(held=True, reason="start gate")))
        return out.commands

    # ---- the entry point ------------------------------------------------------

    def handle(self, event: E.ControllerEvent) -> list[E.Command]:
        handler: Callable[[E.ControllerEvent, _Out], None] | None = self._HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"the controller does not handle {type(event).__name__}")
        out = _Out()
        handler(self, event, out)
        if out.reserve_upto >= self.state.next_job:
            self._apply(out, F.JobIdsReserved(upto=out.reserve_upto))
            out.commands.append(E.Warn(message=(
                f"an agent reported job {out.reserve_upto}, which this controller never issued (was its state "
                f"restored from an older copy?): ids up to {out.reserve_upto} will not be issued again, and any "
                f"such process still running is killed")))
        self._flush_notes(out)
        if self.start_gate is not None:
            startup.check_gate(self, event, out)
        return out.result()

    # ---- helpers --------------------------------------------------------------

    def _apply(self, out: _Out, fact: F.Fact) -> None:
        """Apply a fact now, queue it for durability, and notify the scheduler."""
        changes = apply(self.state, fact)
        out.facts.append(fact)
        for job_id in changes.jobs:
            self._note_job(out, self.state.jobs[job_id])
            if self.state.dependants.get(job_id):
                job_ops.cancel_doomed(self, job_id, out)
        for name in changes.agents:
            self._note_agent(out, name)

    def _note_job(self, out: _Out, job: JobRecord) -> None:
        out.changed_jobs[job.id] = job

    def _note_agent(self, out: _Out, name: str) -> None:
        out.changed_agents[name] = None

    def _flush_notes(self, out: _Out) -> None:
        """Hand every pending change to the scheduler's notification path, with current values."""
        for job in out.changed_jobs.values():
            out.commands.append(E.Notify(note=JobNote(job=job.id, order=int(job.id), state=job.state,
                                                      slots=job.spec.slots, agent=job.agent,
                                                      ready=ready(self.state, job), array=job.spec.array_id,
                                                      array_max=job.spec.array_max)))
        for name in out.changed_agents:
            info = self.state.agents.get(name)
            session = self.sessions.get(name)
            out.commands.append(E.Notify(note=AgentNote(
                agent=name,
                slots=info.slots if info else 0,
                used=info.used if info else 0,
                connected=bool(session and session.connected),
                reconciling=bool(session and session.reconciling),
                drained=bool(info and info.drained),
            )))
        out.changed_jobs.clear()
        out.changed_agents.clear()

    def _send(self, out: _Out, session: AgentSession, make: Callable[[int], M.Message]) -> None:
        assert session.conn is not None
        session.seq += 1
        out.commands.append(E.Send(conn=session.conn, message=make(session.seq)))

    def _refuse(self, out: _Out, conn: int, reason: str, code: M.RefusalCode = M.RefusalCode.INVALID) -> None:
        """A fatal error: tell the peer why, close, and forget the connection."""
        name = self._conns.get(conn)
        session = self.sessions.get(name) if name else None
        seq = session.seq + 1 if session and session.conn == conn else 0
        version = session.version if session and session.conn == conn else 0
        out.commands.append(E.Send(conn=conn, message=M.refusal(version, code, reason, seq=seq)))
        out.commands.append(E.Close(conn=conn, reason=reason))
        self._drop_connection(out, conn)

    def _drop_connection(self, out: _Out, conn: int) -> None:
        name = self._conns.pop(conn, None)
        if name is None:
            return
        session = self.sessions[name]
        if session.conn != conn:
            return
        self._end_round(out, session, discard=True)
        session.conn = None
        self._note_agent(out, name)

    def _end_round(self, out: _Out, session: AgentSession, *, discard: bool = False, expire: bool = False) -> None:
        rnd = session.round
        if rnd is None:
            return
        if discard:
            rnd.discard()
        elif expire:
            rnd.expire()
        session.round = None
        # The RECONCILING flag is visible to the scheduler: clearing it must reach it too.
        self._note_agent(out, session.name)
        self._flush_notes(out)
        out.commands.append(E.RoundEnded(agent=session.name, token=rnd.token))

    def placed_on(self, agent: str) -> dict[str, int]:
        """job -> attempt of every non-terminal job placed on ``agent``, in job id order (not the set's hash order)."""
        info = self.state.agents.get(agent)
        if info is None:
            return {}
        return {j: self.state.jobs[j].attempt for j in sorted(info.running, key=lambda j: (len(j), j))}

    # ---- joins, rounds, connections --------------------------------------------

    def _on_join(self, ev: E.AgentJoined, out: _Out) -> None:
        join = ev.join
        if ev.conn in self._conns:
            raise RemoteProtocolError("this connection already joined")
        if join.version not in M.SUPPORTED_VERSIONS:
            self._refuse_join(out, ev.conn, f"protocol version {join.version} not supported (supported: "
                              f"{sorted(M.SUPPORTED_VERSIONS)})", join.version, M.RefusalCode.VERSION)
            return
        session = self.sessions.get(join.agent)
        info = self.state.agents.get(join.agent)
        refusal = names.name_refusal(self, join, session, info)
        if refusal is None and (stale := names.generation_refusal(join, session, info)) is not None:
            refusal = stale, M.RefusalCode.STALE_COPY
        elif refusal is not None:
            refusal = refusal[0], M.RefusalCode.NAME_HELD if refusal[1] else M.RefusalCode.NAME_HELD_FOR_NOW
        if refusal is not None:
            # Nothing changes: no fact, the holder's connection and jobs untouched.
            reason, code = refusal
            self._refuse_join(out, ev.conn, reason, join.version, code)
            return
        if session is not None and ev.conn < session.latest_conn:
            # This connection was accepted before the one the agent joined on last:
            # its Join is late, and must not drop the newer connection.
            self._refuse_join(out, ev.conn, "stale join: a newer connection of this agent has joined",
                              join.version, M.RefusalCode.STALE_JOIN)
            return
        if session is not None and session.connected:
            # The same agent again on a new connection: the old one is dead to us.
            old = session.conn
            assert old is not None
            out.commands.append(E.Close(conn=old, reason="superseded by a new connection"))
            self._drop_connection(out, old)
        if session is None:
            session = self.sessions[join.agent] = AgentSession(name=join.agent)
        # An agent without an identity (versions 1, 2) leaves the name's binding as it is.
        identity = join.identity if join.identity is not None else (info.identity if info else None)
        if info is None or not info.registered or info.slots != join.slots or info.identity != identity:
            self._apply(out, F.AgentRegistered(agent=join.agent, slots=join.slots, identity=identity))
        self._conns[ev.conn] = join.agent
        session.conn, session.seq, session.last_heard, session.lost = ev.conn, 0, _silence_clock(ev), False
        if session.identity != join.identity:
            session.shown_generation = 0  # another holder's (or none): generations are per identity
        session.version, session.identity, session.latest_conn = join.version, join.identity, ev.conn
        session.instance, session.generation = join.instance, None
        if join.generation is not None and join.identity is not None:
            issued = names.next_generation(join, session, self.state.agents[join.agent])
            self._apply(out, issued)
            session.generation = issued.generation
        placed = self.placed_on(join.agent)
        # Req 1: a round whenever we place non-terminal jobs here, whatever kind of
        # join this is; also when the agent runs jobs we do not place here, and while
        # the start gate is closed (its recent outcomes may be of jobs this state,
        # perhaps a restored copy, calls PENDING: model.startup).
        if placed or join.running or self.start_gate is not None:
            self._arm_round(out, session, ev.token, placed, ev.now, welcome=True)
        else:
            self._send(out, session, lambda seq: M.Welcome(seq=seq, version=session.version, token=None,
                                                                      cluster=self.state.cluster,
                                                                      generation=session.generation))
        self._note_agent(out, join.agent)

    def _refuse_join(self, out: _Out, conn: int, reason: str, version: int, code: M.RefusalCode) -> None:
        """Refuse a Join: the connection never counts as joined, nothing else changes."""
        out.commands.append(E.Send(conn=conn, message=M.refusal(version, code, reason)))
        out.commands.append(E.Close(conn=conn, reason=reason))

    def _arm_round(self, out: _Out, session: AgentSession, token: bytes, placed: dict[str, int], now: float,
                   *, welcome: bool) -> None:
        rnd = ResyncRound(agent=session.name, token=token, queried=placed, deadline=now + self.config.round_timeout)
        session.round = rnd
        chunks = M.pages(sorted(placed.items(), key=lambda p: (len(p[0]), p[0])), self.config.page_size)
        if welcome:
            self._send(out, session, lambda seq: M.Welcome(seq=seq, version=session.version, token=token, cluster=self.state.cluster,
                                                           query_pages=len(chunks), generation=session.generation))
        for i, chunk in enumerate(chunks):
            self._send(out, session, lambda seq, i=i, chunk=chunk: M.ResyncQuery(
                seq=seq, token=token, page=i, pages=len(chunks), jobs=tuple(chunk)))
        out.commands.append(E.StartRoundTimer(agent=session.name, token=token, deadline=rnd.deadline))
        self._note_agent(out, session.name)

    def _on_closed(self, ev: E.ConnectionClosed, out: _Out) -> None:
        name = self._conns.get(ev.conn)
        if name is not None:
            self.sessions[name].last_heard = _silence_clock(ev)
        self._drop_connection(out, ev.conn)

    def _on_deadline(self, ev: E.RoundDeadlineExpired, out: _Out) -> None:
        session = self.sessions.get(ev.agent)
        if session is None or session.round is None or session.round.token != ev.token:
            return  # a timer of a round that already ended: nothing to do
        conn = session.conn
        assert conn is not None
        # Silence counts from when we last heard from the agent or dropped it,
        # whichever is later: a round that timed out is not silence since the join.
        session.last_heard = max(session.last_heard, _silence_clock(ev))
        self._end_round(out, session, expire=True)
        # Withholding the agent forever is not allowed (Req 5.3); trusting a
        # silent agent is not either.  Close: its next join arms a fresh round.
        self._refuse(out, conn, "resync round timed out", M.RefusalCode.ROUND_TIMEOUT)

    def _on_tick(self, ev: E.Tick, out: _Out) -> None:
        lost_after = self.config.lost_after
        if lost_after is None:
            return
        for name in self.state.agents:
            if name not in self.sessions:
                # An agent known only from the log (we restarted and it has not come
                # back yet): its silence counts from the first tick we see.
                self.sessions[name] = AgentSession(name=name, last_heard=_silence_clock(ev))
        now = _silence_clock(ev)
        for session in self.sessions.values():
            if session.connected or session.lost or now - session.last_heard <= lost_after:
                continue
            session.lost = True
            for job_id in sorted(self.state.agents[session.name].running, key=lambda j: (len(j), j)):
                job = self.state.jobs[job_id]
                if job.cancel_requested:
                    self._apply(out, F.JobCancelConfirmed(job=job_id, attempt=job.attempt))
                else:
                    self._apply(out, F.JobRequeued(job=job_id, attempt=job.attempt, reason="agent lost"))
            self._note_agent(out, session.name)

    # ---- agent messages ---------------------------------------------------------

    def _on_message(self, ev: E.MessageFromAgent, out: _Out) -> None:
        name = self._conns.get(ev.conn)
        if name is None:
            return  # the connection is gone (or never joined): nothing it says counts
        session = self.sessions[name]
        session.last_heard = _silence_clock(ev)
        msg = ev.message
        try:
            if isinstance(msg, M.Finished):
                self._on_finished(session, msg, out)
            elif isinstance(msg, M.Started):
                self._on_started(session, msg, out)
            elif isinstance(msg, M.ResyncReport):
                self._on_report_page(session, msg, ev.now, out)
            elif isinstance(msg, M.Heartbeat):
                self._on_heartbeat(session, msg, ev, out)
            elif isinstance(msg, M.DispatchRefused):
                self._on_dispatch_refused(session, msg, out)
            else:
                raise RemoteProtocolError(f"unexpected {msg.TYPE} message from a joined agent")
        except RemoteProtocolError as exc:
            self._refuse(out, ev.conn, str(exc))
        else:
            if session.generation is not None:  # sent after it stored its Welcome's generation
                session.shown_generation = max(session.shown_generation, session.generation)

    def _on_finished(self, session: AgentSession, msg: M.Finished, out: _Out) -> None:
        entry = M.ReportEntry(job=msg.job, attempt=msg.attempt, status=M.EntryStatus.FINISHED,
                              exit_code=msg.exit_code, signal=msg.signal, started_at=msg.started_at,
                              finished_at=msg.finished_at, uid=msg.uid, timed_out=msg.timed_out)
        outcome = self._reconcile(session, entry, queried=False, out=out, via="report")
        self._send(out, session, lambda seq: M.Ack(seq=seq, job=msg.job, attempt=msg.attempt, outcome=outcome))

    def _on_started(self, session: AgentSession, msg: M.Started, out: _Out) -> None:
        job = self.state.jobs.get(msg.job)
        if job is None or not _same_submission(job.uid, msg.uid):
            # A process for a job this history never issued, or for another
            # submission of its id (a rolled-back state): it must not run on.
            if job is None:
                self._reserve_ids(out, msg.job)
            self._kill_orphan(session, msg.job, msg.attempt, msg.uid, out)
            return
        if (job.state is JobState.RUNNING and job.agent == session.name
                and job.attempt == msg.attempt and job.started_at is None):
            self._apply(out, F.JobStarted(job=msg.job, attempt=msg.attempt, started_at=msg.started_at))

    def _on_dispatch_refused(self, session: AgentSession, msg: M.DispatchRefused, out: _Out) -> None:
        """The agent ran nothing for this dispatch: the attempt is lost, try again under a new one."""
        job = self.state.jobs.get(msg.job)
        if (job is None or job.state is not JobState.RUNNING or job.agent != session.name
                or job.attempt != msg.attempt or not _same_submission(job.uid, msg.uid)):
            return  # about an attempt that is no longer current here: nothing to undo
        if job.cancel_requested:
            self._apply(out, F.JobCancelConfirmed(job=job.id, attempt=job.attempt))
        else:
            reason = f"dispatch refused by agent {session.name}: {msg.reason}"
            self._apply(out, F.JobRequeued(job=job.id, attempt=job.attempt, reason=reason[:MAX_NAME]))

    def _on_heartbeat(self, session: AgentSession, msg: M.Heartbeat, ev: E.MessageFromAgent, out: _Out) -> None:
        if session.round is not None or msg.seen_seq != session.seq or ev.token is None:
            return  # a round is open, or the agent has not seen all we sent: no fair comparison yet
        theirs, ours = (msg.running, msg.digest), self.state.placement_digest(session.name)
        if theirs == ours:
            session.unrepaired = None
            return
        if session.unrepaired == (ev.conn, theirs, ours):
            return  # a round already saw exactly this disagreement: wait for a change
        # Anti-entropy: the agent's set and ours disagree at a quiet moment.
        session.unrepaired = (ev.conn, theirs, ours)
        self._arm_round(out, session, ev.token, self.placed_on(session.name), ev.now, welcome=False)

    def _on_report_page(self, session: AgentSession, page: M.ResyncReport, now: float, out: _Out) -> None:
        rnd = session.round
        if rnd is None or rnd.token != page.token:
            # A page of a round that ended or never was: discard it, say so, change nothing.
            self._send(out, session, lambda seq: M.refusal(session.version, M.RefusalCode.STALE_ROUND,
                                                           "stale resync round token", seq=seq))
            return
        entries = rnd.add_page(page)
        if entries is None:
            return
        self._apply_report(session, rnd, entries, out)

    def _apply_report(self, session: AgentSession, rnd: ResyncRound, entries: list[M.ReportEntry], out: _Out) -> None:
        """Apply a whole report once, then resolve the round."""
        self.applied_rounds.append(rnd.token)
        for entry in entries:
            queried = rnd.queried.get(entry.job) == entry.attempt
            self._reconcile(session, entry, queried=queried, out=out, via="round")
        session.round = None
        token = rnd.token
        # Req 7.3: every change of the round (and the cleared RECONCILING flag) is
        # on the scheduler's notification path before the round counts as done.
        self._note_agent(out, session.name)
        self._flush_notes(out)
        out.commands.append(E.RoundEnded(agent=session.name, token=token))
        self._send(out, session, lambda seq: M.ResyncDone(seq=seq, token=token))
        # Cancels requested while the agent was away: repeat the kill now.
        for job_id, attempt in self.placed_on(session.name).items():
            job = self.state.jobs[job_id]
            if job.cancel_requested:
                uid = session.uid_for(job.uid)
                self._send(out, session, lambda seq, j=job_id, a=attempt, u=uid: M.Kill(seq=seq, job=j, attempt=a, uid=u))

    # ---- reconciling one fact from an agent -----------------------------------------

    def _reconcile(self, session: AgentSession, entry: M.ReportEntry, *, queried: bool, out: _Out,
                   via: str) -> M.AckOutcome:
        """The one path for what an agent says about (job, attempt): completion
        reports, round entries for queried jobs and unqueried extras alike."""
        job = self.state.jobs.get(entry.job)
        if job is None:
            # An id this history never issued: the agent kept it across a rollback
            # of our state.  Never issue it (or any id below it) again, and stop
            # its process: nothing here will ever want its outcome.
            self._reserve_ids(out, entry.job)
            if entry.status is M.EntryStatus.RUNNING:
                self._kill_entry(session, entry, out)
            return M.AckOutcome.UNKNOWN_JOB
        if job.terminal:
            if entry.status is M.EntryStatus.RUNNING:
                self._kill_entry(session, entry, out)
            return M.AckOutcome.ALREADY_TERMINAL
        if not _same_submission(job.uid, entry.uid):
            # Another submission that had this id (before a rollback of our
            # state): its outcome is never this job's, and it is never adopted.
            here = job.state is JobState.RUNNING and job.agent == session.name and job.attempt == entry.attempt
            if here and queried:  # the agent holds our attempt for someone else: ours never ran there
                if job.cancel_requested:
                    self._apply(out, F.JobCancelConfirmed(job=job.id, attempt=job.attempt))
                else:
                    self._apply(out, F.JobRequeued(job=job.id, attempt=job.attempt,
                                                   reason="agent holds this attempt for another submission"))
            if entry.status is M.EntryStatus.RUNNING:
                self._kill_entry(session, entry, out)
            return M.AckOutcome.STALE_ATTEMPT
        here = job.state is JobState.RUNNING and job.agent == session.name and job.attempt == entry.attempt
        adoptable = job.state is JobState.PENDING and job.attempt == entry.attempt and not job.cancel_requested
        status = entry.status
        if status is M.EntryStatus.UNRECOGNIZED:
            # Only a queried attempt can be unrecognized; the agent knows nothing
            # of it, so no outcome is invented: requeue (or finish a cancel).
            if here and queried:
                if job.cancel_requested:
                    self._apply(out, F.JobCancelConfirmed(job=job.id, attempt=job.attempt))
                else:
                    self._apply(out, F.JobRequeued(job=job.id, attempt=job.attempt, reason="unrecognized by agent"))
            return M.AckOutcome.STALE_ATTEMPT
        if not here and not adoptable:
            if status is M.EntryStatus.RUNNING:
                self._kill_entry(session, entry, out)
            return M.AckOutcome.STALE_ATTEMPT
        if not here:  # adoptable: the agent proves it ran an attempt we never placed
            self._apply(out, F.JobAdopted(job=job.id, attempt=entry.attempt, agent=session.name,
                                          started_at=entry.started_at))
        if status is M.EntryStatus.RUNNING:
            if entry.started_at is not None and job.started_at is None:
                self._apply(out, F.JobStarted(job=job.id, attempt=job.attempt, started_at=entry.started_at))
            return M.AckOutcome.APPLIED
        assert entry.finished_at is not None
        self._apply(out, F.JobFinished(job=job.id, attempt=job.attempt, exit_code=entry.exit_code,
                                       signal=entry.signal, finished_at=entry.finished_at,
                                       started_at=entry.started_at, via=via, timed_out=entry.timed_out))
        return M.AckOutcome.APPLIED

    def _kill_entry(self, session: AgentSession, entry: M.ReportEntry, out: _Out) -> None:
        self._kill_orphan(session, entry.job, entry.attempt, entry.uid, out)

    def _kill_orphan(self, session: AgentSession, job: str, attempt: int, uid: str | None, out: _Out) -> None:
        """The agent runs an attempt that is no longer current anywhere: stop it."""
        if session.connected:
            uid = session.uid_for(uid)
            self._send(out, session, lambda seq: M.Kill(seq=seq, job=job, attempt=attempt, uid=uid))

    def _reserve_ids(self, out: _Out, job_id: str) -> None:
        """Note ``job_id`` (if decimal, like ours) for the one JobIdsReserved ``handle`` appends at its end."""
        if job_id.isascii() and job_id.isdecimal() and len(job_id) <= _MAX_ID_DIGITS:
            out.reserve_upto = max(out.reserve_upto, int(job_id))

    # ---- clients and the scheduler -----------------------------------------------

    def _on_dispatch(self, ev: E.DispatchProposed, out: _Out) -> None:
        job = self.state.jobs.get(ev.job)
        session = self.sessions.get(ev.agent)
        info = self.state.agents.get(ev.agent)
        ok = (
            job is not None and job.state is JobState.PENDING and ready(self.state, job)
            and not array_full(self.state, job) and self.start_gate is None
            and session is not None and session.connected and not session.reconciling
            and info is not None and not info.drained and info.slots - info.used >= job.spec.slots
        )
        if not ok:
            # Req 5.4: fail at once; the job stays PENDING.  Re-send the truth so
            # the scheduler's tentative view is corrected.
            if job is not None:
                self._note_job(out, job)
            if info is not None:  # never teach the scheduler an agent the controller does not know
                self._note_agent(out, ev.agent)
            return
        assert job is not None and session is not None
        self._apply(out, F.JobDispatched(job=job.id, attempt=job.attempt, agent=ev.agent))
        spec, uid = job.spec, session.uid_for(job.uid)
        self._send(out, session, lambda seq: M.Dispatch(seq=seq, job=job.id, attempt=job.attempt, spec=spec, uid=uid))

    def _on_undelivered(self, ev: E.DispatchUndelivered, out: _Out) -> None:
        """A dispatch that never left: the attempt cannot have run, so it is
        redone at once (a cancel meanwhile is simply confirmed), not left RUNNING
        until the agent rejoins."""
        job = self.state.jobs.get(ev.job)
        # An attempt is dispatched once, to one agent: (job, attempt) names that dispatch.
        if job is None or job.state is not JobState.RUNNING or job.attempt != ev.attempt:
            return  # already settled (a round, a loss, a finish): nothing left to redo
        if job.cancel_requested:
            self._apply(out, F.JobCancelConfirmed(job=job.id, attempt=job.attempt))
        else:
            self._apply(out, F.JobRequeued(job=job.id, attempt=job.attempt, reason="dispatch not delivered"))

    # ---- views ---------------------------------------------------------------------

    def scheduler_view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]], bool]:
        """What the scheduler's view must equal once notifications drain."""
        pending = tuple(j.id for j in sorted(
            (j for j in self.state.jobs.values() if ready(self.state, j)), key=lambda j: int(j.id)))
        agents = {}
        for name, info in self.state.agents.items():
            session = self.sessions.get(name)
            available = bool(session and session.connected and not session.reconciling and not info.drained)
            agents[name] = (info.slots, info.used, available)
        return pending, agents, self.start_gate is not None

    def node_state(self, name: str) -> str:
        """One of model.nodes.NODE_STATES (the CLI's node state)."""
        return node_state(self, name)

    _HANDLERS: dict[type, Callable] = {
        E.AgentJoined: _on_join,
        E.MessageFromAgent: _on_message,
        E.ConnectionClosed: _on_closed,
        E.RoundDeadlineExpired: _on_deadline,
        E.Tick: _on_tick,
        E.SubmitJob: job_ops.on_submit,
        E.CancelJob: job_ops.on_cancel,
        E.DispatchProposed: _on_dispatch,
        E.DispatchUndelivered: _on_undelivered,
        E.ForgetAgent: job_ops.on_forget,
        E.DrainAgent: on_drain,
        E.ResumeAgent: on_resume,
        E.SubmitArray: job_ops.on_submit_array,
        E.SubmitBatch: batches.on_submit_batch,
        E.HoldJob: job_ops.on_hold,
        E.ReleaseJob: job_ops.on_release,
        E.RequeueJob: job_ops.on_requeue,
        E.ControllerStarted: startup.on_controller_started,
        E.StartGraceEnded: startup.on_grace_ended,
    }

