"""The agent daemon: one connection to the controller, real processes, a durable outbox.

One core task owns the model and executes its commands in order; durable
commands (records, outbox) are written in one transaction before any message
that follows them is sent, so a completion is on disk before it is ever on
the wire.  A connection task connects with jittered backoff (capped at 1 s by
default, so an agent is back within a second of the controller's return:
recovery time must not depend on how long the outage was), feeds what it
reads to the core, and reconnects when the connection ends.  There is
one delivery loop (the model's outbox, driven by ticks), not a task per job.

How soon to try again after the controller's error is the agent model's
decision (``model.agent.refusal_retry``, from the error's code); this module
follows it.  A refusal that a quick retry will not fix (a bad token, the name
held by another agent, another controller history, an unsupported version) is
not an outage: the agent keeps trying, but at its refusal pace (up to
``refusal_retry_max``), and logs the reason once per change, with a reminder
every ``refusal_reminder`` seconds (``RefusalLog``).
"""

from __future__ import annotations

import logging
import math
import os
import random
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected, HandshakeError, WebSocketConnection, open_websocket_url

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import (Agent, AgentConfig, LocalStatus, Retry, SessionState, from_older_controller,
                                refusal_retry)
from reckon.model.errors import PermanentRefusal, ProtocolError, RemoteProtocolError

from reckon.daemon.agent.controllers import ControllerUrls
from reckon.daemon.agent.options import AgentOptions
from reckon.daemon import runtime, wire
from reckon.daemon.store.agent import AgentStore
from reckon.daemon.store.machine import read_machine_id
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.store.filemodes import private_dir
from reckon.daemon.store.statelock import hold_state_dir
from reckon.daemon.agent.output import OutputFiles, held_keys
from reckon.daemon.auth.client import ClientAuth, CredentialError
from reckon.daemon.auth.munge import resolve_socket
from reckon.daemon.client_common import ClientError, client_ssl_context
from reckon.daemon.wsconnect import TLSFailure, cleartext_munge_warning, cleartext_token_warning, open_websocket
from reckon.daemon.agent.attempts import ExitStatus, JobLost, RunnerError
from reckon.daemon.agent.null_runner import HoldRunner, NullRunner
from reckon.daemon.agent.runner import JobRunner
from reckon.daemon.agent import lifecycle
from reckon.daemon.agent import resources as machine_resources
from reckon.daemon.agent.users import agent_line
from reckon.daemon.ops.metrics_http import serve_metrics

log = logging.getLogger("reckon.agent")

_DURABLE = (E.StoreRecord, E.DeleteRecord, E.OutboxPut, E.OutboxDelete, E.StoreCluster, E.StoreGeneration)
DEFER_WRITES_FOR = 0.05  # seconds a write with no effect may wait for company
TICK_AT_LEAST_EVERY = 1.0  # seconds: a busy core still ticks (heartbeats, retries) this often
MAX_DEFERRED = 5_000
EVENT_QUEUE = 100_000  # events waiting for the core (exits, reads, ticks); adoption does not go through it
REFUSAL_RETRY_FIRST = 5.0  # seconds before the first retry after a refusal (then doubling to the cap)
_REFUSED = "controller"  # the agent's one refusal condition key: it has one controller
_HELD = "held"  # refused for now (a start's hold on names): retried like an outage, logged like a refusal


def _handshake_failure(exc: HandshakeError) -> str:
    """Why a handshake failed: its cause, or itself; by type when it has no message
    (trio-websocket's ``ConnectionTimeout`` has none)."""
    reason = exc.__cause__ or exc
    return str(reason) or type(reason).__name__


@dataclass(slots=True)
class _Connection:
    ws: WebSocketConnection
    generation: int
    version: int = 1  # the protocol version the controller's Welcome named (frames follow it)
    welcomed: bool = False  # the controller accepted our Join
    refusal: str | None = None  # why we are refused on this connection, for good (not an outage)
    leader: str | None = None  # set when the peer is a standby: where it says the leader is ("" unknown)
    attempt: trio.CancelScope | None = None  # the connection's scope: cancelled to drop it without a close handshake
    unresponsive: bool = False  # dropped because the controller stopped answering pings


