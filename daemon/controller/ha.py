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

import logging
import time

import trio

from reckon.model.controller import Controller
from reckon.model.errors import ModelCorrupted

from reckon.daemon import runtime
from reckon.daemon.controller.bootstrap import name_new_history, start_metrics, start_serving
from reckon.daemon.controller.core import ControllerDaemon
from reckon.daemon.controller.ha_database import RETRY_CAP, StandbyDatabase
from reckon.daemon.controller.ha_metrics import HaMetrics
from reckon.daemon.controller.leadership import Leadership
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.controller.standby import Follower, Front
from reckon.daemon.listen import listening
from reckon.daemon.store.interface import SteppedDown
from reckon.daemon.store.pglisten import FactListener
from reckon.daemon.store.postgres import DatabaseFailed, PgFactStore

log = logging.getLogger("reckon.controller")


async def serve_ha(options: ControllerOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    runtime.tune()
    assert options.store is not None
    store = await PgFactStore.open(options.store, lease=options.lease)
    try:
        front = Front(options)
        follower = front.follower = Follower(store)
        await follower.catch_up()
        metrics = HaMetrics(store, follower, front)
        async with listening(options.host, options.port) as listeners, trio.open_nursery() as nursery:
            # A standby serves TLS too: its "not the leader" answers carry the leader's URL and the token.
            server = await start_serving(nursery, options, listeners, front.handle_request, front.refusals)
            scheme = "ws" if options.tls_cert is None else "wss"
            store.holder = options.advertise or f"{scheme}://{options.host}:{server.port}"
            await start_metrics(nursery, options, metrics.registry, before_scrape=metrics.refresh)
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


async def _stand_by(store: PgFactStore, follower: Follower, front: Front,
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


async def _lead(store: PgFactStore, follower: Follower, front: Front, leadership: Leadership,
                options: ControllerOptions, nursery: trio.Nursery) -> None:
    t0 = time.perf_counter()
    tail = await follower.catch_up()  # the last facts of the old epoch: nothing follows them now
    controller = Controller(options.model, follower.state)
    await name_new_history(controller, store)
    daemon = ControllerDaemon(options, store, controller)
    daemon.before_release = leadership.check
    log.info("took over with %d jobs after replaying the last %d facts in %.2fs", len(controller.state.jobs),
             tail, time.perf_counter() - t0)
    front.daemon = daemon
    front.leader = store.holder

    async def core() -> None:
        try:
            await daemon.core_loop()
        except (SteppedDown, ModelCorrupted):  # (ModelCorrupted: before any commit of its batch)
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
