"""Shared pieces of the trio-style daemon tests (test_controller_daemon.py, test_agent_daemon.py).

Time: the tests run under pytest-trio's ``autojump_clock``, which jumps to the
next deadline as soon as every task is blocked.  Two things block tasks
without being trio timers, and would let the clock jump while they are in
flight (firing heartbeat timeouts, round deadlines and the tests' own hang
guards spuriously):

* real sockets: there are none here.  WebSocket connections run over
  ``trio.testing.memory_stream_pair`` with trio-websocket's
  ``wrap_client_stream`` / ``wrap_server_stream``, so every byte moves inside
  the trio run;
* SQLite, which runs on a dedicated OS thread: the stores here are the real
  ``FactStore`` / ``AgentStore`` (real SQLite files, real thread), subclassed
  only so that every database wait happens with the mock clock *held*
  (``clock_held``: autojump off until the thread answers).  A store call
  therefore takes no fake time, as if the disk were infinitely fast.

``TrioWall`` stands in for the ``time`` module of a daemon module (``patch_controller``
for the controller's) where a test
needs the models' wall-clock ``now`` to advance with the fake clock (the agent
schedules heartbeats and outbox retries in wall time) or to step.
"""

from __future__ import annotations

import contextlib
import errno
import math
import secrets
import sqlite3
import time as _time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import cbor2
import trio
import trio.testing
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected
from trio_websocket import WebSocketConnection, wrap_client_stream, wrap_server_stream

from reckon.daemon import wire
from reckon.daemon.store.agent import AgentStore
from reckon.daemon.controller import clients, connections, core, effects, server
from reckon.daemon.controller.core import ControllerDaemon
from reckon.daemon.controller.server import ControllerOptions
from reckon.daemon.store.facts import FactStore
from reckon.daemon.agent.attempts import ExitStatus, check_key
from reckon.daemon.agent.null_runner import NullRunner
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobSpec

TOKEN = "test-token"
SPEC = JobSpec(name="t", command=("true",))

# The controller daemon's modules, whose ``time`` and ``secrets`` a test may replace.
CONTROLLER_MODULES = (server, core, effects, connections, clients)


def patch_controller(monkeypatch: Any, name: str, value: Any) -> None:
    """Replace ``name`` (``time``, ``secrets``, a constant) in every controller daemon module that has it."""
    for module in CONTROLLER_MODULES:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)

# ---- the clock ------------------------------------------------------------------

_holds: dict[int, list] = {}  # id(clock) -> [depth, threshold before the first hold]


@contextlib.contextmanager
def clock_held() -> Iterator[None]:
    """No autojump while inside (nestable, shared by concurrent holders); no-op under a real clock."""
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        yield
        return
    entry = _holds.setdefault(id(clock), [0, clock.autojump_threshold])
    if entry[0] == 0:
        entry[1] = clock.autojump_threshold
        clock.autojump_threshold = math.inf
    entry[0] += 1
    try:
        yield
    finally:
        entry[0] -= 1
        if entry[0] == 0:
            clock.autojump_threshold = entry[1]


class TrioWall:
    """A ``time`` module whose ``time()`` is wall time moving with trio's clock (plus ``step``)."""

    def __init__(self) -> None:
        self._base = _time.time()
        self._t0 = trio.current_time()
        self.step = 0.0  # add to simulate a wall-clock step (NTP, an operator)

    def time(self) -> float:
        return self._base + (trio.current_time() - self._t0) + self.step

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


async def until(predicate: Callable[[], Any], *, step: float = 0.01, timeout: float = 60.0) -> None:
    """Poll (in fake time) until ``predicate()`` is true; fail after ``timeout`` fake seconds
    (a short guard of its own: each poll costs real time, the tests' hang guards are long)."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(step)
        return
    raise AssertionError(f"still false after {timeout} s: {getattr(predicate, '__name__', predicate)}")


def live_tasks(name_part: str) -> list[trio.lowlevel.Task]:
    """Every task of this run whose name contains ``name_part``."""
    out, stack = [], [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if name_part in task.name:
            out.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return out


# ---- stores ---------------------------------------------------------------------------


@dataclass
class Gate:
    """Holds one ``FactStore.append`` before it writes anything."""

    entered: trio.Event = field(default_factory=trio.Event)  # an append is waiting here
    opened: trio.Event = field(default_factory=trio.Event)
    facts: list[F.Fact] = field(default_factory=list)  # what the held append carries

    def release(self) -> None:
        self.opened.set()


class TestFactStore(FactStore):
    """The real FactStore; database waits hold the mock clock; appends can be held, counted or failed."""

    __test__ = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[int] = []  # facts per append call, in call order
        self.gate: Gate | None = None
        self.fail: BaseException | None = None

    def hold(self) -> Gate:
        """Hold the next append until ``gate.release()``."""
        self.gate = Gate()
        return self.gate

    @classmethod
    async def open(cls, state_dir: Path, *, prune: bool = True) -> "TestFactStore":
        with clock_held():
            return await super().open(state_dir, prune=prune)  # type: ignore[return-value]

    async def load(self):
        with clock_held():
            return await super().load()

    async def append(self, facts, then=None):
        self.calls.append(len(facts))
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.facts = list(facts)
            gate.entered.set()
            await gate.opened.wait()
        if self.fail is not None:
            raise self.fail
        with clock_held():
            return await super().append(facts, then)

    async def write_snapshot(self, snapshot, upto_seq):
        with clock_held():
            return await super().write_snapshot(snapshot, upto_seq)

    async def aclose(self) -> None:
        with clock_held():
            await super().aclose()

    async def durable(self) -> list[F.Fact]:
        """The facts on disk, read through the store's own database thread."""

        def read(conn: sqlite3.Connection) -> list[F.Fact]:
            return [F.decode(cbor2.loads(blob)) for _, blob in conn.execute("SELECT seq, data FROM fact ORDER BY seq")]

        with clock_held():
            return await self.db.run(read)


