"""A controller on PostgreSQL uses its store as one on SQLite does: `history` reads the log, and job
ids continue across a takeover and a restart without skipping a block.

Real controllers (serve_controller) on one real PostgreSQL, real loopback sockets, real time;
waits are on conditions under a hang guard.
"""

from __future__ import annotations

import trio

from reckon.daemon.controller.server import serve_controller
from reckon.model.jobs import JobSpec
from tests.daemon.store_helpers import hang_guard
from tests.daemon.test_ha_controller import client_call, options, wait_until

SPEC = JobSpec(name="j", command=("true",)).to_dict()


async def _leads(port: int) -> bool:
    return bool((await client_call(port, {"op": "status"})).get("ok"))


async def _submit(port: int) -> str:
    reply = await client_call(port, {"op": "submit", "spec": SPEC})
    assert reply["ok"], reply
    return reply["job"]["id"]


async def _start(nursery: trio.Nursery, pg_dsn: str, tmp_path, name: str) -> tuple[int, trio.CancelScope]:
    """Start a controller on ``pg_dsn`` that can be stopped alone; its port and its scope."""
    scope = trio.CancelScope()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        with scope:
            await serve_controller(options(pg_dsn, tmp_path, name), task_status=task_status)

    port, _ = await nursery.start(run)
    return port, scope


@hang_guard
async def test_history_on_postgresql_reads_the_log(pg_dsn, tmp_path):
    """`reckon history` on PostgreSQL closed the connection (the store had no facts_about)."""
    async with trio.open_nursery() as nursery:
        port, _ = await _start(nursery, pg_dsn, tmp_path, "a")
        await wait_until(lambda: _leads(port))
        job = await _submit(port)
        await client_call(port, {"op": "cancel", "job": job})
        reply = await client_call(port, {"op": "history", "job": job})
        assert reply["ok"], reply
        history = reply["history"]
        assert history["job"] == job and not history["compacted"] and history["record"]["state"] == "CANCELLED"
        unknown = await client_call(port, {"op": "history", "job": "999"})
        assert unknown["ok"] is False and "unknown job" in unknown["error"]
        nursery.cancel_scope.cancel()


@hang_guard
async def test_job_ids_continue_across_a_takeover_and_a_restart_on_postgresql(pg_dsn, tmp_path):
    """Each takeover skipped the rest of a block of 1000 ids (the mark file's reason, which does
    not apply to a database restored whole): ids now continue from the log."""
    async with trio.open_nursery() as nursery:
        a_port, a_scope = await _start(nursery, pg_dsn, tmp_path, "a")
        await wait_until(lambda: _leads(a_port))
        assert [await _submit(a_port), await _submit(a_port)] == ["1", "2"]

        b_port, b_scope = await _start(nursery, pg_dsn, tmp_path, "b")  # stands by
        a_scope.cancel()  # a stops: b takes over
        await wait_until(lambda: _leads(b_port))
        assert await _submit(b_port) == "3"

        b_scope.cancel()
        c_port, _ = await _start(nursery, pg_dsn, tmp_path, "c")  # a restart on the same database
        await wait_until(lambda: _leads(c_port))
        assert await _submit(c_port) == "4"
        jobs = (await client_call(c_port, {"op": "jobs"}))["jobs"]
        assert sorted(int(j["id"]) for j in jobs) == [1, 2, 3, 4]
        nursery.cancel_scope.cancel()
