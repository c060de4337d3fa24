"""Two controllers on one real PostgreSQL, in one trio run (daemon/controller/ha.py).

Real loopback sockets and real time (the lease is short, 1 s); every wait is
on a condition under a hang guard, never a fixed sleep.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import open_websocket_url

from reckon.daemon import wire
from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.client import Client
from reckon.daemon.controller.server import ControllerOptions, serve_controller
from reckon.daemon.store.interface import SteppedDown
from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from tests.daemon.store_helpers import hang_guard

LEASE = 1.0


def options(dsn: str, tmp_path: Path, name: str) -> ControllerOptions:
    return ControllerOptions(port=0, state_dir=tmp_path / name, store=dsn, lease=LEASE, rejoin_grace=0)


async def client_call(port: int, request: dict) -> dict:
    async with open_websocket_url(f"ws://127.0.0.1:{port}/client") as ws:
        await ws.send_message(wire.dumps(request))
        return wire.loads(await ws.get_message(), limit=wire.MAX_CLIENT_MESSAGE)


async def agent_join(port: int, version: int) -> list[M.Message]:
    async with open_websocket_url(f"ws://127.0.0.1:{port}/agent") as ws:
        join = M.Join(agent="a1", slots=1, version=version)
        await ws.send_message(wire.encode(join))
        return wire.decode_frame(await ws.get_message(), to="agent")


async def wait_until(predicate, interval: float = 0.05):
    while not (result := await predicate()):
        await trio.sleep(interval)
    return result


@hang_guard
async def test_a_standby_points_to_the_leader_and_takes_over_with_the_log(pg_dsn, tmp_path):
    async with trio.open_nursery() as outer:
        a_scope = trio.CancelScope()

        async def run_a(task_status=trio.TASK_STATUS_IGNORED):
            with a_scope:
                await serve_controller(options(pg_dsn, tmp_path, "a"), task_status=task_status)

        a_port, _ = await outer.start(run_a)
        await wait_until(lambda: _ok(a_port, {"op": "status"}))  # a leads (epoch 1)
        spec = JobSpec(name="j", command=("true",))
        submitted = await client_call(a_port, {"op": "submit", "spec": spec.to_dict()})
        assert submitted["ok"], submitted
        job = submitted["job"]["id"]

        b_port, b_front = await outer.start(serve_controller, options(pg_dsn, tmp_path, "b"))
        a_url = f"ws://127.0.0.1:{a_port}"
        await wait_until(lambda: _is(b_front.leader == a_url))
        reply = await client_call(b_port, {"op": "status"})
        assert reply == {"ok": False, "error": f"not the leader: the leader is {a_url}", "leader": a_url}
        [answer] = await agent_join(b_port, M.PROTOCOL_VERSION)
        assert isinstance(answer, M.Error) and answer.leader == a_url and answer.fatal
        [old] = await agent_join(b_port, 3)  # a version 3 agent: the URL is in the reason only
        assert isinstance(old, M.Error) and old.leader is None and a_url in old.reason
        # The CLI's blocking client, given the standby first, is sent on to the leader.
        b_url = f"ws://127.0.0.1:{b_port}"
        nodes = await trio.to_thread.run_sync(lambda: _sync_call(f"{b_url},{a_url}", "nodes"))
        assert nodes == {"ok": True, "nodes": [], "partitions": []}
        # Given the standby alone, it still goes where the standby points.
        assert await trio.to_thread.run_sync(lambda: _sync_call(b_url, "nodes")) == {"ok": True, "nodes": [], "partitions": []}
        # The trio client (bench, demo, chaos) the same way: past a dead URL and the standby, to the leader.
        async with Client(f"ws://127.0.0.1:1,{b_url},{a_url}", None) as client:
            assert await client.call("nodes") == {"ok": True, "nodes": [], "partitions": []} and client.url == a_url
        async with Client(b_url, None) as client:  # the standby alone: where it points
            assert (await client.call("show", job=job))["job"]["id"] == job

        a_scope.cancel()  # a stops: its session ends, b takes over without waiting out the lease
        status = await wait_until(lambda: _ok(b_port, {"op": "show", "job": job}))
        assert status["job"]["id"] == job and status["job"]["state"] == "PENDING"
        assert b_front.daemon is not None and b_front.leader == f"ws://127.0.0.1:{b_port}"
        outer.cancel_scope.cancel()


def _sync_call(url: str, op: str) -> dict:
    with SyncClient(url, None, timeout=10) as client:
        return client.call(op)


async def _is(value: bool) -> bool:
    return value


async def _ok(port: int, request: dict) -> dict | None:
    reply = await client_call(port, request)
    return reply if reply.get("ok") else None


@hang_guard
async def test_a_leader_whose_lease_is_taken_steps_down_and_commits_nothing(pg_dsn, tmp_path, caplog):
    import psycopg

    caplog.set_level(logging.INFO, logger="reckon.controller")
    with pytest.raises(BaseExceptionGroup) as raised:
        async with trio.open_nursery() as outer:
            a_port, a_front = await outer.start(serve_controller, options(pg_dsn, tmp_path, "a"))
            await wait_until(lambda: _ok(a_port, {"op": "status"}))

            def take_over() -> None:  # another controller takes epoch 2 (as if a's lease had run out)
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    conn.execute("UPDATE leader SET epoch = 2, holder = 'ws://other:7420', "
                                 "expires_at = now() + interval '1 hour'")

            await trio.to_thread.run_sync(take_over)
            spec = JobSpec(name="j", command=("true",))
            try:
                reply = await client_call(a_port, {"op": "submit", "spec": spec.to_dict()})
            except WSClosed:  # the leader hung up on us: stepping down
                await trio.sleep_forever()  # until its SteppedDown ends the nursery
            raise AssertionError(f"a deposed leader answered a submission: {reply}")

    stepped, rest = raised.value.split(SteppedDown)
    assert rest is None and "epoch 1 is over" in str(stepped.exceptions[0])

    def epochs() -> list[tuple]:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            return conn.execute("SELECT seq, epoch FROM fact ORDER BY seq").fetchall()

    assert all(epoch == 1 for _, epoch in await trio.to_thread.run_sync(epochs))  # nothing after the takeover
    assert any("stepping down" in r.getMessage() for r in caplog.records)


@hang_guard
async def test_a_leader_that_cannot_renew_stops_releasing_before_its_lease_ends(pg_dsn, tmp_path, caplog):
    """Its renewals hang (a database that stopped answering): before the lease could pass to
    another controller, it stops releasing effects and steps down, on its own clock."""
    from reckon.daemon.store.postgres import PgFactStore

    async def renew_never_returns(self):
        await trio.sleep_forever()

    caplog.set_level(logging.INFO, logger="reckon.controller")
    original = PgFactStore.renew
    PgFactStore.renew = renew_never_returns
    try:
        with pytest.raises(BaseExceptionGroup) as raised:
            async with trio.open_nursery() as outer:
                a_port, _ = await outer.start(serve_controller, options(pg_dsn, tmp_path, "a"))
                await wait_until(lambda: _ok(a_port, {"op": "status"}))
                await trio.sleep_forever()
    finally:
        PgFactStore.renew = original
    stepped, rest = raised.value.split(SteppedDown)
    assert rest is None and "could not renew the lease of epoch 1 in time" in str(stepped.exceptions[0])