class HeldAgentStore(AgentStore):
    """The real AgentStore; database waits hold the mock clock; every applied batch is recorded."""

    applied: list[list[Any]]

    @classmethod
    async def open(cls, state_dir: Path) -> "HeldAgentStore":
        with clock_held():
            store = await super().open(state_dir)
        store.applied = []
        return store  # type: ignore[return-value]

    async def load(self):
        with clock_held():
            return await super().load()

    async def load_cluster(self):
        with clock_held():
            return await super().load_cluster()

    async def claim_identity(self, name):
        with clock_held():
            return await super().claim_identity(name)

    async def load_generation(self):
        with clock_held():
            return await super().load_generation()

    async def claim_machine(self, machine, moved_from=None):
        with clock_held():
            return await super().claim_machine(machine, moved_from)

    async def apply(self, commands) -> None:
        with clock_held():
            await super().apply(commands)
        self.applied.append(list(commands))

    async def aclose(self) -> None:
        with clock_held():
            await super().aclose()


def agent_disk(state_dir: Path) -> tuple[list[tuple], list[tuple]]:
    """(outbox rows, local job rows) as a separate connection reads them from ``agent.db``."""
    conn = sqlite3.connect(Path(state_dir) / "agent.db")
    try:
        outbox = conn.execute("SELECT job, attempt, exit_code, signal, finished_at FROM outbox ORDER BY rowid").fetchall()
        records = conn.execute("SELECT job, attempt, status, exit_code, finished_at, acked FROM local_job "
                               "ORDER BY rowid").fetchall()
    finally:
        conn.close()
    return outbox, records


class ManualRunner(NullRunner):
    """The runner API with processes the test ends: ``finish()`` delivers an exit on ``exits``."""

    def __init__(self, state_dir: Path | str | None = None) -> None:
        super().__init__(state_dir)
        self.running: dict[tuple[str, int], float] = {}

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        check_key(job, attempt)
        now = 1_600_000_000.0 + len(self._started)
        self._started.add((job, attempt))
        self.running[(job, attempt)] = now
        return now

    def finish(self, job: str, attempt: int, *, exit_code: int | None, finished_at: float) -> None:
        started_at = self.running.pop((job, attempt))
        self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=exit_code, signal=None,
                                               started_at=started_at, finished_at=finished_at))


# ---- WebSocket peers over memory streams ------------------------------------------------


