"""The controller's serial core loop: one task owns the model.

It takes every pending event in one batch, lets the model decide, runs the
scheduler, appends the batch's facts in ONE durable transaction (group
commit), and only then releases the batch's effects (daemon/controller/effects.py).
``ControllerDaemon`` is the core loop plus its mixins: the agent connections
(connections.py), the client requests (clients.py) and the effects.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

import trio

from reckon.model import events as E
from reckon.model.controller import Controller
from reckon.model.errors import LocalProtocolError, ModelCorrupted, PermissionDenied, ProtocolError, RemoteProtocolError
from reckon.model import messages as M
from reckon.model.facts import Fact
from reckon.model.state import snapshot
from reckon.model.scheduler import Scheduler

from reckon.daemon.auth.handshake import Authenticator
from reckon.daemon.commands import facts_of
from reckon.daemon.encoded import Selections, cbor_objects
from reckon.daemon.controller import lifecycle, startup
from reckon.daemon.controller.clients import ClientRequests
from reckon.daemon.controller.connections import AgentConnections, AgentConn
from reckon.daemon.controller.effects import CommandEffects
from reckon.daemon.controller.logs import OutputRelay
from reckon.daemon.controller.metrics import ControllerMetrics
from reckon.daemon.controller.query import QueryIndex
from reckon.daemon.controller.work import WorkItem
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.store.interface import ControllerStore

if TYPE_CHECKING:
    from reckon.daemon.controller.options import ControllerOptions

log = logging.getLogger("reckon.controller")

TICK_EVERY = 1.0  # seconds between the controller's ticks: a --begin job starts at most this late
REFUSAL_REMINDER = 600.0  # seconds between log reminders of a peer that keeps being refused


class ControllerDaemon(AgentConnections, ClientRequests, CommandEffects):
    """The controller's model and everything that drives it; see the module docstring."""

    def __init__(self, options: ControllerOptions, store: ControllerStore, controller: Controller) -> None:
        self.options = options
        self.store = store
        self.model = controller
        self.scheduler = Scheduler(controller.config.user_limits, policy=controller.config.scheduler,
                                   reserve_after=controller.config.reserve_after)
        self._work_send, self._work_recv = trio.open_memory_channel[WorkItem](1_000_000)
        self._conns: dict[int, AgentConn] = {}
        self._conn_ids = itertools.count(1)
        self.log_dirs: dict[str, tuple[str, str]] = {}  # agent -> (log_dir, log_layout) from its Join
        self.output = OutputRelay(self)  # `reckon logs` (daemon/controller/logs.py)
        self._round_started: dict[bytes, tuple[float, int]] = {}  # token -> (trio time, jobs queried)
        self._joined_at: dict[str, float] = {}  # agent -> trio time its latest welcomed Join arrived
        # Refused peers, logged once per condition: by (address, reason) at the handshake,
        # by (agent name, address) at the Join.
        self.refusals = RefusalLog(log, remind_every=REFUSAL_REMINDER, clock=trio.current_time)
        self.auth = Authenticator.from_options(options)  # who may connect: daemon/auth/handshake.py
        self.started_at = time.time()
        self.nodes = lifecycle.NodeTracker()  # since when each node is in its state
        self.metrics = ControllerMetrics(self)
        self.before_release: Callable[[], None] = lambda: None  # raises if this controller may not (ha.py)
        self.grace_timer = startup.GraceTimer()
        self.mark_hold = False  # the id mark file says a restored copy's whole-grace hold lasts (startup.commit)
        self.queries = QueryIndex.of(self)  # the replayed (committed) jobs; startup.commit keeps it
        self.encoded_jobs = cbor_objects()  # the query index's objects, each encoded once (daemon/encoded.py)
        self.selections = Selections()  # a query's ``fields`` of those objects, each kept likewise
        # Set at the end of each batch (and replaced): a poll that comes while a batch is being
        # decided and committed waits for its end (clients.py), so polls are answered between
        # batches, not between each of a batch's steps.
        self.batch_ended = trio.Event()
        self.deciding = False
        for cmd in controller.initial_notes():
            assert isinstance(cmd, E.Notify)
            self.scheduler.notify(cmd.note)

    # ---- the core loop ------------------------------------------------------------

    async def submit(self, work: WorkItem) -> None:
        await self._work_send.send(work)

    async def call(self, event: Any = None, call: Callable[[], Any] | None = None) -> Any:
        """Run an event or a read through the core loop; return once its effects are durable."""
        send, recv = trio.open_memory_channel[Any](1)
        await self._work_send.send(WorkItem(event=event, call=call, reply=send))
        async with recv:
            work: WorkItem = await recv.receive()
        if work.error is not None:
            raise (PermissionDenied if work.denied else LocalProtocolError)(work.error)
        return work.result

    async def core_loop(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start the model (ids, start gate), then decide batches until cancelled."""
        commands = await startup.start_model(self)
        if self.options.validate_state:
            self.check_state("ControllerStarted")
        for cmd in commands:
            self._release(cmd)
        task_status.started()
        try:
            await self._decide_batches()
        except ModelCorrupted as exc:
            log.critical("stopping: %s", exc)
            raise

    async def _decide_batches(self) -> None:
        while True:
            batch = [await self._work_recv.receive()]
            self.deciding = True
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
            facts: list[Fact] = facts_of(commands)
            if facts:
                # Commit before effect: nothing below leaves this process until the
                # facts behind it are durable.  A failed commit kills the daemon.
                committing = time.perf_counter()
                await startup.commit(self, facts)
                self.metrics.committed(facts, time.perf_counter() - committing)
            elif self.mark_hold:
                startup.end_mark_hold(self)
            lifecycle.after_commit(self, facts, commands)
            self.before_release()
            for cmd in commands:
                self._release(cmd)
            for work in batch:
                if work.reply is not None:
                    work.reply.send_nowait(work)
            if self.store.facts_since_snapshot >= self.options.snapshot_every:
                await self._snapshot()
            self.deciding = False
            self.batch_ended.set()
            self.batch_ended = trio.Event()

    def _decide(self, work: WorkItem) -> None:
        """Let the model decide one work item.  A refusal answers its sender; anything else that
        leaves the model changed (a fact applied that no commit will carry) stops the controller
        with ``ModelCorrupted``, before this batch commits anything: its log is the truth."""
        applied = self.model.state.facts_applied
        deciding = work.event  # the event being handled; None once it is (or when there is none)
        try:
            if work.event is not None:
                work.commands = self._handle(work.event)
                work.result = work.commands
                applied, deciding = self.model.state.facts_applied, None
            if work.call is not None:
                work.result = work.call()
        except ModelCorrupted:
            raise
        except LocalProtocolError as exc:
            self._unchanged_since(applied, deciding, exc)
            work.error, work.denied = str(exc), isinstance(exc, PermissionDenied)
        except RemoteProtocolError as exc:
            self._unchanged_since(applied, deciding, exc)
            conn = getattr(work.event, "conn", None)
            log.warning("connection %s: %s", conn, exc)
            if conn is not None:
                joined = self.connection(conn)  # the refusal speaks the version the agent joined with
                refusal = M.refusal(joined.version if joined else 0, M.RefusalCode.INVALID, str(exc))
                work.commands = [
                    E.Send(conn=conn, message=refusal),
                    E.Close(conn=conn, reason=str(exc)),
                ]
                work.commands += self._handle(E.ConnectionClosed(conn=conn, now=time.time(),
                                                                  mono=trio.current_time()))
        except Exception as exc:  # from a client's closure (the model's own failures are ModelCorrupted)
            self._unchanged_since(applied, None, exc)
            # A client's read failed and changed nothing: that client gets the error, the rest goes on.
            log.error("a client request failed, the model is unchanged: %r", exc)
            work.error = f"the controller could not answer: {type(exc).__name__}: {exc}"

    def _unchanged_since(self, applied: int, event: Any, exc: Exception) -> None:
        """``ModelCorrupted`` if the model applied a fact since ``applied`` (deciding ``event``, or a
        client's closure when None) and then raised ``exc``."""
        if self.model.state.facts_applied != applied:
            what = type(event).__name__ if event is not None else "a client request"
            raise ModelCorrupted(f"{what} raised {exc!r} after the model applied "
                                 f"{self.model.state.facts_applied - applied} fact(s)") from exc

    def _handle(self, event: Any) -> list[E.Command]:
        try:
            commands = self.model.handle(event)
        except (ProtocolError, ModelCorrupted):
            raise
        except Exception as exc:  # no refusal: what the handler changed before it raised is unknown
            raise ModelCorrupted(f"the model failed on {type(event).__name__}: {exc!r}") from exc
        if self.options.validate_state:
            self.check_state(type(event).__name__)
        return commands

    def check_state(self, after: str) -> None:
        """``ControllerState.validate_state`` (every derived index recomputed and compared)."""
        try:
            self.model.state.validate_state()
        except Exception as exc:
            raise ModelCorrupted(f"the state check failed after {after}: {exc}") from exc

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
                self._work_send.send_nowait(WorkItem())
                break
            now = time.time()
            proposals = self.scheduler.place(limit=budget, now=now)
            budget -= len(proposals)
            if not proposals:
                break
            pending_notes = False
            for job, agent in proposals:
                cmds = self._handle(E.DispatchProposed(job=job, agent=agent, now=now))
                for cmd in cmds:
                    if isinstance(cmd, E.Notify):
                        self.scheduler.notify(cmd.note)
                        pending_notes = True
                out.extend(cmds)
        return out

    async def _snapshot(self) -> None:
        snap = snapshot(self.model.state)
        await self.store.write_snapshot(snap, self.store.last_seq)

    async def ticker(self) -> None:
        """Time: a tick every second, always (the model's clock: jobs whose ``--begin`` came are
        noted to the scheduler; lost-agent detection when ``lost_after`` is set); the start gate's grace."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.grace_timer.run, lambda event: self.submit(WorkItem(event=event)))
            nursery.start_soon(self._ticks)

    async def _ticks(self) -> None:
        lost_after = self.options.model.lost_after
        every = TICK_EVERY if lost_after is None else min(TICK_EVERY, lost_after / 4)
        while True:
            await trio.sleep(every)
            await self.submit(WorkItem(event=E.Tick(now=time.time(), mono=trio.current_time())))
