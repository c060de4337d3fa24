"""The agent daemon: one connection to the controller, real processes, a durable outbox.

One core task owns the model and executes its commands in order; durable
commands (records, outbox) are written in one transaction before any message
that follows them is sent, so a completion is on disk before it is ever on
the wire.  A connection task connects with jittered backoff (capped at 1 s by
default, so an agent is back within a second of the controller's return:
recovery time must not depend on how long the outage was), feeds what it
reads to the core, and reconnects when the connection ends.  There is
one delivery loop (the model's outbox, driven by ticks), not a task per job.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected, HandshakeError, WebSocketConnection, open_websocket_url

from model import events as E
from model import messages as M
from model.agent import Agent, AgentConfig, LocalStatus
from model.errors import ProtocolError, RemoteProtocolError

from . import runtime, wire
from .agentstore import AgentStore
from .statelock import hold_state_dir
from .wsconnect import open_websocket
from .runner import ExitStatus, HoldRunner, JobLost, JobRunner, NullRunner, RunnerError

log = logging.getLogger("reckon.agent")

_DURABLE = (E.StoreRecord, E.DeleteRecord, E.OutboxPut, E.OutboxDelete, E.StoreCluster)
DEFER_WRITES_FOR = 0.05  # seconds a write with no effect may wait for company
TICK_AT_LEAST_EVERY = 1.0  # seconds: a busy core still ticks (heartbeats, retries) this often
MAX_DEFERRED = 5_000


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    name: str
    slots: int
    state_dir: Path
    controller: str = "ws://127.0.0.1:7420"
    token: str | None = None
    executor: str = "process"  # "process": real jobs; "null": finish at once; "hold": finish on SIGUSR1 (benchmarks)
    reconnect_initial: float = 0.1
    reconnect_max: float = 1.0  # so an agent is back within a second of the controller; raise for large clusters
    kill_grace: float = 10.0
    model: dict = field(default_factory=dict)  # extra AgentConfig fields (page_size, retry_max, ...)


@dataclass(slots=True)
class _Connection:
    ws: WebSocketConnection
    generation: int
    version: int = 1  # the protocol version the controller's Welcome named (frames follow it)


class AgentDaemon:
    def __init__(self, options: AgentOptions, store: AgentStore, runner: Any, agent: Agent) -> None:
        self.options = options
        self.store = store
        self.runner = runner
        self.model = agent
        self._events_send, self._events_recv = trio.open_memory_channel[tuple[Any, Any]](100_000)
        self._conn: _Connection | None = None
        self._generation = 0
        self._wake = trio.Event()
        self._deferred: list[E.Command] = []  # durable writes no effect depends on yet
        self._last_tick = time.monotonic()
        self._tick_queued = False  # the ticker's Tick is waiting in the event queue
        self._refused: _Connection | None = None  # a connection that sent something invalid
        self.joined = trio.Event()  # set once the first session reached OPERATING (tests, dev mode)

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
                except RemoteProtocolError as exc:
                    log.warning("controller sent something invalid: %s; reconnecting", exc)
                    self._refused = self._conn
                    await self._hang_up()
                    continue
                if isinstance(event, E.Disconnected):
                    self._conn = None
                commands.extend((c, self._conn) for c in cmds)
            await self._execute(commands, nursery)
            if self.model.session.value == "operating":
                self.joined.set()
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
                if cmd_conn is not None and cmd_conn is conn:
                    sends.append(wire.encode(cmd.message))
                    size += len(sends[-1])
                    if size >= wire.FRAME_BYTES:
                        await self._send_frames(conn, sends)
                        sends, size = [], 0
            elif isinstance(cmd, E.StartProcess):
                nursery.start_soon(self._start, cmd)
            elif isinstance(cmd, E.KillProcess):
                await self.runner.kill(cmd.job, cmd.attempt, grace=self.options.kill_grace)
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
            jobs.mkdir()
        log.warning("joined controller history %s; the files of history %s are in %s",
                    self.model.cluster, previous, retired)

    def _forget(self, job: str, attempt: int) -> None:
        """The record is gone for good: the supervisor's status and pid files may go too."""
        try:
            self.runner.forget(job, attempt)
        except (RunnerError, OSError) as exc:
            log.debug("keeping the files of job %s attempt %s: %s", job, attempt, exc)

    async def _start(self, cmd: E.StartProcess) -> None:
        try:
            started_at = await self.runner.start(cmd.job, cmd.attempt, cmd.spec)
        except RunnerError as exc:
            # Nothing ran and nothing is known: say so, never invent an exit code.
            log.error("job %s attempt %s could not be launched: %s", cmd.job, cmd.attempt, exc)
            await self.feed(E.ProcessLost(job=cmd.job, attempt=cmd.attempt, now=time.time()))
            return
        await self.feed(E.ProcessStarted(job=cmd.job, attempt=cmd.attempt, started_at=started_at))

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
        url = self.options.controller.rstrip("/") + "/agent"
        headers = [(b"authorization", f"Bearer {self.options.token}".encode())] if self.options.token else []
        while True:
            try:
                async with open_websocket(url, extra_headers=headers, max_message_size=wire.MAX_AGENT_MESSAGE,
                                          connect_timeout=5, disconnect_timeout=2,
                                          opener=open_websocket_url) as ws:
                    delay = self.options.reconnect_initial
                    self._generation += 1
                    conn = _Connection(ws=ws, generation=self._generation)
                    log.info("connected to %s", self.options.controller)
                    await self.feed(E.Connected(now=time.time()), conn)
                    try:
                        await self._read(conn)
                    finally:
                        with trio.CancelScope(shield=True):
                            await self.feed(E.Disconnected(now=time.time()), conn)
            except ConnectionRejected as exc:
                body = (exc.body or b"").decode(errors="replace").strip()
                log.warning("controller %s refused us (%s): %s", self.options.controller, exc.status_code, body)
            except HandshakeError as exc:
                log.warning("cannot join %s: %s", self.options.controller, exc.__cause__ or exc or type(exc).__name__)
            except (OSError, WSClosed) as exc:
                log.debug("connection to %s failed: %s", self.options.controller, exc)
            # Jittered, capped backoff: quick to return, no thundering herd.
            await trio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self.options.reconnect_max)

    async def _read(self, conn: _Connection) -> None:
        while True:
            try:
                data = await conn.ws.get_message()
            except WSClosed as exc:
                log.info("controller connection closed: %s", exc.reason)
                return
            try:
                messages = wire.decode_frame(data, to="agent")
            except ProtocolError as exc:
                log.warning("invalid message from the controller: %s", exc)
                return
            now = time.time()
            for msg in messages:
                if isinstance(msg, M.Error):
                    log.warning("controller says: %s", msg.reason)
                    if msg.fatal and "unknown fields" in msg.reason:
                        # An older controller refusing what this agent's messages carry
                        # (its decoder's words): the upgrade order was the wrong way round.
                        log.warning("the controller runs an older reckon than this agent and refuses its "
                                    "messages: upgrade the controller first (README: Upgrades)")
                elif isinstance(msg, M.Welcome):
                    conn.version = msg.version
                await self.feed(E.MessageFromController(message=msg, now=now), conn)


