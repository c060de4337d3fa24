"""Time limits (issue #10): the supervisor stops a job at its limit, records
that it timed out, and the agent store keeps that record.  Real processes,
under a hang guard, waiting on conditions (never on fixed sleeps)."""

from __future__ import annotations

import signal

import trio

from reckon.daemon.agent.attempts import ExitStatus
from reckon.daemon.agent.runner import JobRunner
from reckon.daemon.store.agent import SCHEMA_VERSION, AgentStore
from reckon.model import events as E
from reckon.model.records import LocalJob, LocalStatus

from tests.daemon.test_agentstore import _SCHEMA_V1, raw, report
from tests.daemon.test_runner import HANG, Exits, reaper, run_records, sh  # noqa: F401 - reaper: the autouse fixture


def _limited(script: str, limit: float = 0.5):
    from dataclasses import replace

    return replace(sh(script), time_limit=limit)


async def test_the_supervisor_sends_sigterm_at_the_limit_and_records_the_timeout(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, _limited("sleep 30"))
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.signal, e.timed_out) == (None, signal.SIGTERM, True)
    status = run_records(runner.jobs_dir, "1", 1)[1]
    assert status["timed_out"] is True


async def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", kill_grace=0.2) as runner:
            await runner.start("1", 1, _limited("trap '' TERM; while :; do sleep 0.05; done"))
            e = await Exits(runner).get("1")
    assert (e.signal, e.timed_out) == (signal.SIGKILL, True)


async def test_a_job_that_ends_within_its_limit_did_not_time_out(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, _limited("exit 4", limit=60))
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.timed_out) == (4, False)
    assert "timed_out" not in run_records(runner.jobs_dir, "1", 1)[1]  # records without a timeout stay as before


async def test_the_limit_holds_while_no_runner_watches(tmp_path):
    """The agent restarts: a new runner adopts the attempt and reads the supervisor's timeout."""
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as first:
            await first.start("1", 1, _limited("sleep 30"))
        # No runner (no agent) now: the supervisor alone ends the job at its limit.
        while (run_records(first.jobs_dir, "1", 1)[1]) is None:
            await trio.sleep(0.02)
        async with JobRunner(tmp_path / "state") as second:
            found = (await second.adopt([("1", 1)]))[("1", 1)]
    assert isinstance(found, ExitStatus) and (found.signal, found.timed_out) == (signal.SIGTERM, True)


async def test_the_agent_store_keeps_timed_out_and_upgrades_older_stores(tmp_path):
    with trio.fail_after(HANG):
        record = LocalJob(job="1", attempt=1, spec=None, status=LocalStatus.FINISHED, signal=15,
                          finished_at=5.0, timed_out=True)
        timed = report("2", exit_code=None, signal=9, timed_out=True)
        async with await AgentStore.open(tmp_path / "new") as store:
            await store.apply([E.StoreRecord(record=record), E.OutboxPut(report=timed)])
        async with await AgentStore.open(tmp_path / "new") as store:
            assert await store.load() == ([record], [timed])
        # A version 1 store (and so a version 2 one) gains the column, false for what it held.
        (tmp_path / "old").mkdir()
        for sql in _SCHEMA_V1:
            await raw(tmp_path / "old" / "agent.db", sql)
        async with await AgentStore.open(tmp_path / "old") as store:
            records, outbox = await store.load()
        assert [r.timed_out for r in records] == [False] and [f.timed_out for f in outbox] == [False]
        assert await raw(tmp_path / "old" / "agent.db", "PRAGMA user_version") == [(SCHEMA_VERSION,)]
