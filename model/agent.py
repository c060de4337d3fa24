"""The agent: every protocol decision on the agent side.

It keeps local job records and the completion outbox (both durable through
``StoreRecord`` / ``OutboxPut`` commands that precede any send they back),
answers resync queries, retries completions with capped exponential backoff
until the controller acks them, and holds heartbeats and outbox flushing back
until a resync report is fully sent (Req 3.8).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Callable

from . import events as E
from . import messages as M
from .errors import LocalProtocolError, PermanentRefusal, RemoteProtocolError
from .records import LocalJob, LocalRecords, LocalStatus
from .resources import NodeResources


class SessionState(enum.Enum):
    DISCONNECTED = "disconnected"  # no connection to the controller
    JOINING = "joining"  # connected, Join sent, waiting for Welcome
    RESYNCING = "resyncing"  # a round is open: collecting the query, normal work held back
    OPERATING = "operating"  # normal work: heartbeats, completion reports


class SessionEvent(enum.Enum):
    CONNECT = "connect"  # a connection to the controller is up
    WELCOME_PLAIN = "welcome_plain"  # the controller has nothing to reconcile
    WELCOME_RESYNC = "welcome_resync"  # a round is armed: query pages follow
    QUERY_PAGE = "query_page"  # a query page arrived (of a round armed by join or heartbeat)
    REPORT_SENT = "report_sent"  # the whole report has been handed to the connection
    DISCONNECT = "disconnect"  # the connection is gone


# The agent's session machine.  Join, then either work at once or answer a
# round first; a query can also arrive while operating (anti-entropy), which
# holds normal work back again until the report is out.  Every connected
# state can lose the connection.  Anything else (a Welcome while operating, a
# query before Welcome) is a protocol error from the controller.
SESSION_TRANSITIONS: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (SessionState.DISCONNECTED, SessionEvent.CONNECT): SessionState.JOINING,
    (SessionState.JOINING, SessionEvent.WELCOME_PLAIN): SessionState.OPERATING,
    (SessionState.JOINING, SessionEvent.WELCOME_RESYNC): SessionState.RESYNCING,
    (SessionState.RESYNCING, SessionEvent.QUERY_PAGE): SessionState.RESYNCING,
    (SessionState.RESYNCING, SessionEvent.REPORT_SENT): SessionState.OPERATING,
    (SessionState.OPERATING, SessionEvent.QUERY_PAGE): SessionState.RESYNCING,
    (SessionState.JOINING, SessionEvent.DISCONNECT): SessionState.DISCONNECTED,
    (SessionState.RESYNCING, SessionEvent.DISCONNECT): SessionState.DISCONNECTED,
    (SessionState.OPERATING, SessionEvent.DISCONNECT): SessionState.DISCONNECTED,
    (SessionState.DISCONNECTED, SessionEvent.DISCONNECT): SessionState.DISCONNECTED,
}


class Retry(enum.Enum):
    """What the agent does after an ``Error`` from the controller (``refusal_retry``)."""

    CARRY_ON = "carry_on"  # not a refusal: the connection goes on (the daemon logs the error)
    RETRY_NOW = "retry_now"  # a standby named the leader: go there at once
    BACK_OFF = "back_off"  # refused for now: reconnect at the outage pace, one log line per condition
    NEVER = "never"  # not until an operator acts: only the slow refusal pace, logged once with reminders


# The refusal policy: what each code makes the agent do.  Every code has an entry (checked below);
# NEVER is exactly the permanent ones, so older agents (which only read ``permanent``) do the same.
REFUSAL_RETRY: dict[M.RefusalCode, Retry] = {
    M.RefusalCode.INVALID: Retry.BACK_OFF,
    M.RefusalCode.ROUND_TIMEOUT: Retry.BACK_OFF,
    M.RefusalCode.STALE_ROUND: Retry.CARRY_ON,
    M.RefusalCode.STALE_JOIN: Retry.BACK_OFF,
    M.RefusalCode.VERSION: Retry.NEVER,
    M.RefusalCode.NAME_HELD: Retry.NEVER,
    M.RefusalCode.NAME_HELD_FOR_NOW: Retry.BACK_OFF,
    M.RefusalCode.STALE_COPY: Retry.NEVER,
    M.RefusalCode.GENERATIONS_SPENT: Retry.NEVER,
    M.RefusalCode.NOT_LEADER: Retry.RETRY_NOW,
}
if set(REFUSAL_RETRY) != set(M.RefusalCode):  # pragma: no cover - a code added without its policy
    raise ImportError(f"no refusal policy for {sorted(c.value for c in set(M.RefusalCode) - set(REFUSAL_RETRY))}")


def refusal_retry(error: M.Error) -> Retry:
    """How the agent answers ``error``: from its code, or from what an older controller (no code) says."""
    if error.code is not None:
        return REFUSAL_RETRY[error.code]
    if error.leader is not None:
        return Retry.RETRY_NOW
    if error.permanent or from_older_controller(error):
        return Retry.NEVER
    return Retry.BACK_OFF if error.fatal else Retry.CARRY_ON


def from_older_controller(error: M.Error) -> bool:
    """A controller older than this agent refusing the fields this agent's messages carry (its
    decoder's words; it predates codes and cannot say how permanent that is): the upgrade order was
    the wrong way round, and only upgrading it helps."""
    return error.code is None and error.fatal and not error.permanent and "unknown fields" in error.reason


# Round tokens remembered per connection, to ignore late copies of their queries.  A
# connection loses nothing and copies nothing, so this guards against what the checks'
# fault model allows (a copy of an old round's input on a live connection), not the wire.
ANSWERED_KEPT = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    name: str
    slots: int
    page_size: int = 1000  # entries per resync report page
    recent_window: float = 300.0  # seconds a finished job is still reported as an unqueried extra
    retry_initial: float = 1.0  # first completion retry delay
    retry_max: float = 30.0  # backoff cap
    heartbeat_interval: float = 2.0
    log_dir: str | None = None  # told to the controller at join, for `reckon show`
    log_layout: str = "flat"  # how job output files are named there (messages.LOG_LAYOUTS)
    identity: str | None = None  # this agent's durable identity (from its state directory), sent in Join
    instance: str | None = None  # random per process start, sent in Join (model.names: a copied state directory)
    resources: NodeResources | None = None  # what the machine offers beyond CPUs, sent in Join (version 6)

    def __post_init__(self) -> None:
        if self.identity is not None:
            M.check_identity("identity", self.identity)
        if self.instance is not None:
            M.check_identity("instance", self.instance)
        if not isinstance(self.page_size, int) or not 1 <= self.page_size <= M.MAX_PAGE_ENTRIES:
            raise ValueError(f"page_size must be in 1..{M.MAX_PAGE_ENTRIES}")
        if not 0 < self.retry_initial <= self.retry_max:
            raise ValueError("need 0 < retry_initial <= retry_max")
        if self.recent_window < 0 or self.heartbeat_interval <= 0:
            raise ValueError("recent_window must be >= 0 and heartbeat_interval > 0")


@dataclass(slots=True)
class OutboxEntry:
    report: M.Finished
    delay: float  # the wait after the next send
    next_at: float | None = None  # when to resend; None: send at the next chance


@dataclass(slots=True)
class _Query:
    token: bytes
    pages: int
    received: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)


class Agent:
    def __init__(self, config: AgentConfig, records: list[LocalJob] | None = None,
                 outbox: list[M.Finished] | None = None, cluster: str | None = None,
                 generation: int | None = None) -> None:
        """A fresh agent, or one restarted from its durable records, outbox, cluster and join generation."""
        self.config = config
        self.cluster = cluster  # the controller history our records belong to
        # The last join generation stored (StoreGeneration; 0: none yet), presented in Join.  None: this
        # agent keeps none and joins as an agent before version 4 did (no check; the model-level machines
        # run such agents, so that their explored state stays finite).
        self.generation = generation
        self.session = SessionState.DISCONNECTED
        self.records = LocalRecords(records or ())
        self.outbox: dict[tuple[str, int], OutboxEntry] = {
            (r.job, r.attempt): OutboxEntry(report=r, delay=config.retry_initial) for r in outbox or ()
        }
        # No retry is due before this (while operating).  Kept by _flush and
        # _send_report, so next_wakeup() need not scan the outbox after every
        # batch; an ack may leave it early, which costs one idle tick.
        self._earliest_retry = 0.0
        self.seen_seq = 0
        self._query: _Query | None = None
        self._answered: bytes | None = None  # the last round answered on this connection
        # Every round answered on this connection (the newest ANSWERED_KEPT): a late copy of
        # any of their queries is stale, not a new round (see _on_query_page).
        self._answered_before: dict[bytes, None] = {}
        # The outbox entries that round's report carried as FINISHED: its
        # ResyncDone acknowledges them all (see _on_done).
        self._reported: list[tuple[str, int]] = []
        self._next_heartbeat = 0.0
        # Starts not yet told to the controller.  They go out with the next tick,
        # so a job that ends before it costs no message at all: its completion
        # report carries the start time anyway.
        self._unreported_starts: set[tuple[str, int]] = set()

    # ---- entry point ---------------------------------------------------------

    def handle(self, event: E.AgentEvent) -> list[E.Command]:
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"the agent does not handle {type(event).__name__}")
        out: list[E.Command] = []
        handler(self, event, out)
        return out

    def _move(self, event: SessionEvent) -> None:
        try:
            self.session = SESSION_TRANSITIONS[(self.session, event)]
        except KeyError:
            raise RemoteProtocolError(f"{event.value} is not allowed while {self.session.value}") from None

    def _store(self, out: list[E.Command], record: LocalJob) -> None:
        self.records[record.key] = record
        out.append(E.StoreRecord(record=record))

    def _send(self, out: list[E.Command], message: M.AgentMessage) -> None:
        out.append(E.Send(conn=0, message=message))

    def held(self) -> list[tuple[str, int]]:
        return [key for key, r in self.records.items() if r.held]

    # ---- connection --------------------------------------------------------------

    def _on_connected(self, ev: E.Connected, out: list[E.Command]) -> None:
        self._move(SessionEvent.CONNECT)
        self.seen_seq = 0
        running = sum(1 for r in self.records.values() if r.status is LocalStatus.RUNNING)
        self._send(out, M.Join(agent=self.config.name, slots=self.config.slots, version=M.PROTOCOL_VERSION,
                               running=running, log_dir=self.config.log_dir, log_layout=self.config.log_layout,
                               identity=self.config.identity, cluster=self.cluster, instance=self.config.instance,
                               generation=self.generation if self._keeps_generations else None,
                               resources=self.config.resources))

    def _on_disconnected(self, ev: E.Disconnected, out: list[E.Command]) -> None:
        self._move(SessionEvent.DISCONNECT)
        self._query = None
        self._answered = None
        self._answered_before.clear()
        self._reported = []  # unacknowledged entries go into the next join's round

    def _on_message(self, ev: E.MessageFromController, out: list[E.Command]) -> None:
        msg = ev.message
        if self.session is SessionState.DISCONNECTED:
            return  # a message from a connection that is gone
        if isinstance(msg, M.Welcome):
            self._check_cluster(msg, out)
            if msg.token is None:
                self._move(SessionEvent.WELCOME_PLAIN)
                self._store_generation(msg, out)
                self._resume(ev.now, out)
            else:
                self._move(SessionEvent.WELCOME_RESYNC)
                self._store_generation(msg, out)
                self._query = _Query(token=msg.token, pages=msg.query_pages)
        elif isinstance(msg, M.ResyncQuery):
            self._on_query_page(msg, ev.now, out)
        elif isinstance(msg, M.ResyncDone):
            self._on_done(msg, out)
        elif isinstance(msg, M.Dispatch):
            self._on_dispatch(msg, out)
        elif isinstance(msg, M.Kill):
            record = self.records.get((msg.job, msg.attempt))
            if (record is not None and record.status is LocalStatus.RUNNING
                    and (msg.uid is None or record.uid is None or msg.uid == record.uid)):
                out.append(E.KillProcess(job=msg.job, attempt=msg.attempt))
        elif isinstance(msg, M.Signal):
            self._on_signal(msg, out)
        elif isinstance(msg, M.Ack):
            self._on_ack(msg, out)
        elif isinstance(msg, M.Error):
            pass  # the daemon logs it; a fatal one is followed by a close
        else:
            raise RemoteProtocolError(f"unexpected {msg.TYPE} message from the controller")
        # Counted only once handled: a message refused above changes nothing, not even this.
        self.seen_seq = max(self.seen_seq, getattr(msg, "seq", 0))

    def _on_signal(self, msg: M.Signal, out: list[E.Command]) -> None:
        """Version 7: signal the attempt's processes, as a Kill kills them: only the attempt it
        names, running here, of the submission it names."""
        record = self.records.get((msg.job, msg.attempt))
        if record is None or record.status is not LocalStatus.RUNNING:
            return
        if msg.uid is not None and record.uid is not None and msg.uid != record.uid:
            return
        out.append(E.SignalProcess(job=msg.job, attempt=msg.attempt, signal=msg.signal, batch_only=msg.batch_only,
                                   full=msg.full))

    @property
    def _keeps_generations(self) -> bool:
        """Join generations belong to an identity: without one the controller could not check them."""
        return self.generation is not None and self.config.identity is not None

    def _store_generation(self, msg: M.Welcome, out: list[E.Command]) -> None:
        """The Welcome's join generation, durable before anything this agent sends from now on:
        the controller takes any message on this connection as proof of it (model.names)."""
        if self._keeps_generations and msg.generation is not None and msg.generation != self.generation:
            out.append(E.StoreGeneration(generation=msg.generation))
            self.generation = msg.generation

    def _check_cluster(self, msg: M.Welcome, out: list[E.Command]) -> None:
        """Never mix two controller histories: job ids restart with a new one.

        Records of another history that still matter (running, or an outcome
        not yet acknowledged) make us refuse the controller: nothing is lost
        and nothing is reported to a history it does not belong to.  Records
        that no longer matter are let go, and we join the new history.
        """
        if msg.cluster is None or msg.cluster == self.cluster:
            return
        if self.cluster is not None:
            # Indeterminate records do not count: they hold no process and no outcome.
            live = [r.key for r in self.records.values()
                    if r.status is LocalStatus.RUNNING or (r.status is LocalStatus.FINISHED and not r.acked)]
            if live or self.outbox:
                raise PermanentRefusal(
                    f"the controller serves cluster {msg.cluster}, but this agent still holds "
                    f"{len(live)} job(s) of cluster {self.cluster}: refusing to mix them; bring back "
                    f"that controller's state, or clear this agent's state directory to start over")
            for key in list(self.records):
                del self.records[key]
                out.append(E.DeleteRecord(job=key[0], attempt=key[1]))
        out.append(E.StoreCluster(cluster=msg.cluster, previous=self.cluster))
        self.cluster = msg.cluster

    def _resume(self, now: float, out: list[E.Command], held: list[tuple[str, int]] = ()) -> None:
        """Normal operation starts: flush the outbox now, heartbeat soon.

        ``held``: completions the report just carried.  The round's ResyncDone
        acknowledges them, so sending each again would only double the
        controller's work (100k messages after a 100k-job round); they wait a
        full retry interval instead, in case that ResyncDone never comes.
        """
        for entry in self.outbox.values():
            entry.delay = self.config.retry_initial
            entry.next_at = None
        for key in held:
            entry = self.outbox.get(key)
            if entry is not None:
                entry.delay = self.config.retry_max
                entry.next_at = now + self.config.retry_max
        self._flush(now, 0.0, out)
        self._next_heartbeat = now

    def _on_done(self, msg: M.ResyncDone, out: list[E.Command]) -> None:
        """The round is applied and durable: its FINISHED entries are acknowledged."""
        if msg.token != self._answered:
            return  # a round we did not answer on this connection: it acknowledges nothing
        keys, self._reported = self._reported, []
        for key in keys:
            self._acknowledge(key, out)

    # ---- resync ------------------------------------------------------------------

    def _on_query_page(self, msg: M.ResyncQuery, now: float, out: list[E.Command]) -> None:
        if self.session is SessionState.JOINING:
            raise RemoteProtocolError("resync query before welcome")
        if msg.token in self._answered_before:
            # A late copy of a page of a round we already answered (the last one
            # or an earlier one).  Answering again would send a second report
            # (refused as stale) and, worse, make a late copy of that round's
            # ResyncDone acknowledge what only the second report carried; waiting
            # for its other pages would stall the session.
            return
        q = self._query
        if q is None or q.token != msg.token:
            q = self._query = _Query(token=msg.token, pages=msg.pages)  # a new round supersedes
        if msg.pages != q.pages:
            raise RemoteProtocolError("resync query pages disagree on the page count")
        self._move(SessionEvent.QUERY_PAGE)
        q.received[msg.page] = msg.jobs
        if len(q.received) < q.pages:
            return
        queried = [pair for page in range(q.pages) for pair in q.received[page]]
        self._query = None
        self._answered = q.token
        self._answered_before[q.token] = None
        if len(self._answered_before) > ANSWERED_KEPT:
            del self._answered_before[next(iter(self._answered_before))]
        reported = self._answer(q.token, queried, now, out)
        self._move(SessionEvent.REPORT_SENT)
        self._resume(now, out, held=reported)

    def _answer(self, token: bytes, queried: list[tuple[str, int]], now: float,
                out: list[E.Command]) -> list[tuple[str, int]]:
        """Send the report; returns the outbox entries it carried as FINISHED."""
        entries: list[M.ReportEntry] = []
        asked = set()
        for job, attempt in queried:
            asked.add((job, attempt))
            record = self.records.get((job, attempt))
            entries.append(self._entry(record) if record is not None else
                           M.ReportEntry(job=job, attempt=attempt, status=M.EntryStatus.UNRECOGNIZED))
        horizon = now - self.config.recent_window
        for key, record in self.records.items():
            if key in asked or record.status is LocalStatus.INDETERMINATE:
                continue
            if record.status is LocalStatus.RUNNING or not record.acked or (record.finished_at or 0) >= horizon:
                entries.append(self._entry(record))
        chunks = M.pages(entries, self.config.page_size)
        for i, chunk in enumerate(chunks):
            self._send(out, M.ResyncReport(token=token, page=i, pages=len(chunks), entries=tuple(chunk)))
        # Indeterminate records have now been told (if asked) or are not placed
        # here at all: either way nobody can learn more of them.
        for key in [k for k, r in self.records.items() if r.status is LocalStatus.INDETERMINATE]:
            del self.records[key]
            out.append(E.DeleteRecord(job=key[0], attempt=key[1]))
        self._reported = [(e.job, e.attempt) for e in entries
                          if e.status is M.EntryStatus.FINISHED and (e.job, e.attempt) in self.outbox]
        return self._reported

    @staticmethod
    def _entry(record: LocalJob) -> M.ReportEntry:
        if record.status is LocalStatus.FINISHED:
            return M.ReportEntry(job=record.job, attempt=record.attempt, status=M.EntryStatus.FINISHED,
                                 exit_code=record.exit_code, signal=record.signal,
                                 started_at=record.started_at, finished_at=record.finished_at, uid=record.uid,
                                 timed_out=record.timed_out, usage=record.usage, oom=record.oom, gpus=record.gpus,
                                 not_run=record.not_run)
        if record.status is LocalStatus.RUNNING:
            return M.ReportEntry(job=record.job, attempt=record.attempt, status=M.EntryStatus.RUNNING,
                                 started_at=record.started_at, uid=record.uid, gpus=record.gpus)
        # Req 3.3: what we cannot determine is reported as such, never guessed.
        return M.ReportEntry(job=record.job, attempt=record.attempt, status=M.EntryStatus.UNRECOGNIZED,
                             uid=record.uid)

    # ---- jobs ----------------------------------------------------------------------

    def _on_dispatch(self, msg: M.Dispatch, out: list[E.Command]) -> None:
        held = self.records.get((msg.job, msg.attempt))
        if held is None:
            self._store(out, LocalJob(job=msg.job, attempt=msg.attempt, spec=msg.spec, uid=msg.uid,
                                      owner=msg.owner, gpus=msg.gpus))
            out.append(E.StartProcess(job=msg.job, attempt=msg.attempt, spec=msg.spec, owner=msg.owner,
                                      gpus=msg.gpus))
            return
        reason = self._other_submission(held, msg)
        if reason is None:
            return  # a duplicate dispatch: the attempt is already ours
        # The same (job, attempt) for another submission (the controller's state
        # was rolled back and the id reused): running nothing is the only safe
        # answer, and the controller must hear it now, not at the next round.
        self._send(out, M.DispatchRefused(job=msg.job, attempt=msg.attempt, uid=msg.uid, reason=reason))

    @staticmethod
    def _other_submission(held: LocalJob, msg: M.Dispatch) -> str | None:
        """Why ``msg`` is not the dispatch ``held`` came from, or None if it is."""
        if held.uid is not None and msg.uid is not None:
            if held.uid == msg.uid:
                return None
            return (f"this agent holds {msg.job}.{msg.attempt} for another submission "
                    f"(uid {held.uid}, dispatched uid {msg.uid})")
        if held.spec is not None and held.spec != msg.spec:  # no uid on one side: the spec must match
            return f"this agent holds {msg.job}.{msg.attempt} with a different job spec"
        return None

    def _on_started(self, ev: E.ProcessStarted, out: list[E.Command]) -> None:
        record = self.records.get((ev.job, ev.attempt))
        if record is None or record.started_at is not None:
            return  # unknown, or the start time is known already (from the exit: the same one)
        if record.status is LocalStatus.RUNNING:
            self._store(out, replace(record, started_at=ev.started_at))
            self._unreported_starts.add(record.key)
        elif record.status is LocalStatus.FINISHED:
            # The exit was read before the launch was answered (a short job): the
            # start time joins the outcome, and the report not yet acked carries it.
            record = replace(record, started_at=ev.started_at)
            self._store(out, record)
            entry = self.outbox.get(record.key)
            if entry is not None:
                entry.report = record.report()
                out.append(E.OutboxPut(report=entry.report))

    def _on_exited(self, ev: E.ProcessExited, out: list[E.Command]) -> None:
        record = self.records.get((ev.job, ev.attempt))
        if record is None:
            # The supervisor knows an attempt our records lost: keep its outcome anyway.
            record = LocalJob(job=ev.job, attempt=ev.attempt, spec=None)
        elif record.status is LocalStatus.FINISHED:
            return  # already recorded: the supervisor's status was read twice
        started_at = ev.started_at if ev.started_at is not None else record.started_at
        record = replace(record, status=LocalStatus.FINISHED, exit_code=ev.exit_code, signal=ev.signal,
                         started_at=started_at, finished_at=ev.finished_at, acked=False, timed_out=ev.timed_out,
                         usage=ev.usage, oom=ev.oom, not_run=ev.not_run)
        self._store(out, record)
        report = record.report()
        self.outbox[record.key] = OutboxEntry(report=report, delay=self.config.retry_initial)
        out.append(E.OutboxPut(report=report))  # durable before it is ever sent
        if self.session is SessionState.OPERATING:  # else held back until the session resumes
            self._send_report(self.outbox[record.key], ev.now, 0.0, out)

    def _on_lost(self, ev: E.ProcessLost, out: list[E.Command]) -> None:
        record = self.records.get((ev.job, ev.attempt))
        if record is None or record.status is not LocalStatus.RUNNING:
            return
        # finished_at: when we gave up on it, so it expires like an acked outcome
        # even if no round ever asks about it.
        self._store(out, replace(record, status=LocalStatus.INDETERMINATE, finished_at=ev.now))

    def _on_ack(self, msg: M.Ack, out: list[E.Command]) -> None:
        self._acknowledge((msg.job, msg.attempt), out)

    def _acknowledge(self, key: tuple[str, int], out: list[E.Command]) -> None:
        """The controller has this outcome durably: the outbox entry may go."""
        if self.outbox.pop(key, None) is not None:
            out.append(E.OutboxDelete(job=key[0], attempt=key[1]))
        record = self.records.get(key)
        if record is not None and record.status is LocalStatus.FINISHED and not record.acked:
            self._store(out, replace(record, acked=True))

    # ---- time ------------------------------------------------------------------------

    def _flush(self, now: float, jitter: float, out: list[E.Command]) -> None:
        """Send every outbox entry that is due, and schedule its retry."""
        if self.session is not SessionState.OPERATING:
            return  # held back: disconnected, joining or mid-resync (Req 3.8)
        earliest = float("inf")
        for entry in self.outbox.values():
            if entry.next_at is None or entry.next_at <= now:
                self._send_report(entry, now, jitter, out)
            earliest = min(earliest, entry.next_at)
        self._earliest_retry = earliest

    def _send_report(self, entry: OutboxEntry, now: float, jitter: float, out: list[E.Command]) -> None:
        self._send(out, entry.report)
        entry.next_at = now + entry.delay * (1.0 + 0.25 * jitter)
        entry.delay = min(entry.delay * 2, self.config.retry_max)
        self._earliest_retry = min(self._earliest_retry, entry.next_at)

    def _on_tick(self, ev: E.Tick, out: list[E.Command]) -> None:
        self._flush(ev.now, ev.jitter, out)
        if self.session is SessionState.OPERATING and self._unreported_starts:
            for key in sorted(self._unreported_starts):
                record = self.records.get(key)
                if record is not None and record.status is LocalStatus.RUNNING and record.started_at is not None:
                    self._send(out, M.Started(job=record.job, attempt=record.attempt, started_at=record.started_at,
                                              uid=record.uid))
            self._unreported_starts.clear()
        if self.session is SessionState.OPERATING and ev.now >= self._next_heartbeat:
            self._send(out, M.Heartbeat(running=self.records.held_count, digest=self.records.held_digest,
                                        seen_seq=self.seen_seq))
            self._next_heartbeat = ev.now + self.config.heartbeat_interval
        for key in self.records.expired(ev.now - self.config.recent_window):
            del self.records[key]
            out.append(E.DeleteRecord(job=key[0], attempt=key[1]))

    def next_wakeup(self) -> float | None:
        """The earliest time a Tick would do something (for the daemon's sleep).

        Only while operating: the outbox is not flushed otherwise, so a retry
        time in the past must not make a disconnected agent tick in a loop.
        """
        if self.session is not SessionState.OPERATING:
            return None
        if not self.outbox:
            return self._next_heartbeat
        return min(self._earliest_retry, self._next_heartbeat)

    _HANDLERS: dict[type, Callable] = {
        E.Connected: _on_connected,
        E.Disconnected: _on_disconnected,
        E.MessageFromController: _on_message,
        E.ProcessStarted: _on_started,
        E.ProcessExited: _on_exited,
        E.ProcessLost: _on_lost,
        E.Tick: _on_tick,
    }