class AgentDaemon:
    def __init__(self, options: AgentOptions, store: AgentStore, runner: Any, agent: Agent) -> None:
        self.options = options
        self.store = store
        self.runner = runner
        self.model = agent
        self._events_send, self._events_recv = trio.open_memory_channel[tuple[Any, Any]](EVENT_QUEUE)
        self._conn: _Connection | None = None
        self._generation = 0
        self._wake = trio.Event()
        self._deferred: list[E.Command] = []  # durable writes no effect depends on yet
        self._last_tick = time.monotonic()
        self._tick_queued = False  # the ticker's Tick is waiting in the event queue
        self._refused: _Connection | None = None  # a connection that sent something invalid
        # Attempts whose launch task has not finished yet -> a kill came meanwhile.  The
        # runner ignores a kill for an attempt it does not list as running yet, so a kill
        # that overtakes its launch is kept here and carried out by the launch task.
        self._launching: dict[tuple[str, int], bool] = {}
        self.joined = trio.Event()  # set once the first session reached OPERATING (tests, dev mode)
        self.refusals = RefusalLog(log, remind_every=options.refusal_reminder, clock=trio.current_time)
        # Handshakes that fail in other ways (a proxy's 502, not a WebSocket server): an
        # outage, retried fast, but logged once per condition like a refusal.
        # Several: one leads (daemon/agent/controllers.py); one that failed us is passed over as
        # long as we would wait on a silent one.
        self.controllers = ControllerUrls(options.controller, hold=options.pong_timeout)
        self._standbys: dict[str, str] = {}  # standby URL -> the leader it named, as last logged
        self.failed_handshakes = RefusalLog(log, remind_every=options.refusal_reminder, clock=trio.current_time)
        self.output = OutputFiles(options.state_dir / "jobs", held=held_keys(agent), keep_days=options.keep_output)

    # ---- the core ----------------------------------------------------------------

    async def feed(self, event: Any, conn: _Connection | None = None) -> None:
        await self._events_send.send((event, conn))

    async def core_loop(self, nursery: trio.Nursery) -> None:
        while True:
            batch: list[tuple[Any, Any]] = []
            with trio.move_on_after(DEFER_WRITES_FOR if self._deferred else math.inf):
                batch.append(await self._events_recv.receive())
            if not batch:
                await self._commit([])  # a quiet moment: write what was deferred
                continue
            while len(batch) < 1000:
                try:
                    batch.append(self._events_recv.receive_nowait())
                except trio.WouldBlock:
                    break
            if time.monotonic() - self._last_tick >= TICK_AT_LEAST_EVERY:
                # Heartbeats and retries must not queue behind a flood of dispatches:
                # a starved heartbeat gets a busy agent disconnected as "silent".
                batch.insert(0, (E.Tick(now=time.time(), jitter=random.random()), None))
            commands: list[tuple[E.Command, _Connection | None]] = []
            for event, conn in batch:
                if isinstance(event, E.Tick):
                    self._last_tick = time.monotonic()
                    self._tick_queued = False
                if isinstance(event, E.Connected):
                    self._conn = conn
                elif isinstance(event, (E.Disconnected, E.MessageFromController)) and conn is not self._conn:
                    continue  # about a connection we already left behind
                elif isinstance(event, E.MessageFromController) and conn is self._refused:
                    continue  # the rest of what a connection we are hanging up on sent
                try:
                    cmds = self.model.handle(event)
                except PermanentRefusal as exc:
                    # Our own refusal (another controller history): not retried like an outage.
                    self._refuse(self._conn, f"we refuse to join: {exc}")
                    self._refused = self._conn
                    await self._hang_up()
                    continue
                except RemoteProtocolError as exc:
                    log.warning("controller sent something invalid: %s; reconnecting", exc)
                    self._refused = self._conn
                    await self._hang_up()
                    continue
                if isinstance(event, E.Disconnected):
                    self._conn = None
                commands.extend((c, self._conn) for c in cmds)
            await self._execute(commands, nursery)
            if self.model.session is SessionState.OPERATING:
                self.joined.set()
                cleared = self.failed_handshakes.cleared(_REFUSED) | self.failed_handshakes.cleared(_HELD)
                if self.refusals.cleared(_REFUSED) or cleared:  # the join went through: the condition is over
                    log.info("controller %s accepts us again", self.options.controller)
            self._wake.set()

    async def _execute(self, commands: list[tuple[E.Command, _Connection | None]], nursery: trio.Nursery) -> None:
        """Durable writes first, in one transaction, then the effects.

        Every send is preceded by the writes it depends on.  (Writing a later
        record before an earlier send is safe: a crash in between looks like
        that send being lost, which the protocol absorbs.)  A batch with no
        effect at all (an ack's outbox delete, a start time) may wait a moment
        to share the next transaction: nothing outside has seen its result, so
        losing it in a crash is the same as crashing a moment earlier, and the
        next effect commits it first anyway.
        """
        lifecycle.log_commands(commands)
        durable = [cmd for cmd, _ in commands if isinstance(cmd, _DURABLE)]
        effects = [(cmd, conn) for cmd, conn in commands if not isinstance(cmd, _DURABLE)]
        if not effects and len(self._deferred) + len(durable) < MAX_DEFERRED:
            self._deferred.extend(durable)
            return
        await self._commit(durable)
        # This batch's messages go out together, in as few frames as possible;
        # a frame leaves as soon as it is full, so the controller decodes the
        # first pages of a long report while later ones are still encoded.
        sends: list[bytes] = []
        size = 0
        conn = self._conn
        for cmd, cmd_conn in effects:
            if isinstance(cmd, E.Send):
                if isinstance(cmd.message, M.DispatchRefused):  # once per refused dispatch
                    log.warning("refused job %s attempt %s: %s", cmd.message.job, cmd.message.attempt,
                                cmd.message.reason)
                if cmd_conn is not None and cmd_conn is conn:
                    sends.append(wire.encode(cmd.message))
                    size += len(sends[-1])
                    if size >= wire.FRAME_BYTES:
                        await self._send_frames(conn, sends)
                        sends, size = [], 0
            elif isinstance(cmd, E.StartProcess):
                self._launching[(cmd.job, cmd.attempt)] = False
                nursery.start_soon(self._start, cmd)
            elif isinstance(cmd, E.KillProcess):
                if (cmd.job, cmd.attempt) in self._launching:
                    self._launching[(cmd.job, cmd.attempt)] = True  # _start carries it out
                else:
                    await self.runner.kill(cmd.job, cmd.attempt, grace=self.options.kill_grace)
            elif isinstance(cmd, E.SignalProcess):  # version 7: `reckon signal`, `scancel --signal`
                nursery.start_soon(self._signal, cmd)  # it may wait a moment for the job's pid record
            else:
                raise TypeError(f"agent cannot execute {cmd!r}")
        await self._send_frames(conn, sends)

    @staticmethod
    async def _send_frames(conn: _Connection | None, encoded: list[bytes]) -> None:
        if not encoded or conn is None:
            return
        try:
            for frame in wire.frames(encoded, version=conn.version):
                await conn.ws.send_message(frame)
        except WSClosed:
            pass  # the connection task notices and reports Disconnected

    async def _commit(self, durable: list[E.Command]) -> None:
        durable, self._deferred = self._deferred + durable, []
        if not durable:
            return
        await self.store.apply(durable)
        for cmd in durable:
            if isinstance(cmd, E.DeleteRecord):
                self._forget(cmd.job, cmd.attempt)
            elif isinstance(cmd, E.StoreCluster) and cmd.previous is not None:
                self._retire_job_files(cmd.previous)

    def _retire_job_files(self, previous: str) -> None:
        """A new controller history reuses job ids: keep the old one's files apart."""
        jobs = self.options.state_dir / "jobs"
        retired = self.options.state_dir / f"jobs.cluster-{previous}"
        if jobs.exists() and not retired.exists():
            jobs.rename(retired)
            private_dir(jobs)
        log.warning("joined controller history %s; the files of history %s are in %s",
                    self.model.cluster, previous, retired)

    def _forget(self, job: str, attempt: int) -> None:
        """The record is gone for good: the supervisor's status and pid files may go too."""
        try:
            self.runner.forget(job, attempt)
        except (RunnerError, OSError) as exc:
            log.debug("keeping the files of job %s attempt %s: %s", job, attempt, exc)

    async def adopt(self, adopted: dict[tuple[str, int], Any]) -> None:
        """Before the core runs: hand what became of the jobs of before the restart
        to the model directly, and make the result durable in one transaction.

        Not through the event queue: nothing drains it yet, and an agent with
        more records than it has room for would never start again.  The model is
        disconnected, so all it does here is write records and outbox entries.
        """
        now = time.time()
        commands: list[E.Command] = []
        for key, what in adopted.items():
            if isinstance(what, ExitStatus):
                commands += self.model.handle(_exited(what))
            elif what == "lost" or isinstance(what, JobLost):
                commands += self.model.handle(E.ProcessLost(job=key[0], attempt=key[1], now=now))
        effects = [cmd for cmd in commands if not isinstance(cmd, _DURABLE)]
        if effects:  # a disconnected model sends nothing and starts nothing
            raise RuntimeError(f"adoption asked for effects before the agent runs: {effects[:3]!r}")
        await self._commit(commands)

    async def _start(self, cmd: E.StartProcess) -> None:
        """Launch one attempt; a kill that came while the launch was under way is carried out here."""
        key = (cmd.job, cmd.attempt)
        try:
            if self._launching.get(key):
                # Killed before anything was launched: launch nothing.  No process
                # means no outcome; the attempt is reported unrecognized, and the
                # controller confirms the cancel without an exit code.
                log.info("job %s attempt %s was killed before its launch: not started", cmd.job, cmd.attempt)
                await self.feed(E.ProcessLost(job=cmd.job, attempt=cmd.attempt, now=time.time()))
                return
            try:
                started_at = await self.runner.start(cmd.job, cmd.attempt, cmd.spec, owner=cmd.owner, gpus=cmd.gpus)
            except RunnerError as exc:
                # Nothing ran and nothing is known: say so, never invent an exit code.
                log.error("job %s attempt %s could not be launched: %s", cmd.job, cmd.attempt, exc)
                await self.feed(E.ProcessLost(job=cmd.job, attempt=cmd.attempt, now=time.time()))
                return
            await self.feed(E.ProcessStarted(job=cmd.job, attempt=cmd.attempt, started_at=started_at))
            if self._launching.get(key):  # the runner lists it as running now: the kill takes
                await self.runner.kill(cmd.job, cmd.attempt, grace=self.options.kill_grace)
        finally:
            self._launching.pop(key, None)

    async def _signal(self, cmd: E.SignalProcess) -> None:
        reached = await self.runner.send_signal(cmd.job, cmd.attempt, cmd.signal, batch_only=cmd.batch_only,
                                                full=cmd.full)
        log.info("job %s attempt %s: signal %d sent (%d)", cmd.job, cmd.attempt, cmd.signal, reached)

    async def _hang_up(self) -> None:
        conn = self._conn
        if conn is not None:
            with trio.move_on_after(1):
                try:
                    await conn.ws.aclose()
                except WSClosed:
                    pass

    # ---- time and processes --------------------------------------------------------

    async def ticker(self) -> None:
        """Heartbeats, outbox retries and record expiry: the model says when.

        One Tick at a time: while one waits in the queue behind other events,
        the model's wake-up time stays in the past, and feeding another Tick on
        every pass would flood a busy core with ticks (it did, at 30k jobs).
        """
        while True:
            wakeup = self.model.next_wakeup()
            if self._tick_queued:
                delay = 1.0  # the core wakes us once it has handled it
            else:
                delay = 1.0 if wakeup is None else min(1.0, max(0.0, wakeup - time.time()))
            with trio.move_on_after(delay):
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            if not self._tick_queued:
                self._tick_queued = True
                await self.feed(E.Tick(now=time.time(), jitter=random.random()))

    async def exits(self) -> None:
        async for outcome in self.runner.exits:
            if isinstance(outcome, JobLost):
                log.warning("job %s attempt %s: outcome unknown (%s)", outcome.job, outcome.attempt, outcome.reason)
                await self.feed(E.ProcessLost(job=outcome.job, attempt=outcome.attempt, now=time.time()))
            else:
                await self.feed(_exited(outcome))

    # ---- the connection -------------------------------------------------------------

    async def connection_loop(self) -> None:
        delay = self.options.reconnect_initial
        refusal_delay = 0.0
        auth = ClientAuth(mode=self.options.auth, token=self.options.token, munge_socket=self.options.munge_socket)
        ssl_context = None  # made once, at the first wss:// URL (the --ca check at start already passed)
        while True:
            conn: _Connection | None = None
            refusal: str | None = None
            url = self.controllers.current + "/agent"
            if url.startswith("wss:") and ssl_context is None:
                ssl_context = client_ssl_context(self.options.ca)
            tls = {"ssl_context": ssl_context} if url.startswith("wss:") else {}
            # Cancelled when the controller stops answering pings: no close handshake with a
            # frozen peer (it would wait out disconnect_timeout for nothing).
            with trio.CancelScope() as attempt:
                try:
                    # One credential per connection (single-use); making one waits on munged: a thread.
                    headers = await trio.to_thread.run_sync(auth.headers) if auth.mode == "munge" else auth.headers()
                    async with open_websocket(url, extra_headers=headers, max_message_size=wire.MAX_AGENT_MESSAGE,
                                              connect_timeout=5, disconnect_timeout=2,
                                              opener=open_websocket_url, **tls) as ws:
                        delay = self.options.reconnect_initial
                        self._generation += 1
                        conn = _Connection(ws=ws, generation=self._generation, attempt=attempt)
                        log.log(self._quiet(), "connected to %s", self.controllers.current)
                        await self.feed(E.Connected(now=time.time()), conn)
                        try:
                            async with trio.open_nursery() as session:
                                session.start_soon(self._keepalive, conn, session.cancel_scope)
                                await self._read(conn)
                                session.cancel_scope.cancel()
                        finally:
                            with trio.CancelScope(shield=True):
                                await self.feed(E.Disconnected(now=time.time()), conn)
                except ConnectionRejected as exc:
                    body = (exc.body or b"").decode(errors="replace").strip()
                    if exc.status_code in (401, 403):
                        refusal = self._refuse(None, f"the controller refused us ({exc.status_code}): {body}")
                    else:
                        self.failed_handshakes.refused(_REFUSED, f"controller {self.options.controller} refused us "
                                                                 f"({exc.status_code}): {body}")
                except CredentialError as exc:  # our munged is down: retried like an outage, logged once
                    self.failed_handshakes.refused(_REFUSED, str(exc))
                except TLSFailure as exc:  # an operator must fix the certificate or --ca: not an outage
                    refusal = self._refuse(None, str(exc))
                except HandshakeError as exc:
                    self.failed_handshakes.refused(_REFUSED, f"cannot join {self.options.controller}: "
                                                             f"{_handshake_failure(exc)}")
                except (OSError, WSClosed) as exc:
                    log.debug("connection to %s failed: %s", self.options.controller, exc)
            if conn is not None and conn.refusal is not None:
                refusal = conn.refusal
            if conn is not None and conn.leader is not None:  # a standby: go where it points, at once
                if self.controllers.not_the_leader(conn.leader, trio.current_time()):
                    delay = self.options.reconnect_initial
            elif conn is None or not conn.welcomed or conn.unresponsive:
                self.controllers.failed(trio.current_time())
            if refusal is not None:
                # Not an outage: retrying every second changes nothing and floods both logs.
                refusal_delay = min(max(refusal_delay * 2, REFUSAL_RETRY_FIRST), self.options.refusal_retry_max)
                wait = refusal_delay
            else:
                if conn is not None and conn.welcomed:
                    refusal_delay = 0.0
                wait = delay
                delay = min(delay * 2, self.options.reconnect_max)
            # Jittered, capped backoff: quick to return, no thundering herd.
            await trio.sleep(wait * (0.5 + random.random() / 2))

    def _refuse(self, conn: _Connection | None, reason: str) -> str:
        """A refusal an operator must fix: retried at the refusal pace, logged once per condition."""
        if conn is not None:
            conn.refusal = reason
        self.refusals.refused(_REFUSED, f"{self.options.controller}: {reason} (retrying every "
                                        f"{self.options.refusal_retry_max:.0f} s at most)")
        return reason

    def _quiet(self) -> int:
        """The level of per-connection lines: debug while refused, so a refusal is not a line per attempt."""
        refused = self.refusals.active(_REFUSED) or self.failed_handshakes.active(_HELD)
        return logging.DEBUG if refused else logging.INFO

    async def _keepalive(self, conn: _Connection, session: trio.CancelScope) -> None:
        """Ping the controller; no pong in time ends the session (then we reconnect)."""
        while True:
            await trio.sleep(self.options.ping_interval)
            with trio.move_on_after(self.options.pong_timeout) as waiting:
                try:
                    await conn.ws.ping()
                except WSClosed:
                    return  # the reader sees the close
            if waiting.cancelled_caught:
                log.warning("the controller did not answer a ping within %.0fs: dropping the connection and "
                            "reconnecting", self.options.pong_timeout)
                conn.unresponsive = True
                (conn.attempt or session).cancel()
                return

    async def _read(self, conn: _Connection) -> None:
        while True:
            try:
                data = await conn.ws.get_message()
            except WSClosed as exc:
                log.log(logging.DEBUG if conn.refusal else self._quiet(), "controller connection closed: %s", exc.reason)
                return
            try:
                messages = wire.decode_frame(data, to="agent")
            except ProtocolError as exc:
                log.warning("invalid message from the controller: %s", exc)
                return
            now = time.time()
            for msg in messages:
                if isinstance(msg, M.OutputRead):  # served here: it changes no state (daemon/agent/output.py)
                    await self._send_frames(conn, [wire.encode(await self.output.answer(msg))])
                    continue
                retry = refusal_retry(msg) if isinstance(msg, M.Error) else None  # the model's policy
                if retry is Retry.RETRY_NOW:
                    conn.leader = msg.leader  # a standby: no error of ours; logged once per (standby, leader)
                    if self._standbys.get(self.controllers.current) != msg.leader:
                        self._standbys[self.controllers.current] = msg.leader
                        log.info("%s is a standby controller: %s", self.controllers.current, msg.reason)
                    continue
                if retry is Retry.NEVER and from_older_controller(msg):
                    self._refuse(conn, f"the controller says: {msg.reason}; it runs an older reckon than this "
                                       f"agent and refuses its messages: upgrade the controller first (README: Upgrades)")
                elif retry is Retry.NEVER:
                    self._refuse(conn, f"the controller refused us: {msg.reason}")
                elif retry is Retry.BACK_OFF:
                    # Refused for now (a start's hold on names): retried like an outage, but one
                    # line per condition, not one per attempt.
                    self.failed_handshakes.refused(_HELD, f"{self.options.controller}: the controller "
                                                             f"says: {msg.reason} (retrying)")
                elif retry is Retry.CARRY_ON:
                    log.warning("controller says: %s", msg.reason)
                elif isinstance(msg, M.Welcome):
                    conn.version = msg.version
                    conn.welcomed = True
                    self.controllers.welcomed()
                await self.feed(E.MessageFromController(message=msg, now=now), conn)


