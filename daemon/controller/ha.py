"""A controller on the PostgreSQL store: stand by, follow the log, take over, lead, step down.

``reckon controller --store postgresql://...``: any number of these share one
database.  Each listens from the start.  While it stands by it answers every
agent with "not the leader" and where the leader is (``M.not_the_leader``) and
every client request with ``{"ok": false, "leader": ...}``, and it follows the
fact log (at each commit the leader NOTIFYs, daemon/store/pglisten.py, and
polling every ``lease / 5``), so taking over replays only the tail.
When the current epoch is free (its lease expired, or its holder's database
session ended: daemon/store/postgres.py) it takes the next one, reads the last
of the tail, and serves exactly as a controller restarted on that log would:
agents rejoin and resync, outboxes drain, the dispatch hold applies.

A leader that is deposed, loses its database, or cannot renew its lease in
time (daemon/controller/leadership.py) stops releasing effects, logs why, and
exits with ``SteppedDown``; run it again (a supervisor does) to stand by.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import WebSocketRequest

from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.errors import ProtocolError
from reckon.model.facts import ClusterCreated
from reckon.model.state import ControllerState, apply, replay, restore

from reckon.daemon import runtime, wire
from reckon.daemon.controller.ha_database import RETRY_CAP, StandbyDatabase
from reckon.daemon.controller.ha_metrics import HaMetrics
from reckon.daemon.controller.leadership import Leadership
from reckon.daemon.listen import listening
from reckon.daemon.controller.core import REFUSAL_REMINDER, ControllerDaemon
from reckon.daemon.controller.server import ContainedServer, ControllerOptions
from reckon.daemon.controller.tls import CLEARTEXT_WARNING, is_loopback_host, with_tls
from reckon.daemon.ops.metrics_http import serve_metrics
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.store.interface import SteppedDown
from reckon.daemon.store.pglisten import FactListener
from reckon.daemon.store.postgres import DatabaseFailed, PgFactStore

log = logging.getLogger("reckon.controller")

STANDBY_ANSWER_TIMEOUT = 5.0  # seconds a standby waits for a peer's first message


class _Follower:
    """The standby's copy of the state, kept up with the log's tail."""

    def __init__(self, store: PgFactStore) -> None:
        self.store = store
        self.state = ControllerState()
        self.seen = 0

    async def catch_up(self) -> int:
        snapshot, facts, last = await self.store.follow(self.seen)
        if snapshot is not None:
            self.state = restore(snapshot)
        with runtime.gc_paused():
            replay(facts, self.state)
        self.seen = last
        return len(facts)


class Front:
    """What answers on the port: the standby until this controller leads, then the daemon."""

    def __init__(self, options: ControllerOptions) -> None:
        self.options = options  # (ControllerDaemon._authorized reads the token from here)
        self.daemon: ControllerDaemon | None = None
        self.leader = ""  # the current leader's URL as last read from the database ("" unknown)
        # TLS handshakes that fail while standing by, once per peer and reason (the daemon has its own).
        self.refusals = RefusalLog(log, remind_every=REFUSAL_REMINDER, clock=trio.current_time)
        self.follower: _Follower | None = None  # the standby's copy of the state (tests look at it)

    async def handle_request(self, request: WebSocketRequest) -> None:
        if self.daemon is not None:
            await self.daemon.handle_request(request)
            return
        try:
            refused = ControllerDaemon._authorized(self, request)  # type: ignore[arg-type]
            if refused is not None:
                await request.reject(401, body=refused.encode())
                return
            path = request.path
            ws = await request.accept()
            with trio.move_on_after(STANDBY_ANSWER_TIMEOUT):
                if path.startswith("/agent"):
                    await self._answer_agent(ws)
                elif path.startswith("/client"):
                    await self._answer_client(ws)
            with trio.move_on_after(1):
                await ws.aclose(code=1008, reason="not the leader")
        except WSClosed:
            pass

    async def _answer_agent(self, ws: Any) -> None:
        data = await ws.get_message()
        version = 1
        try:
            first = wire.decode_frame(data, to="controller")[0]
            if isinstance(first, M.Join):
                version = first.version
        except (ProtocolError, IndexError):
            pass  # an unreadable first message still gets the plain answer
        await ws.send_message(wire.encode(M.not_the_leader(version, self.leader)))

    async def _answer_client(self, ws: Any) -> None:
        while True:
            await ws.get_message()
            leader = self.leader or "no controller leads right now"
            await ws.send_message(wire.dumps({"ok": False, "error": f"not the leader: the leader is {leader}"
                                              if self.leader else f"not the leader: {leader}",
                                              "leader": self.leader}))


async def serve_ha(options: ControllerOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    runtime.tune()
    assert options.store is not None
    store = await PgFactStore.open(options.store, lease=options.lease)
    try:
        front = Front(options)
        follower = front.follower = _Follower(store)
        await follower.catch_up()
        metrics = HaMetrics(store, follower, front)
        async with listening(options.host, options.port) as listeners, trio.open_nursery() as nursery:
            # A standby serves TLS too: its "not the leader" answers carry the leader's URL and the token.
            contained = ContainedServer(front.handle_request, with_tls(listeners, options.tls_cert, options.tls_key),
                                        handler_nursery=nursery, max_message_size=wire.MAX_AGENT_MESSAGE)
            contained.refusals = front.refusals
            server = await nursery.start(contained.run)
            scheme = "ws" if options.tls_cert is None else "wss"
            store.holder = options.advertise or f"{scheme}://{options.host}:{server.port}"
            if options.token is None:
                log.warning("no token configured: accepting loopback connections only")
            elif options.tls_cert is None and not is_loopback_host(options.host):
                log.warning("%s", CLEARTEXT_WARNING.format(host=options.host))
            if options.metrics is not None:
                await nursery.start(functools.partial(serve_metrics, *options.metrics, metrics.registry,
                                                      before_scrape=metrics.refresh))
            task_status.started((server.port, front))
            leadership = await _stand_by(store, follower, front, options, metrics)
            metrics.took_over()
            await _lead(store, follower, front, leadership, options, nursery)
    except BaseExceptionGroup as group:  # from the nursery: one task stepped down, the rest were cancelled
        stepped, rest = group.split(SteppedDown)
        if stepped is None or rest is not None:
            raise
        while isinstance(stepped, BaseExceptionGroup):
            stepped = stepped.exceptions[0]
        log.error("stepping down: %s", stepped)
        raise stepped from None
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


async def _stand_by(store: PgFactStore, follower: _Follower, front: Front,
                    options: ControllerOptions, metrics: HaMetrics) -> Leadership:
    """Follow the log until the epoch is ours: at each commit the leader notifies, and at every
    poll (``lease / 5``), which is also when the epoch is tried."""
    assert options.store is not None
    poll = options.lease / 5
    told = None
    database = StandbyDatabase(store, metrics, first_retry=poll, cap=min(RETRY_CAP, options.lease))
    listener = FactListener(options.store)
    try:
        while True:
            try:
                await listener.open()  # (again, after a dropped connection: until then polling alone)
                asked_at = trio.current_time()
                reason = await store.try_lead()
                database.answered()
                if reason is not None:
                    leadership = Leadership(store)
                    leadership.taken(asked_at)
                    log.warning("leading: epoch %d (%s); advertised as %s", store.epoch, reason, store.holder)
                    return leadership
                epoch, leader, _ = await store.leader()
                front.leader = leader
                metrics.saw_epoch(epoch)
                if (epoch, leader) != told:  # once per leader, not once per poll
                    log.info("standing by: epoch %d is led by %s", epoch, leader or "?")
                    told = (epoch, leader)
                await follower.catch_up()
                next_poll = trio.current_time() + poll
                while await listener.wait_until(next_poll):
                    await follower.catch_up()
            except DatabaseFailed as exc:  # the database is away: a standby waits for it (ha_database.py)
                await database.failed(exc)
    finally:
        listener.close()


async def _lead(store: PgFactStore, follower: _Follower, front: Front, leadership: Leadership,
                options: ControllerOptions, nursery: trio.Nursery) -> None:
    t0 = time.perf_counter()
    tail = await follower.catch_up()  # the last facts of the old epoch: nothing follows them now
    controller = Controller(options.model, follower.state)
    if controller.state.cluster is None:
        created = ClusterCreated(cluster=secrets.token_hex(8))
        apply(controller.state, created)
        await store.append([created])
    daemon = ControllerDaemon(options, store, controller)
    daemon.before_release = leadership.check
    log.info("took over with %d jobs after replaying the last %d facts in %.2fs", len(controller.state.jobs),
             tail, time.perf_counter() - t0)
    front.daemon = daemon
    front.leader = store.holder

    async def core() -> None:
        try:
            await daemon.core_loop()
        except SteppedDown:
            raise
        except Exception as exc:  # a refused (fenced) or failed commit: nothing of it was released
            raise leadership.commit_failed(exc) from exc

    async def renew() -> None:
        try:
            await leadership.run()
        except SteppedDown:
            raise
        except Exception as exc:  # the database is gone: so is our advisory lock, the epoch may move at once
            raise SteppedDown(f"lost the database while renewing the lease: {exc}") from exc

    nursery.start_soon(core)
    nursery.start_soon(daemon.ticker)
    nursery.start_soon(renew)