class Peer:
    """One end of a WebSocket.  A background task drains it (so the connection never
    stalls on an unread queue and close handshakes complete) and notes the close."""

    def __init__(self, ws: WebSocketConnection, nursery: trio.Nursery, *, to: str) -> None:
        self.ws = ws
        self.to = to  # "agent": decode controller messages; "controller": agent messages; "client": maps
        self._send, self._recv = trio.open_memory_channel[tuple[float, Any]](math.inf)
        self.closed = trio.Event()
        self.closed_at: float | None = None
        self.close_reason: Any = None
        self.frames_with_several = 0  # frames that carried more than one protocol message
        nursery.start_soon(self._drain)

    async def _drain(self) -> None:
        try:
            while True:
                data = await self.ws.get_message()
                for one in self._split(data):
                    self._send.send_nowait((trio.current_time(), one))
        except WSClosed as exc:
            self.close_reason = exc.reason
        finally:
            self.closed_at = trio.current_time()
            self.closed.set()
            self._send.close()

    def _split(self, data: Any) -> list[Any]:
        """A daemon's frame may carry several protocol messages (a CBOR array): one each."""
        if self.to == "client" or not isinstance(data, bytes):
            return [data]
        try:
            value = cbor2.loads(data)
        except Exception:  # not ours to judge here: _decode reports it
            return [data]
        if not isinstance(value, list):
            return [data]
        self.frames_with_several += len(value) > 1
        return [cbor2.dumps(item) for item in value]

    def _decode(self, data: Any) -> Any:
        if self.to == "client":
            return wire.loads(data, limit=wire.MAX_CLIENT_MESSAGE)
        return wire.decode(data, to=self.to)

    async def send(self, msg: Any) -> None:
        await self.ws.send_message(wire.dumps(msg) if isinstance(msg, dict) else wire.encode(msg))

    async def send_raw(self, data: bytes | str) -> None:
        await self.ws.send_message(data)

    async def receive_timed(self) -> tuple[float, Any]:
        """(fake arrival time, message); ``trio.EndOfChannel`` once closed and drained."""
        t, data = await self._recv.receive()
        return t, self._decode(data)

    async def receive(self) -> Any:
        return (await self.receive_timed())[1]

    async def expect(self, cls: type, *, skip: tuple[type, ...] = (M.Heartbeat,)) -> Any:
        """The next message that is not of a ``skip`` type; it must be a ``cls``."""
        while True:
            msg = await self.receive()
            if isinstance(msg, cls):
                return msg
            assert isinstance(msg, skip), f"expected {cls.__name__}, got {msg!r}"

    def pending(self) -> list[Any]:
        """Everything that has arrived and was not read yet."""
        out = []
        while True:
            try:
                _, data = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return out
            out.append(self._decode(data))

    async def arrivals_within(self, seconds: float) -> list[Any]:
        """Let ``seconds`` of fake time pass; what arrived meanwhile."""
        await trio.sleep(seconds)
        return self.pending()

    async def wait_closed(self) -> list[Any]:
        """Wait for the close; the messages that arrived before it and were not read."""
        await self.closed.wait()
        return self.pending()

    async def aclose(self) -> None:
        await self.ws.aclose()
        await self.closed.wait()


# ---- a controller daemon driven directly ---------------------------------------------------------


@dataclass
class ControllerRig:
    daemon: ControllerDaemon
    store: TestFactStore
    nursery: trio.Nursery
    events: list[Any]  # every event the model handled, in order

    async def connect(self, path: str = "/agent", *, token: str | None = TOKEN,
                      client_nursery: trio.Nursery | None = None) -> tuple[Peer, trio.Event]:
        """A raw connection to the controller; also an event set when the controller's handler ended.

        The client's background reader runs in ``client_nursery`` (default: the rig's), where a
        refused handshake raises ``ConnectionRejected``."""
        client_stream, server_stream = trio.testing.memory_stream_pair()
        handler_done = trio.Event()

        async def serve() -> None:
            try:
                request = await wrap_server_stream(self.nursery, server_stream, max_message_size=wire.MAX_AGENT_MESSAGE)
                await self.daemon.handle_request(request)
            finally:
                handler_done.set()

        self.nursery.start_soon(serve)
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        ws = await wrap_client_stream(client_nursery or self.nursery, client_stream, "controller.test", path, extra_headers=headers,
                                      max_message_size=wire.MAX_CLIENT_MESSAGE)
        return Peer(ws, self.nursery, to="client" if path.startswith("/client") else "agent"), handler_done

    async def join(self, agent: str, slots: int = 1, *, running: int = 0) -> tuple[Peer, trio.Event]:
        peer, done = await self.connect()
        await peer.send(M.Join(agent=agent, slots=slots, version=M.PROTOCOL_VERSION, running=running))
        return peer, done

    async def sync(self) -> None:
        """Return once everything submitted to the core loop before now has been handled and released."""
        await self.daemon.call(call=lambda: None)

    def node(self, name: str) -> str:
        return self.daemon.model.node_state(name).value

    def job(self, job_id: str):
        return self.daemon.model.state.jobs[job_id]

    async def submit(self, spec: JobSpec = SPEC) -> str:
        # A random uid per submission, as the daemon's client path gives one.
        commands = await self.daemon.call(event=E.SubmitJob(spec=spec, now=_time.time(), uid=secrets.token_hex(8)))
        return next(f.job for c in commands if isinstance(c, E.Append) for f in c.facts
                    if isinstance(f, F.JobSubmitted))