async def _release_on_sigusr1(runner: HoldRunner) -> None:
    import signal

    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            log.info("released %d held job(s)", runner.release_all())


def _exited(status: ExitStatus) -> E.ProcessExited:
    return E.ProcessExited(job=status.job, attempt=status.attempt, exit_code=status.exit_code,
                           signal=status.signal, finished_at=status.finished_at, started_at=status.started_at,
                           timed_out=status.timed_out, usage=status.usage, oom=status.oom, not_run=status.not_run,
                           now=time.time())


async def run_agent(options: AgentOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Recover local records, re-adopt jobs, then connect and work until cancelled."""
    with hold_state_dir(options.state_dir, "agent"):
        await _run(options, task_status)


async def _run(options: AgentOptions, task_status) -> None:
    runtime.tune()
    if options.controller.startswith("wss:"):
        client_ssl_context(options.ca)  # UsageError: an unreadable --ca fails now, not at each attempt
    warning = (cleartext_munge_warning(options.controller) if options.auth == "munge"
               else cleartext_token_warning(options.controller, options.token))
    if warning:
        log.warning("%s", warning)
    if options.auth == "munge":  # munged down at start: one line, and no start (the controller does the same)
        try:
            await trio.to_thread.run_sync(ClientAuth(mode="munge", munge_socket=options.munge_socket).headers)
        except CredentialError as exc:
            raise ClientError(str(exc)) from None
        log.info("auth: munge, a credential per connection from munged at %s", resolve_socket(options.munge_socket))
    store = await AgentStore.open(options.state_dir)
    try:
        # CopiedStateDir: another machine's directory; WrongStateDir: another agent's.
        machine = await store.claim_machine(read_machine_id(options.machine_id_files), options.moved_from)
        if (line := machine.log_line(options.state_dir)) is not None:
            getattr(log, line[0])("%s", line[1])
        identity = await store.claim_identity(options.name)
        records, outbox = await store.load()
        cluster = await store.load_cluster()
        join_generation = await store.load_generation()  # 0: none yet
        running = [r.key for r in records if r.status is LocalStatus.RUNNING]
        real = options.executor not in ("null", "hold")
        # In the loop, not a thread: quick (a few mkdirs, leftovers killed), and before anything runs.
        enforced = machine_resources.enforcement(options.name, identity, running, use_cgroups=options.cgroups and real)
        try:
            slots, resources, lines = machine_resources.machine(replace(options.declared, cpus=options.slots), enforced)
        except machine_resources.ResourceConfigError:
            machine_resources.release_enforcement(enforced)
            raise
        munge = options.auth == "munge"
        if real:  # its launcher and every supervisor inherit it
            lines.append(machine_resources.exempt_from_the_oom_killer())
        for level, line in (lines + [("info", agent_line(options.allow_root_jobs, munge))]) if real else ():
            getattr(log, level)("%s", line)  # what it cannot enforce here, and whom it runs jobs as
        # The real runner's supervisors wait the agent's kill grace at a job's time limit too.
        runner = ({"null": NullRunner, "hold": HoldRunner}[options.executor](options.state_dir)
                  if not real
                  else JobRunner(options.state_dir, kill_grace=options.kill_grace, output_mode=options.output_mode,
                                 cgroups=enforced, pids_max=options.job_pids_max, mem_cap=resources.mem,
                                 allow_root_jobs=options.allow_root_jobs, umask=options.job_umask,
                                 controller=options.controller,
                                 refuse_ownerless=munge and os.geteuid() == 0 and not options.allow_root_jobs))
        async with runner:
            config = AgentConfig(name=options.name, slots=slots, identity=identity,
                                 instance=secrets.token_hex(16),  # this process: model/names.py
                                 log_dir=str(options.state_dir / "jobs"), resources=resources, **options.model)
            agent = Agent(config, records, outbox, cluster, join_generation)
            del records, outbox
            runtime.settle()
            daemon = AgentDaemon(options, store, runner, agent)
            if running:
                await daemon.adopt(await runner.adopt(running))
                log.info("re-adopted %d job(s) from before the restart", len(running))
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(daemon.core_loop, nursery)
                    nursery.start_soon(daemon.exits)
                    nursery.start_soon(daemon.ticker)
                    nursery.start_soon(daemon.connection_loop)
                    nursery.start_soon(daemon.output.retention_loop)
                    if isinstance(runner, HoldRunner):
                        nursery.start_soon(_release_on_sigusr1, runner)
                    if options.metrics is not None:
                        await nursery.start(serve_metrics, *options.metrics, lifecycle.agent_registry(daemon))
                    task_status.started(daemon)
            finally:
                with trio.CancelScope(shield=True):
                    await daemon._commit([])  # a clean stop writes what was deferred
                machine_resources.release_enforcement(enforced)  # its base cgroups, if no job is left
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
