"""The controller daemon: WebSocket server, the serial core loop, durable facts.

Shape (after trio's own servers): ``serve_controller(..., task_status=...)``
opens the fact store, replays it into the model, and only then listens.  One
core task owns the model: it takes every pending event in one batch, lets the
model decide, runs the scheduler, appends the batch's facts in ONE durable
transaction (group commit), and only then releases the batch's effects
(messages, client replies).  Each connection has its own nursery; each resync
round runs in its own cancel scope inside that nursery, so a disconnect ends
the round and its deadline is a ``move_on_after``.
"""

from __future__ import annotations

import hmac
import ipaddress
import itertools
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import WebSocketConnection, WebSocketRequest, WebSocketServer

from model import events as E
from model.admission import unrunnable_reason
from model import messages as M
from model.controller import Controller, ControllerConfig
from model.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from model.facts import ClusterCreated, Fact, JobCancelConfirmed, JobRequeued, JobSubmitted
from model.state import apply, snapshot
from model.jobs import JobSpec, JobState
from model.scheduler import DispatchHold, Scheduler

from daemon import runtime, wire
from daemon.controller import lifecycle, operator
from daemon.controller.metrics import ControllerMetrics
from daemon.ops.metrics_http import serve_metrics
from daemon.controller import job_ops
from daemon.controller.logs import OutputRelay, output_paths_of
from daemon.controller import startup
from daemon.store.facts import FactStore
from daemon.refusals import RefusalLog
from daemon.controller.listen import listening
from daemon.controller.tls import CLEARTEXT_WARNING, check_tls_files, is_loopback_host, tls_handshake, with_tls
from daemon.store.statelock import hold_state_dir

log = logging.getLogger("reckon.controller")

OUTGOING_QUEUE = 100_000  # messages buffered per connection before it counts as stuck
REFUSAL_REMINDER = 600.0  # seconds between log reminders of a peer that keeps being refused


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerOptions:
    host: str = "127.0.0.1"
    port: int = 7420
    state_dir: Path = Path("reckon-state/controller")
    token: str | None = None
    model: ControllerConfig = field(default_factory=ControllerConfig)
    heartbeat_timeout: float = 10.0  # an agent silent this long is disconnected
    snapshot_every: int = 200_000  # facts between snapshots
    max_batch: int = 5_000  # events decided per group commit
    max_dispatch_per_batch: int = 2_000  # dispatches per group commit
    # After a start, no dispatch until every agent the log knows has rejoined and
    # answered its round, or this many seconds have passed (0: no hold): model.startup.
    rejoin_grace: float = 15.0
    metrics: tuple[str, int] | None = None  # (host, port) of the Prometheus endpoint; None: off
    store: str | None = None  # postgresql://...: shared facts, standbys, fenced leadership (daemon/controller/ha.py)
    advertise: str | None = None  # the URL agents and clients are sent to while this controller leads
    lease: float = 5.0  # seconds a leader's lease runs on the database's clock (PostgreSQL store)
    tls_cert: Path | None = None  # both given: serve wss:// (daemon/controller/tls.py)
    tls_key: Path | None = None


@dataclass(slots=True)
class _Work:
    """One item for the core loop: a model event or a client read/act."""

    event: Any = None
    call: Callable[[], Any] | None = None  # a read run in loop order (sees only durable state)
    reply: "trio.MemorySendChannel[Any] | None" = None
    commands: list[E.Command] = field(default_factory=list)
    result: Any = None
    error: str | None = None


@dataclass(slots=True)
class _Conn:
    """A live agent connection as the core loop sees it."""

    id: int
    ws: WebSocketConnection
    nursery: trio.Nursery
    outgoing: trio.MemorySendChannel[bytes]
    flushed: trio.Event = field(default_factory=trio.Event)  # the writer is done
    agent: str | None = None
    rounds: dict[bytes, trio.Event] = field(default_factory=dict)
    closing: bool = False
    version: int = 1  # the protocol version the agent's Join named (frames follow it)
    remote: str = "?"  # the peer's address, for the log
    join: M.Join | None = None  # its Join, whose log directory counts once the controller welcomes it
    joined_at: float = 0.0  # trio time the Join arrived