@contextlib.asynccontextmanager
async def controller(state_dir: Path, *, round_timeout: float = 30.0, heartbeat_timeout: float = 10.0,
                     max_batch: int = 5_000, max_dispatch_per_batch: int = 2_000,
                     lost_after: float | None = None) -> AsyncIterator[ControllerRig]:
    """A ControllerDaemon recovered from ``state_dir`` the way ``serve_controller`` does it,
    with its core loop running, but no listener: connections come from ``rig.connect``."""
    config = ControllerConfig(round_timeout=round_timeout, lost_after=lost_after)
    options = ControllerOptions(state_dir=state_dir, token=TOKEN, model=config,
                                heartbeat_timeout=heartbeat_timeout, max_batch=max_batch,
                                max_dispatch_per_batch=max_dispatch_per_batch)
    store = await TestFactStore.open(state_dir)
    try:
        snapshot, facts, _ = await store.load()
        daemon = ControllerDaemon(options, store, Controller.from_log(facts, config, snapshot))
        events: list[Any] = []
        handle = daemon.model.handle

        def recording_handle(event: Any) -> list[E.Command]:
            events.append(event)
            return handle(event)

        daemon.model.handle = recording_handle  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.core_loop)  # the model's start (ids, start gate) is committed
            store.calls.clear()  # the start's own commit: tests count the appends their events cause
            nursery.start_soon(daemon.ticker)
            yield ControllerRig(daemon=daemon, store=store, nursery=nursery, events=events)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


# ---- the agent's network: open_websocket_url over memory streams -------------------------------------


class FakeNet:
    """Replaces ``open_websocket_url`` in ``daemon.agent.daemon``.

    While ``up`` is false a connect fails at once (ECONNREFUSED) and is counted in
    ``attempts`` (fake times).  While up, it connects over memory streams either to
    a real ``ControllerDaemon`` (``server``) or, with no server, to the test, which
    receives each accepted server-side ``Peer`` from ``accepted``.
    """

    def __init__(self, nursery: trio.Nursery, server: ControllerDaemon | None = None) -> None:
        self.nursery = nursery
        self.server = server
        self.up = False
        # While true every byte either way is dropped and no close reaches the other
        # side: a controller host that vanished (no RST, no FIN), as TCP sees it.
        self.blackhole = False
        self.attempts: list[float] = []
        self.urls: list[str] = []  # the URL of each attempt (several controllers: which one was tried)
        self.headers: list[list[tuple[bytes, bytes]]] = []
        self._streams: list[trio.abc.Stream] = []
        self._accepted_send, self.accepted = trio.open_memory_channel[Peer](math.inf)

    async def cut(self) -> None:
        """Break every connection abruptly (no close handshake), as a dead controller host would."""
        streams, self._streams = self._streams, []
        for stream in streams:
            await stream.aclose()

    def _one_way(self) -> tuple[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]:
        send, recv = trio.testing.memory_stream_one_way_pair()
        pump, close_pump = send.send_all_hook, send.close_hook

        async def send_all_hook() -> None:
            if self.blackhole:
                send.get_data_nowait()  # gone, as on the wire to a dead host
            elif pump is not None:
                await pump()

        def close_hook() -> None:
            if not self.blackhole and close_pump is not None:
                close_pump()

        send.send_all_hook, send.close_hook = send_all_hook, close_hook
        return send, recv

    def _pair(self) -> tuple[trio.StapledStream, trio.StapledStream]:
        """``memory_stream_pair`` whose bytes can be blackholed (``blackhole``)."""
        a_send, b_recv = self._one_way()
        b_send, a_recv = self._one_way()
        return trio.StapledStream(a_send, a_recv), trio.StapledStream(b_send, b_recv)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        request = await wrap_server_stream(self.nursery, stream, max_message_size=wire.MAX_AGENT_MESSAGE)
        if self.server is not None:
            await self.server.handle_request(request)
            return
        self.headers.append(list(request.headers))
        ws = await request.accept()
        self._accepted_send.send_nowait(Peer(ws, self.nursery, to="controller"))

    @contextlib.asynccontextmanager
    async def open_websocket_url(self, url: str, *, extra_headers=None, max_message_size: int = 1 << 20,
                                 connect_timeout: float = 60, disconnect_timeout: float = 60):
        self.attempts.append(trio.current_time())
        self.urls.append(url)
        await trio.lowlevel.checkpoint()
        if not self.up:
            raise OSError(errno.ECONNREFUSED, "connection refused (the fake network is down)")
        client_stream, server_stream = self._pair()
        self._streams.append(server_stream)
        self.nursery.start_soon(self._serve, server_stream)
        resource = urllib.parse.urlsplit(url).path or "/"
        try:
            async with trio.open_nursery() as nursery:
                with trio.fail_after(connect_timeout):
                    ws = await wrap_client_stream(nursery, client_stream, "controller.test", resource,
                                                  extra_headers=extra_headers, max_message_size=max_message_size)
                try:
                    yield ws
                finally:
                    with trio.move_on_after(disconnect_timeout):
                        await ws.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # A refused handshake surfaces in the client's reader task, inside this
            # nursery's group; the real open_websocket_url raises it on its own.
            rejected, rest = group.split(ConnectionRejected)
            if rejected is None or rest is not None:
                raise
            while isinstance(rejected, BaseExceptionGroup):
                rejected = rejected.exceptions[0]
            raise rejected from None
