"""Leadership on the PostgreSQL store (daemon/store/postgres.py): epochs, leases, fencing.

Two store instances on one real PostgreSQL (tests/pgserver.py), as two
controllers would hold them.  Lease expiry is made by moving the lease's end
into the past with SQL, on the database's own clock, never by sleeping.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from reckon.daemon.store.postgres import Deposed, PgFactStore
from tests.daemon.store_helpers import hang_guard, submits

REPO = Path(__file__).resolve().parents[2]


def _sql(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


async def sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    return await trio.to_thread.run_sync(_sql, dsn, statement, params)


async def expire_lease(dsn: str) -> None:
    await sql(dsn, "UPDATE leader SET expires_at = now() - interval '1 second'")


async def fact_epochs(dsn: str) -> list[tuple[int, int]]:
    return [tuple(r) for r in await sql(dsn, "SELECT seq, epoch FROM fact ORDER BY seq")]


@hang_guard
async def test_one_leader_per_epoch_and_a_standby_cannot_write(pg_dsn):
    async with await PgFactStore.open(pg_dsn, holder="ws://a:7420", lease=60) as a, \
            await PgFactStore.open(pg_dsn, holder="ws://b:7420", lease=60) as b:
        assert "no controller has led" in await a.try_lead()
        assert a.epoch == 1
        assert await b.try_lead() is None  # a's lease runs and its session lives
        assert b.epoch is None
        assert await b.leader() == (1, "ws://a:7420", True)
        with pytest.raises(Deposed, match="does not lead"):
            await b.append(submits(1, 1))
        assert await a.append(submits(1, 3)) == 3
        await a.renew()
    assert await fact_epochs(pg_dsn) == [(1, 1), (2, 1), (3, 1)]


@hang_guard
async def test_a_deposed_leaders_commit_is_refused_after_lease_expiry_takeover(pg_dsn):
    async with await PgFactStore.open(pg_dsn, holder="ws://a:7420", lease=60) as a, \
            await PgFactStore.open(pg_dsn, holder="ws://b:7420", lease=60) as b:
        await a.try_lead()
        await a.append(submits(1, 2))
        assert await b.try_lead() is None
        await expire_lease(pg_dsn)  # a froze past its lease (its session is still open)
        assert "lease of epoch 1 (ws://a:7420) has expired" in await b.try_lead()
        assert b.epoch == 2
        # b catches up, then leads; a wakes up and tries to commit what it decided before the freeze.
        _, tail, last = await b.follow(0)
        assert tail == submits(1, 2) and last == 2
        with pytest.raises(Deposed, match=r"epoch 1 is over \(epoch 2 is led by ws://b:7420\): 2 fact"):
            await a.append(submits(3, 2))
        with pytest.raises(Deposed, match="epoch 1 is over"):
            await a.renew()
        assert a.epoch is None  # it knows it does not lead any more
        with pytest.raises(Deposed):
            await a.write_snapshot({}, 2)
        assert await b.append(submits(3, 1)) == 3
    assert await fact_epochs(pg_dsn) == [(1, 1), (2, 1), (3, 2)]  # nothing of epoch 1 after epoch 2 began


@hang_guard
async def test_a_dead_leaders_session_hands_over_at_once_despite_its_lease(pg_dsn):
    async with await PgFactStore.open(pg_dsn, holder="ws://b:7420", lease=60) as b:
        a = await PgFactStore.open(pg_dsn, holder="ws://a:7420", lease=60)
        try:
            await a.try_lead()
            await a.append(submits(1, 1))
            assert await b.try_lead() is None
            # The leader's process dies: its database session ends with it.
            pid = await a.db.run(lambda conn: conn.info.backend_pid)
            await sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
            await sql(pg_dsn, "SELECT 1")  # (the termination is asynchronous: wait for the session to go)
            with trio.fail_after(10):
                while (reason := await b.try_lead()) is None:
                    await trio.sleep(0.05)
            assert "leader of epoch 1 (ws://a:7420) is gone" in reason and b.epoch == 2
            assert (await b.leader())[2]  # the lease (60 s) had not run out: the session told
        finally:
            await a.aclose()


CHILD = """
import sys, trio
from reckon.daemon.store.postgres import PgFactStore

async def main(dsn):
    store = await PgFactStore.open(dsn, holder="ws://child:7420", lease=60)
    print("led" if await store.try_lead() else "standby", flush=True)
    await trio.sleep_forever()

trio.run(main, sys.argv[1])
"""


@hang_guard
async def test_sigkill_of_the_leader_process_is_noticed_through_the_advisory_lock(pg_dsn):
    proc = await trio.lowlevel.open_process([sys.executable, "-c", CHILD, pg_dsn], stdout=subprocess.PIPE,
                                            cwd=REPO)
    try:
        assert (await proc.stdout.receive_some()).strip() == b"led"
        async with await PgFactStore.open(pg_dsn, holder="ws://b:7420", lease=60) as b:
            assert await b.try_lead() is None
            proc.kill()
            await proc.wait()
            with trio.fail_after(10):
                while (reason := await b.try_lead()) is None:
                    await trio.sleep(0.05)
            assert "is gone" in reason and b.epoch == 2
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
        await proc.stdout.aclose()


@hang_guard
async def test_a_standby_follows_the_tail_and_a_snapshot_that_pruned_past_it(pg_dsn):
    from reckon.model.state import replay, snapshot

    async with await PgFactStore.open(pg_dsn, holder="ws://a:7420") as a, \
            await PgFactStore.open(pg_dsn, holder="ws://b:7420") as b:
        await a.try_lead()
        await a.append(submits(1, 4))
        assert await b.follow(0) == (None, submits(1, 4), 4)
        await a.append(submits(5, 2))
        assert await b.follow(4) == (None, submits(5, 2), 6)  # only the tail
        assert await b.follow(6) == (None, [], 6)
        await a.append(submits(7, 2))
        await a.write_snapshot(snapshot(replay(submits(1, 7))), 7)  # prunes 1..7, b has seen up to 6
        snap, tail, last = await b.follow(6)
        assert snap is not None and tail == submits(8, 1) and last == 8