class ControllerDaemon:
    def __init__(self, options: ControllerOptions, store: FactStore, controller: Controller) -> None:
        self.options = options
        self.store = store
        self.model = controller
        self.scheduler = Scheduler()
        self._work_send, self._work_recv = trio.open_memory_channel[_Work](1_000_000)
        self._conns: dict[int, _Conn] = {}
        self._conn_ids = itertools.count(1)
        self.log_dirs: dict[str, tuple[str, str]] = {}  # agent -> (log_dir, log_layout) from its Join
        self.output = OutputRelay(self)  # `reckon logs` (daemon/controller/logs.py)
        self._round_started: dict[bytes, tuple[float, int]] = {}  # token -> (trio time, jobs queried)
        self._joined_at: dict[str, float] = {}  # agent -> trio time its latest welcomed Join arrived
        # Refused peers, logged once per condition: by (address, reason) at the handshake,
        # by (agent name, address) at the Join.
        self.refusals = RefusalLog(log, remind_every=REFUSAL_REMINDER, clock=trio.current_time)
        self.started_at = time.time()
        self.nodes = lifecycle.NodeTracker()  # since when each node is in its state
        self.metrics = ControllerMetrics(self)
        self.before_release: Callable[[], None] = lambda: None  # raises if this controller may not (ha.py)
        self.grace_timer = startup.GraceTimer()
        for cmd in controller.initial_notes():
            assert isinstance(cmd, E.Notify)
            self.scheduler.notify(cmd.note)

    # ---- the core loop ------------------------------------------------------------

    async def submit(self, work: _Work) -> None:
        await self._work_send.send(work)

    async def call(self, event: Any = None, call: Callable[[], Any] | None = None) -> Any:
        """Run an event or a read through the core loop; return once its effects are durable."""
        send, recv = trio.open_memory_channel[Any](1)
        await self._work_send.send(_Work(event=event, call=call, reply=send))
        async with recv:
            work: _Work = await recv.receive()
        if work.error is not None:
            raise LocalProtocolError(work.error)
        return work.result

    async def core_loop(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start the model (ids, start gate), then decide batches until cancelled."""
        for cmd in await startup.start_model(self):
            self._release(cmd)
        task_status.started()
        while True:
            batch = [await self._work_recv.receive()]
            while len(batch) < self.options.max_batch:
                try:
                    batch.append(self._work_recv.receive_nowait())
                except trio.WouldBlock:
                    break
            commands: list[E.Command] = []
            for work in batch:
                self._decide(work)
                commands.extend(work.commands)
            # The scheduler places against what this batch decided (new jobs, agents
            # that joined or freed slots), not against the batch before it.
            for cmd in commands:
                if isinstance(cmd, E.Notify):
                    self.scheduler.notify(cmd.note)
            commands.extend(self._schedule())
            facts: list[Fact] = [f for c in commands if isinstance(c, E.Append) for f in c.facts]
            if facts:
                # Commit before effect: nothing below leaves this process until the
                # facts behind it are durable.  A failed commit kills the daemon.
                committing = time.perf_counter()
                await startup.commit(self, facts)
                self.metrics.committed(facts, time.perf_counter() - committing)
            lifecycle.after_commit(self, facts, commands)
            self.before_release()
            for cmd in commands:
                self._release(cmd)
            for work in batch:
                if work.reply is not None:
                    work.reply.send_nowait(work)
            if self.store.facts_since_snapshot >= self.options.snapshot_every:
                await self._snapshot()

    def _decide(self, work: _Work) -> None:
        try:
            if work.event is not None:
                work.commands = self.model.handle(work.event)
                work.result = work.commands
            if work.call is not None:
                work.result = work.call()
        except LocalProtocolError as exc:
            work.error = str(exc)
        except RemoteProtocolError as exc:
            conn = getattr(work.event, "conn", None)
            log.warning("connection %s: %s", conn, exc)
            if conn is not None:
                work.commands = [
                    E.Send(conn=conn, message=M.Error(seq=0, reason=str(exc))),
                    E.Close(conn=conn, reason=str(exc)),
                ]
                work.commands += self.model.handle(E.ConnectionClosed(conn=conn, now=time.time(),
                                                                       mono=trio.current_time()))

    def _schedule(self) -> list[E.Command]:
        """Dispatch what the scheduler proposes, until quiet or the batch's budget is spent.

        The budget keeps one batch (and one connection's send queue) from taking
        a whole backlog at once; when it is spent, an empty work item brings the
        loop straight back for the rest after this batch's effects are out.
        """
        out: list[E.Command] = []
        pending_notes = True
        budget = self.options.max_dispatch_per_batch
        while pending_notes:
            if budget <= 0:
                self._work_send.send_nowait(_Work())
                break
            proposals = self.scheduler.place(limit=budget)
            budget -= len(proposals)
            if not proposals:
                break
            now = time.time()
            pending_notes = False
            for job, agent in proposals:
                cmds = self.model.handle(E.DispatchProposed(job=job, agent=agent, now=now))
                for cmd in cmds:
                    if isinstance(cmd, E.Notify):
                        self.scheduler.notify(cmd.note)
                        pending_notes = True
                out.extend(cmds)
        return out

    def _release(self, cmd: E.Command) -> None:
        if isinstance(cmd, E.Notify):
            # Fed to the scheduler when decided (core_loop, _schedule): no outward effect.
            if isinstance(cmd.note, DispatchHold):
                log.info("%s: %s", "holding dispatch" if cmd.note.held else "dispatching", cmd.note.reason)
        elif isinstance(cmd, E.Warn):
            log.warning("%s", cmd.message)  # the model emits each once per condition
        elif isinstance(cmd, E.StartGraceTimer):
            self.grace_timer.arm(cmd.deadline)
        elif isinstance(cmd, E.Send):
            conn = self._conns.get(cmd.conn)
            if conn is not None and not conn.closing:
                self._note_join_outcome(conn, cmd.message)
                try:
                    conn.outgoing.send_nowait(wire.encode(cmd.message))
                    return
                except trio.WouldBlock:
                    log.warning("connection %s is not reading; closing it", cmd.conn)
                    self._close(conn, "send queue full")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    # The writer has ended (the peer is gone) before the reader wound the
                    # connection up: the message is dropped, as the network would drop it.
                    self._close(conn, "the peer is gone")
            self._undelivered(cmd)
        elif isinstance(cmd, E.Close):
            conn = self._conns.get(cmd.conn)
            if conn is not None:
                self._close(conn, cmd.reason)
        elif isinstance(cmd, E.StartRoundTimer):
            session = self.model.sessions.get(cmd.agent)
            queried = len(session.round.queried) if session is not None and session.round is not None else 0
            self._round_started[cmd.token] = (trio.current_time(), queried)
            lifecycle.round_opened(cmd.agent, cmd.token, queried)
            self._start_round_timer(cmd)
        elif isinstance(cmd, E.RoundEnded):
            started, queried = self._round_started.pop(cmd.token, (trio.current_time(), 0))
            now = trio.current_time()
            lifecycle.round_resolved(cmd.agent, cmd.token, now - started, now - self._joined_at.get(cmd.agent, started),
                                     queried)
            self.metrics.round_resolved(now - started, queried)
            for conn in self._conns.values():
                ended = conn.rounds.pop(cmd.token, None)
                if ended is not None:
                    ended.set()
        elif isinstance(cmd, E.Append):
            pass  # already durable
        else:
            raise TypeError(f"controller cannot execute {cmd!r}")

    def _undelivered(self, cmd: E.Send) -> None:
        """A message dropped before it left.  A dropped Dispatch is told to the
        model, which redoes the attempt at once (the agent never saw it)."""
        msg = cmd.message
        if isinstance(msg, M.Dispatch):
            self._work_send.send_nowait(_Work(event=E.DispatchUndelivered(
                job=msg.job, attempt=msg.attempt, now=time.time())))

    def _note_join_outcome(self, conn: _Conn, message: M.Message) -> None:
        """A Welcome makes the Join's details count; a refused Join is logged once per peer and reason."""
        join = conn.join
        if join is None:
            return
        if isinstance(message, M.Welcome):
            self._joined_at[join.agent] = conn.joined_at
            if join.log_dir:
                self.log_dirs[join.agent] = (join.log_dir, join.log_layout)
            if self.refusals.cleared(("join", join.agent, conn.remote)):
                log.info("agent %s from %s is accepted now", join.agent, conn.remote)
            conn.join = None
        elif isinstance(message, M.Error) and message.fatal:  # a refused Join
            self.refusals.refused(("join", join.agent, conn.remote),
                                  f"refused agent {join.agent} from {conn.remote}: {message.reason}")
            conn.join = None

    def _close(self, conn: _Conn, reason: str) -> None:
        if conn.closing:
            return
        conn.closing = True
        # Closing the outgoing channel lets the writer flush what is queued (the
        # error message) and then close the WebSocket.
        conn.outgoing.close()
        # The model learns of the close now, not once the connection task has
        # wound down: until then it would place work on a connection that drops it.
        self._work_send.send_nowait(_Work(event=E.ConnectionClosed(conn=conn.id, now=time.time(),
                                                                   mono=trio.current_time())))

    def _start_round_timer(self, cmd: E.StartRoundTimer) -> None:
        # The agent's connection as the model has it: a refused connection
        # claiming the same name must not get the round's timer.
        session = self.model.sessions.get(cmd.agent)
        conn = self._conns.get(session.conn) if session is not None and session.conn is not None else None
        if conn is None or conn.closing:
            return
        ended = trio.Event()
        conn.rounds[cmd.token] = ended
        conn.nursery.start_soon(self._round_timer, cmd, ended)

    async def _round_timer(self, cmd: E.StartRoundTimer, ended: trio.Event) -> None:
        """The round's own cancel scope: ended by resolution, by the deadline, or by the connection going.

        The deadline runs on trio's clock alone, ``round_timeout`` from now (the query
        goes out with this release).  ``cmd.deadline - time.time()`` mixed the wall
        clock into a trio timeout: a wall-clock step between the join and its commit
        stretched or cut the round by the size of the step."""
        with trio.move_on_after(self.model.config.round_timeout):
            await ended.wait()
            return
        await self.submit(_Work(event=E.RoundDeadlineExpired(agent=cmd.agent, token=cmd.token, now=time.time(),
                                                             mono=trio.current_time())))

    async def _snapshot(self) -> None:
        snap = snapshot(self.model.state)
        await self.store.write_snapshot(snap, self.store.last_seq)

    # ---- connections ----------------------------------------------------------------

    def _authorized(self, request: WebSocketRequest) -> str | None:
        """None if the request may connect, else the reason it may not."""
        token = self.options.token
        if token is None:
            remote = request.remote
            host = getattr(remote, "address", None)
            try:
                if host is not None and ipaddress.ip_address(host).is_loopback:
                    return None
            except ValueError:
                pass
            return "no token is configured, so only loopback connections are accepted"
        for key, value in request.headers:
            if key.lower() == b"authorization":
                offered = value.decode("latin-1").removeprefix("Bearer ").strip()
                if hmac.compare_digest(offered.encode(), token.encode()):
                    return None
                return "bad token"
        return "missing token"

    async def handle_request(self, request: WebSocketRequest) -> None:
        # A peer may reset its connection at any point, also while we accept or
        # reject it: that ends this connection only, never the server (trio's
        # listener would pass the exception up and stop the controller).
        try:
            refused = self._authorized(request)
            if refused is not None:
                host = _peer_host(request)
                self.refusals.refused(("handshake", host, request.path, refused),
                                      f"refused connections from {host} to {request.path}: {refused}")
                await request.reject(401, body=refused.encode())
                return
            path = request.path
            ws = await request.accept()
            if path.startswith("/agent"):
                await self._agent_connection(ws, _peer_host(request))
            elif path.startswith("/client"):
                await self._client_connection(ws)
            else:
                await ws.aclose(code=1008, reason=f"unknown path {path!r}")
        except WSClosed:
            pass

    async def _agent_connection(self, ws: WebSocketConnection, remote: str = "?") -> None:
        conn_id = next(self._conn_ids)
        send, recv = trio.open_memory_channel[bytes](OUTGOING_QUEUE)
        try:
            async with trio.open_nursery() as nursery:
                conn = _Conn(id=conn_id, ws=ws, nursery=nursery, outgoing=send, remote=remote)
                self._conns[conn_id] = conn
                nursery.start_soon(self._writer, conn, recv)
                await self._reader(conn)
                # The reader gave up on the connection (closed, silent, invalid):
                # from now on nothing more is queued for it, and the model knows.
                self._close(conn, "connection ended")
                with trio.move_on_after(2):  # let the writer flush the error that explains the close
                    await conn.flushed.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._conns.pop(conn_id, None)
            self.output.connection_ended(conn_id)
            with trio.CancelScope(shield=True):
                await self.submit(_Work(event=E.ConnectionClosed(conn=conn_id, now=time.time(),
                                                                 mono=trio.current_time())))
                with trio.move_on_after(1):
                    await ws.aclose()

    async def _writer(self, conn: _Conn, recv: trio.MemoryReceiveChannel[bytes]) -> None:
        async with recv:
            async for data in recv:
                queued = [data]  # and whatever else is waiting: as few frames as possible
                while len(queued) < wire.MAX_FRAME_MESSAGES:
                    try:
                        queued.append(recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                try:
                    for frame in wire.frames(queued, version=conn.version):
                        await conn.ws.send_message(frame)
                except WSClosed:
                    break
        # The channel was closed (a Close command): everything queued is flushed; hang up.
        with trio.move_on_after(2):
            await conn.ws.aclose(code=1008, reason="closed by controller")
        conn.flushed.set()
        conn.nursery.cancel_scope.cancel()

    async def _reader(self, conn: _Conn) -> None:
        while not conn.closing:
            with trio.move_on_after(self.options.heartbeat_timeout) as idle:
                try:
                    data = await conn.ws.get_message()
                except WSClosed:
                    return
            if idle.cancelled_caught:
                log.warning("agent %s silent for %.0fs: disconnecting", conn.agent, self.options.heartbeat_timeout)
                return
            now = time.time()
            try:
                events = self._events(conn, wire.decode_frame(data, to="controller"), now)
            except RemoteProtocolError as exc:  # the whole frame is refused: nothing of it is used
                log.warning("agent connection %s (%s): %s", conn.id, conn.agent, exc)
                if not conn.closing:
                    try:
                        conn.outgoing.send_nowait(wire.encode(M.Error(seq=0, reason=str(exc))))
                    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the writer is gone or stuck: the close below still ends the connection
                    self._close(conn, str(exc))
                return
            for event in events:
                if isinstance(event, E.AgentJoined):  # the frame is good: the model decides on the join
                    join = event.join
                    conn.agent = join.agent
                    conn.version = join.version
                    conn.join, conn.joined_at = join, trio.current_time()
                await self.submit(_Work(event=event))

    def _events(self, conn: _Conn, messages: list[M.Message], now: float) -> list[Any]:
        """The model events of one frame's messages; ``RemoteProtocolError`` (and no change) if any is out of place."""
        events: list[Any] = []
        mono = trio.current_time()  # silence is measured on trio's clock, never on the wall clock
        joined = conn.agent is not None
        for msg in messages:
            if not joined:
                if not isinstance(msg, M.Join):
                    raise RemoteProtocolError(f"the first message must be join, got {msg.TYPE}")
                joined = True
                events.append(E.AgentJoined(conn=conn.id, join=msg, token=secrets.token_bytes(M.TOKEN_BYTES), now=now,
                                             mono=mono))
            elif isinstance(msg, M.Join):
                raise RemoteProtocolError("join sent twice on one connection")
            elif isinstance(msg, M.OutputChunk):  # an answer to the relay's read: no state changes
                self.output.deliver(conn.id, msg)
            else:
                events.append(E.MessageFromAgent(conn=conn.id, message=msg, now=now, mono=mono,
                                                 token=secrets.token_bytes(M.TOKEN_BYTES)))
        return events

    async def ticker(self) -> None:
        """Time: lost-agent detection when ``lost_after`` is set; the start gate's grace."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.grace_timer.run, lambda event: self.submit(_Work(event=event)))
            if self.options.model.lost_after is not None:
                nursery.start_soon(self._lost_ticks)

    async def _lost_ticks(self) -> None:
        assert self.options.model.lost_after is not None
        while True:
            await trio.sleep(min(1.0, self.options.model.lost_after / 4))
            await self.submit(_Work(event=E.Tick(now=time.time(), mono=trio.current_time())))

    # ---- clients ----------------------------------------------------------------------

    async def _client_connection(self, ws: WebSocketConnection) -> None:
        while True:
            try:
                data = await ws.get_message()
            except WSClosed:
                return
            try:
                request = wire.loads(data, limit=wire.MAX_AGENT_MESSAGE)
                reply = {"ok": True, **await self._client_op(request)}
            except (ProtocolError, ValueError, TypeError, KeyError) as exc:
                reply = {"ok": False, "error": str(exc) if not isinstance(exc, KeyError) else f"missing field {exc}"}
            await ws.send_message(wire.dumps(reply))

    async def _client_op(self, request: dict) -> dict:
        op = request.get("op")
        if op in operator.OPS:  # show, nodes, drain, resume, history
            return await operator.OPS[op](self, request)
        queue_anyway = request.get("queue_anyway", False) is True  # see model/admission.py
        if op == "submit":
            [job_id] = await self._submit_batch([JobSpec.from_dict(request["spec"])], queue_anyway)
            return {"job": await self.call(call=lambda: self.job_object(job_id))}
        if op == "submit_many":
            specs = [JobSpec.from_dict(s) for s in request["specs"]]
            return {"jobs": await self._submit_batch(specs, queue_anyway)}
        if op == "cancel":
            job_id, whole_array = str(request["job"]), request.get("array")  # array: None = the array if it names one
            await self.call(event=E.CancelJob(job=job_id, now=time.time(), whole_array=whole_array))
            return await self.call(call=lambda: job_ops.cancel_reply(self, job_id))
        if op in job_ops.OPS:
            return await job_ops.run(self, op, request)
        if op == "jobs":
            state = request.get("state")
            if state is not None and state not in JobState.__members__:
                raise ValueError(f"unknown state {state!r}; one of {', '.join(JobState.__members__)}")
            return {"jobs": await self.call(call=lambda: self.job_objects(state))}
        if op == "status":
            return {"status": await self.call(call=self.status)}
        if op == "logs":
            return await self.output.read(request)
        if op == "forget":
            return await self._forget(str(request["agent"]))
        raise ValueError(f"unknown op {op!r}")

    async def _forget(self, agent: str) -> dict:
        """The operator declares a disconnected agent gone: its jobs are requeued, its name released."""
        commands = await self.call(event=E.ForgetAgent(agent=agent, now=time.time()))
        facts = [f for c in commands if isinstance(c, E.Append) for f in c.facts]
        requeued = [f.job for f in facts if isinstance(f, JobRequeued)]
        cancelled = [f.job for f in facts if isinstance(f, JobCancelConfirmed)]
        log.warning("the operator forgot agent %s: %d job(s) requeued, %d cancel(s) confirmed; its name is free",
                    agent, len(requeued), len(cancelled))
        self.log_dirs.pop(agent, None)
        return {"agent": agent, "requeued": requeued, "cancelled": cancelled}

    async def _submit_batch(self, specs: list[JobSpec], queue_anyway: bool = False) -> list[str]:
        """Submit jobs (many share a group commit); their ids, in order."""
        if len(specs) > 1 and not queue_anyway:  # all or nothing: the model's refusal, before any is submitted
            refusals = await self.call(call=lambda: {unrunnable_reason(self.model.state, s) for s in specs} - {None})
            if refusals:
                raise LocalProtocolError(f"nothing submitted: {min(refusals)}")
        send, recv = trio.open_memory_channel[Any](len(specs) + 1)
        now = time.time()
        for spec in specs:
            # A fresh random uid per submission: no report about another submission
            # that had this id (a rolled-back state) can ever be taken for this one.
            uid = secrets.token_hex(8)
            await self._work_send.send(_Work(event=E.SubmitJob(spec=spec, now=now, uid=uid, queue_anyway=queue_anyway),
                                             reply=send))
        ids = []
        async with recv:
            for _ in specs:
                work = await recv.receive()
                if work.error is not None:
                    raise LocalProtocolError(work.error)
                ids.append(next(f.job for c in work.commands if isinstance(c, E.Append) for f in c.facts
                                if isinstance(f, JobSubmitted)))
        return ids

    def job_object(self, job_id: str) -> dict:
        job = self.model.state.job(job_id)
        obj = job.to_dict()
        obj["stdout"], obj["stderr"] = output_paths_of(self, job)
        return obj

    def job_objects(self, state: str | None) -> list[dict]:
        return [j.to_dict() for j in self.model.state.jobs.values() if state is None or j.state.value == state]

    def status(self) -> dict:
        counts: dict[str, int] = {}
        for job in self.model.state.jobs.values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
        return {"jobs": counts, "facts": self.store.last_seq, "pid": os.getpid(), "started_at": self.started_at}


def _peer_host(request: WebSocketRequest) -> str:
    """The peer's address without its port (a refused peer reconnects from a new port each time)."""
    address = getattr(request.remote, "address", None)
    return "?" if address is None else str(address)


class ContainedServer(WebSocketServer):
    """trio-websocket's server, where one connection's failure ends that connection only.

    trio-websocket 0.12 answers a ping from its reader task; a ping that arrives
    while the connection is closing makes wsproto raise ``LocalProtocolError``
    there, out of the connection's nursery, through the listener's handler
    nursery, and the whole controller stopped (found by the long ``reckon
    chaos`` run: agents ping every 5 s, and a silent agent's connection is
    closed).  Whatever one connection raises is logged and ends it alone.
    """

    refusals: RefusalLog | None = None  # TLS handshake failures, once per peer and reason

    async def _handle_connection(self, stream: trio.abc.Stream) -> None:
        if not await tls_handshake(stream, self.refusals):
            return
        try:
            await super()._handle_connection(stream)
        except Exception as exc:  # not Cancelled (a BaseException): a stop still stops everything
            log.info("a connection failed in the WebSocket layer, closed it: %r", exc)
            await trio.aclose_forcefully(stream)


async def serve_controller(options: ControllerOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Recover from the fact log, then serve until cancelled.  Reports the bound port."""
    t0 = time.perf_counter()
    check_tls_files(options.tls_cert, options.tls_key)  # a bad pair fails now, before recovery
    if options.store is not None:
        from daemon.controller.ha import serve_ha

        await serve_ha(options, task_status=task_status)
        return
    with hold_state_dir(options.state_dir, "controller"):
        async with listening(options.host, options.port) as listeners:  # before the store: see listen.py
            await _serve(options, t0, listeners, task_status)


async def _serve(options: ControllerOptions, t0: float, listeners: list[trio.SocketListener], task_status) -> None:
    runtime.tune()
    store = await FactStore.open(options.state_dir)
    try:
        snapshot, facts, _ = await store.load()
        with runtime.gc_paused():
            controller = Controller.from_log(facts, options.model, snapshot)
        replayed = len(facts)
        del facts, snapshot  # the state is built: the decoded log need not stay in memory
        runtime.settle()
        if controller.state.cluster is None:
            # A new history: name it, so agents never confuse it with another one.
            created = ClusterCreated(cluster=secrets.token_hex(8))
            apply(controller.state, created)
            await store.append([created])
        daemon = ControllerDaemon(options, store, controller)
        log.info("recovered %d jobs from %d facts in %.2fs", len(controller.state.jobs),
                 replayed, time.perf_counter() - t0)
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.core_loop)  # the model has started before anyone connects
            nursery.start_soon(daemon.ticker)
            contained = ContainedServer(daemon.handle_request, with_tls(listeners, options.tls_cert, options.tls_key),
                                        handler_nursery=nursery, max_message_size=wire.MAX_AGENT_MESSAGE)
            contained.refusals = daemon.refusals
            server = await nursery.start(contained.run)
            if options.token is None:
                log.warning("no token configured: accepting loopback connections only")
            elif options.tls_cert is None and not is_loopback_host(options.host):
                log.warning("%s", CLEARTEXT_WARNING.format(host=options.host))
            if options.metrics is not None:
                await nursery.start(serve_metrics, *options.metrics, daemon.metrics.registry)
            task_status.started((server.port, daemon))
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
