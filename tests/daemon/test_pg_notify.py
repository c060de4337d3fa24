"""Standbys follow the leader's commits at once: LISTEN/NOTIFY on a real PostgreSQL (issue #12).

The leader NOTIFYs in the statement that commits a batch (daemon/store/postgres.py);
a standby LISTENs (daemon/store/pglisten.py) and reads the tail when told.  Polling
stays as the fallback.  The standby here polls every 200 s (lease 1000 s): it
can only keep up within the tests' 60 s hang guard if the notices work.
"""

from __future__ import annotations

from pathlib import Path

import trio

from reckon.daemon.controller.server import ControllerOptions, serve_controller
from reckon.daemon.store.pglisten import FactListener
from reckon.daemon.store.postgres import PgFactStore
from reckon.model import facts as F
from tests.daemon.store_helpers import hang_guard, submits

HUGE_LEASE = 1000.0  # seconds: the standby's poll is a fifth of it, far beyond the hang guard


async def wait_until(predicate, interval: float = 0.02):
    while not (result := predicate()):
        await trio.sleep(interval)
    return result


@hang_guard
async def test_a_standby_follows_each_commit_long_before_its_poll(pg_dsn, tmp_path: Path):
    leader = await PgFactStore.open(pg_dsn, holder="ws://leader:7420", lease=HUGE_LEASE)
    try:
        assert await leader.try_lead() is not None
        await leader.append([F.ClusterCreated(cluster="c1")])
        async with trio.open_nursery() as nursery:
            options = ControllerOptions(port=0, state_dir=tmp_path / "b", store=pg_dsn, lease=HUGE_LEASE,
                                        rejoin_grace=0)
            _, front = await nursery.start(serve_controller, options)
            await wait_until(lambda: front.leader == "ws://leader:7420")  # standing by, its first poll done
            for first in (1, 4, 7):  # three commits, each followed before any second poll
                last = await leader.append(submits(first, 3))
                await wait_until(lambda: front.follower.seen >= last)
                assert str(first + 2) in front.follower.state.jobs
            assert front.daemon is None  # still a standby: it followed, it did not take over
            nursery.cancel_scope.cancel()
    finally:
        await leader.aclose()


@hang_guard
async def test_a_refused_batch_notifies_nobody_and_a_dropped_listener_is_reopened(pg_dsn):
    import psycopg

    leader = await PgFactStore.open(pg_dsn, lease=HUGE_LEASE)
    listener = FactListener(pg_dsn)
    try:
        assert await leader.try_lead() is not None
        assert await listener.open()
        await leader.append(submits(1, 1))
        assert await listener.wait_until(trio.current_time() + 30)

        def take_over() -> None:  # epoch 2 is someone else's: our next batch is fenced off
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("UPDATE leader SET epoch = epoch + 1")

        await trio.to_thread.run_sync(take_over)
        try:
            await leader.append(submits(2, 1))
        except Exception:
            pass  # Deposed: nothing committed
        assert not await listener.wait_until(trio.current_time() + 0.5)  # no notice for nothing

        def kill_listener() -> None:  # the listening session is dropped (a restart, a proxy)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = 'reckon-standby'")

        await trio.to_thread.run_sync(kill_listener)
        assert not await listener.wait_until(trio.current_time() + 0.5)  # it notices, and polls meanwhile
        assert await listener.open()  # the standby's next poll opens it again
    finally:
        listener.close()
        await leader.aclose()