async def _release_on_sigusr1(runner: HoldRunner) -> None:
    import signal

    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            log.info("released %d held job(s)", runner.release_all())


def _exited(status: ExitStatus) -> E.ProcessExited:
    return E.ProcessExited(job=status.job, attempt=status.attempt, exit_code=status.exit_code,
                           signal=status.signal, finished_at=status.finished_at, started_at=status.started_at,
                           now=time.time())


async def run_agent(options: AgentOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Recover local records, re-adopt jobs, then connect and work until cancelled."""
    with hold_state_dir(options.state_dir, "agent"):
        await _run(options, task_status)


async def _run(options: AgentOptions, task_status) -> None:
    runtime.tune()
    store = await AgentStore.open(options.state_dir)
    try:
        records, outbox = await store.load()
        cluster = await store.load_cluster()
        runner_cls = {"null": NullRunner, "hold": HoldRunner}.get(options.executor, JobRunner)
        async with runner_cls(options.state_dir) as runner:
            config = AgentConfig(name=options.name, slots=options.slots,
                                 log_dir=str(options.state_dir / "jobs"), **options.model)
            agent = Agent(config, records, outbox, cluster)
            running = [r.key for r in records if r.status is LocalStatus.RUNNING]
            del records, outbox
            runtime.settle()
            daemon = AgentDaemon(options, store, runner, agent)
            if running:
                adopted = await runner.adopt(running)
                now = time.time()
                for key, what in adopted.items():
                    if isinstance(what, ExitStatus):
                        await daemon.feed(_exited(what))
                    elif what == "lost" or isinstance(what, JobLost):
                        await daemon.feed(E.ProcessLost(job=key[0], attempt=key[1], now=now))
                log.info("re-adopted %d job(s) from before the restart", len(running))
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(daemon.core_loop, nursery)
                    nursery.start_soon(daemon.exits)
                    nursery.start_soon(daemon.ticker)
                    nursery.start_soon(daemon.connection_loop)
                    if isinstance(runner, HoldRunner):
                        nursery.start_soon(_release_on_sigusr1, runner)
                    task_status.started(daemon)
            finally:
                with trio.CancelScope(shield=True):
                    await daemon._commit([])  # a clean stop writes what was deferred
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
