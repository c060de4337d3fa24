"""The agent's local records and completion outbox (daemon/store/agent.py).

Real SQLite files under tmp_path; no fixed sleeps; a hang guard on every test.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from reckon.daemon.store.agent import SCHEMA_VERSION, AgentStore
from reckon.daemon.store.sqlite_thread import StoreError
from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, LocalStatus
from reckon.model.jobs import JobSpec
from reckon.model.resources import Owner, Usage
from tests.daemon.store_helpers import hang_guard


SPEC = JobSpec(name="build", command=("make", "-j4", ""), cwd="/src", env=(("CC", "gcc"), ("EMPTY", "")), slots=2)


USAGE = Usage(cpu_user=1.25, cpu_system=0.5, max_rss=50 << 20, wall=2.0, source="cgroup")


def records() -> list[LocalJob]:
    """One record of every shape the model writes."""
    return [
        LocalJob(job="1", attempt=1, spec=SPEC),
        LocalJob(job="2", attempt=3, spec=SPEC, started_at=10.5),
        LocalJob(job="3", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, started_at=10.0, exit_code=0,
                 finished_at=12.25, acked=True),
        LocalJob(job="4", attempt=2, spec=None, status=LocalStatus.FINISHED, signal=9, finished_at=13.0),
        LocalJob(job="5", attempt=1, spec=SPEC, status=LocalStatus.INDETERMINATE, started_at=11.0),
        LocalJob(job="6", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, exit_code=-1, signal=None,
                 finished_at=14.0),
        LocalJob(job="7", attempt=2, spec=SPEC, started_at=15.0, uid="9c3e5a7f01b2d4e6"),
        # Protocol 6: whom it runs as, the GPUs a dispatch gave, what a finished attempt used, an OOM kill.
        LocalJob(job="8", attempt=1, spec=SPEC, started_at=16.0, gpus=(0, 3), uid="9c3e5a7f01b2d4e7",
                 owner=Owner(uid=1001, gid=100, user="alice")),
        LocalJob(job="9", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, signal=9, finished_at=18.0,
                 gpus=(1,), usage=USAGE, oom=True),
    ]


def report(job: str, attempt: int = 1, **kw) -> M.Finished:
    fields = {"exit_code": 0, "signal": None, "finished_at": 20.0, "started_at": None} | kw
    return M.Finished(job=job, attempt=attempt, **fields)


def _raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    return await trio.to_thread.run_sync(_raw, path, sql, params)


# ---- round trips -----------------------------------------------------------------


@hang_guard
async def test_fresh_store_loads_empty(tmp_path):
    async with await AgentStore.open(tmp_path / "state") as store:
        assert await store.load() == ([], [])
        await store.apply([])
    assert (tmp_path / "state" / "agent.db").exists()


@hang_guard
async def test_records_and_outbox_survive_reopen(tmp_path):
    outbox = [report("4", 2, exit_code=None, signal=9, finished_at=13.0), report("6", exit_code=-1, finished_at=14.0),
              report("7", exit_code=255, started_at=1.5), report("8", uid="9c3e5a7f01b2d4e6"),
              report("9", exit_code=None, signal=9, usage=USAGE, oom=True)]
    async with await AgentStore.open(tmp_path) as store:
        await store.apply([E.StoreRecord(record=r) for r in records()] + [E.OutboxPut(report=f) for f in outbox])
    async with await AgentStore.open(tmp_path) as store:
        assert await store.load() == (records(), outbox)


@hang_guard
async def test_updates_deletes_and_order(tmp_path):
    first = records()
    async with await AgentStore.open(tmp_path) as store:
        await store.apply([E.StoreRecord(record=r) for r in first])
        await store.apply([E.OutboxPut(report=report("8")), E.OutboxPut(report=report("9"))])
        done = LocalJob(job="1", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, exit_code=2, finished_at=30.0)
        await store.apply([
            E.StoreRecord(record=done),  # an update keeps the record's place
            E.DeleteRecord(job="3", attempt=1),
            E.DeleteRecord(job="3", attempt=2),  # deleting what is not there is harmless
            E.OutboxDelete(job="8", attempt=1),
            E.OutboxPut(report=report("9", exit_code=1)),  # a re-put replaces
        ])
    async with await AgentStore.open(tmp_path) as store:
        loaded, outbox = await store.load()
    assert loaded == [done] + first[1:2] + first[3:]
    assert outbox == [report("9", exit_code=1)]


@hang_guard
async def test_one_batch_keeps_command_order_for_the_same_key(tmp_path):
    """Writes of one kind go out as one multi-row statement: a later row must still win,
    and a put, delete, put of one key must end as the last put."""
    running = LocalJob(job="1", attempt=1, spec=SPEC)
    finished = LocalJob(job="1", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, exit_code=3, finished_at=9.0)
    async with await AgentStore.open(tmp_path) as store:
        await store.apply([
            E.StoreRecord(record=running), E.StoreRecord(record=finished),  # one statement, two rows, one key
            E.OutboxPut(report=report("1", exit_code=3)), E.OutboxDelete(job="1", attempt=1),
            E.OutboxPut(report=report("1", exit_code=4)),
            E.StoreRecord(record=LocalJob(job="2", attempt=1, spec=SPEC)), E.DeleteRecord(job="2", attempt=1),
        ])
        assert await store.load() == ([finished], [report("1", exit_code=4)])


@hang_guard
async def test_a_batch_larger_than_one_statement_allows(tmp_path):
    """More rows than SQLite's variable limit lets one statement carry: split, all written, in order."""
    many = [LocalJob(job=str(i), attempt=1, spec=None, status=LocalStatus.FINISHED, exit_code=0,
                     finished_at=float(i)) for i in range(1, 101)]
    async with await AgentStore.open(tmp_path) as store:
        await store.db.run(lambda conn: conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 40))
        await store.apply([E.StoreRecord(record=r) for r in many])  # 9 values a row: 4 rows a statement
        await store.apply([E.DeleteRecord(job=r.job, attempt=1) for r in many[:75]])  # 20 rows a statement
        assert await store.load() == (many[75:], [])


@hang_guard
async def test_a_restarted_agent_model_sees_what_the_live_one_had(tmp_path):
    """Drive the real agent model; after every step a restart from the store matches it."""
    config = AgentConfig(name="a1", slots=4, recent_window=5.0)
    live = Agent(config)
    seq = iter(range(1, 1000))

    def from_controller(message, now):
        return E.MessageFromController(message=message, now=now)

    steps = [
        E.Connected(now=1.0),
        from_controller(M.Welcome(seq=next(seq), version=M.PROTOCOL_VERSION, token=None), 1.0),
        *[from_controller(M.Dispatch(seq=next(seq), job=str(j), attempt=1, spec=SPEC), 2.0) for j in range(1, 5)],
        E.ProcessStarted(job="1", attempt=1, started_at=2.5),
        E.ProcessStarted(job="2", attempt=1, started_at=2.6),
        E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=3.0, now=3.0),
        E.ProcessExited(job="2", attempt=1, exit_code=None, signal=15, finished_at=3.5, now=3.5),
        E.ProcessExited(job="99", attempt=4, exit_code=7, signal=None, finished_at=3.6, now=3.6),  # no record
        E.ProcessLost(job="3", attempt=1, now=3.7),
        from_controller(M.Ack(seq=next(seq), job="1", attempt=1, outcome=M.AckOutcome.APPLIED), 4.0),
        E.Disconnected(now=5.0),
        E.Tick(now=20.0),  # the acked record and the indeterminate one age out
    ]
    async with await AgentStore.open(tmp_path) as store:
        for step in steps:
            commands = live.handle(step)
            await store.apply([c for c in commands if isinstance(c, (E.StoreRecord, E.DeleteRecord,
                                                                     E.OutboxPut, E.OutboxDelete))])
            restarted = Agent(config, *await store.load())
            assert list(restarted.records.items()) == list(live.records.items())
            assert {k: e.report for k, e in restarted.outbox.items()} == {k: e.report for k, e in live.outbox.items()}
    assert set(live.records) == {("2", 1), ("4", 1), ("99", 4)} and set(live.outbox) == {("2", 1), ("99", 4)}


# ---- one transaction, all or nothing ---------------------------------------------------------


@hang_guard
async def test_other_commands_raise_type_error_and_write_nothing(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        good = E.StoreRecord(record=records()[0])
        with pytest.raises(TypeError, match="StartProcess"):
            await store.apply([good, E.StartProcess(job="1", attempt=1, spec=SPEC)])
        with pytest.raises(TypeError, match="LocalJob"):
            await store.apply([good, E.StoreRecord(record={"job": "1"})])
        with pytest.raises(TypeError):
            await store.apply([good, E.OutboxPut(report="nope")])
        assert await store.load() == ([], [])


@hang_guard
async def test_a_batch_failing_inside_the_database_is_rolled_back(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        await store.apply([E.StoreRecord(record=records()[0])])
        unbindable = LocalJob(job="2", attempt=1, spec=None, started_at=object())  # sqlite cannot store it
        with pytest.raises(sqlite3.Error):
            await store.apply([E.DeleteRecord(job="1", attempt=1), E.OutboxPut(report=report("1")),
                               E.StoreRecord(record=unbindable)])
        assert await store.load() == ([records()[0]], [])
        await store.apply([E.OutboxPut(report=report("1"))])  # the store is still usable
        assert await store.load() == ([records()[0]], [report("1")])


# ---- settings, schema, corruption --------------------------------------------------------------


@hang_guard
async def test_wal_and_synchronous_full_are_set(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        mode, sync, version = await store.db.run(lambda c: (
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA synchronous").fetchone()[0],
            c.execute("PRAGMA user_version").fetchone()[0]))
    assert (mode, sync, version) == ("wal", 2, SCHEMA_VERSION)
    assert await raw(tmp_path / "agent.db", "PRAGMA journal_mode") == [("wal",)]


@hang_guard
async def test_newer_schema_version_is_refused(tmp_path):
    async with await AgentStore.open(tmp_path):
        pass
    await raw(tmp_path / "agent.db", "PRAGMA user_version = 99")
    with pytest.raises(StoreError, match=r"agent\.db has schema version 99, newer"):
        await AgentStore.open(tmp_path)
    assert not [t for t in threading.enumerate() if t.name.startswith("reckon-sqlite")]


_SCHEMA_V1 = (
    "CREATE TABLE local_job (job TEXT NOT NULL, attempt INTEGER NOT NULL, spec BLOB, status TEXT NOT NULL, "
    "started_at REAL, exit_code INTEGER, signal INTEGER, finished_at REAL, acked INTEGER NOT NULL, "
    "PRIMARY KEY (job, attempt))",
    "CREATE TABLE outbox (job TEXT NOT NULL, attempt INTEGER NOT NULL, exit_code INTEGER, signal INTEGER, "
    "finished_at REAL NOT NULL, started_at REAL, PRIMARY KEY (job, attempt))",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "INSERT INTO local_job VALUES ('1', 1, NULL, 'running', 3.0, NULL, NULL, NULL, 0)",
    "INSERT INTO outbox VALUES ('2', 1, 0, NULL, 4.0, 3.5)",
    "PRAGMA user_version = 1",
)


@hang_guard
async def test_a_version_1_store_is_upgraded_and_keeps_its_rows(tmp_path):
    """An agent.db written before submission uids opens, with uid NULL for what it held."""
    for sql in _SCHEMA_V1:
        await raw(tmp_path / "agent.db", sql)
    async with await AgentStore.open(tmp_path) as store:
        assert await store.load() == ([LocalJob(job="1", attempt=1, spec=None, started_at=3.0)],
                                      [report("2", finished_at=4.0, started_at=3.5)])
        await store.apply([E.StoreRecord(record=LocalJob(job="3", attempt=1, spec=SPEC, uid="ab" * 8))])
    async with await AgentStore.open(tmp_path) as store:
        assert (await store.load())[0][-1].uid == "ab" * 8
    assert await raw(tmp_path / "agent.db", "PRAGMA user_version") == [(SCHEMA_VERSION,)]


@pytest.mark.parametrize("sql, message", [
    ("UPDATE local_job SET spec = x'ff' WHERE job = '2'", r"local job record \('2', 3\) is corrupt"),
    ("UPDATE local_job SET status = 'exploded' WHERE job = '1'", r"local job record \('1', 1\) is corrupt"),
    # extra: a CBOR map whose owner is 1, not an owner's map
    ("UPDATE local_job SET extra = x'a1656f776e657201' WHERE job = '8'", r"local job record \('8', 1\) is corrupt"),
    ("UPDATE local_job SET acked = 7 WHERE job = '3'", r"local job record \('3', 1\) is corrupt"),
    ("UPDATE local_job SET exit_code = NULL WHERE job = '3'", r"local job record \('3', 1\) is corrupt"),
    ("UPDATE outbox SET finished_at = 'soon'", r"outbox entry \('4', 2\) is corrupt"),
])
@hang_guard
async def test_corrupt_rows_are_reported_by_key(tmp_path, sql, message):
    async with await AgentStore.open(tmp_path) as store:
        await store.apply([E.StoreRecord(record=r) for r in records()]
                          + [E.OutboxPut(report=report("4", 2, exit_code=None, signal=9))])
    await raw(tmp_path / "agent.db", sql)
    async with await AgentStore.open(tmp_path) as store:
        with pytest.raises(StoreError, match=message):
            await store.load()


# ---- threads and cancellation -----------------------------------------------------------------


@hang_guard
async def test_every_sqlite_call_runs_on_one_thread_that_is_not_trio(tmp_path):
    seen: list[int] = []
    store = await AgentStore.open(tmp_path)
    await store.db.run(lambda c: c.set_trace_callback(lambda sql: seen.append(threading.get_ident())))
    await store.apply([E.StoreRecord(record=r) for r in records()])
    await store.apply([E.OutboxPut(report=report("1")), E.DeleteRecord(job="1", attempt=1)])
    await store.load()
    owner = store.db.thread_id
    await store.aclose()
    assert len(seen) >= 10 and set(seen) == {owner} and owner != threading.get_ident()


@hang_guard
async def test_cancel_while_writing_completes_and_cancel_while_queued_drops(tmp_path):
    inside, release = threading.Event(), threading.Event()

    def trace(sql: str) -> None:
        if sql.startswith("INSERT INTO local_job") and not inside.is_set():
            inside.set()
            release.wait(30)

    batch = [E.StoreRecord(record=r) for r in records()]
    results: dict[str, str] = {}

    async def apply(name, commands, task_status=trio.TASK_STATUS_IGNORED):
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await store.apply(commands)
            results[name] = "returned"
        if scope.cancelled_caught:
            results[name] = "cancelled"

    async with await AgentStore.open(tmp_path) as store:
        await store.db.run(lambda c: c.set_trace_callback(trace))
        async with trio.open_nursery() as nursery:
            running = await nursery.start(apply, "running", batch)
            await trio.to_thread.run_sync(inside.wait)  # its transaction is under way
            queued = await nursery.start(apply, "queued", [E.OutboxPut(report=report("1"))])
            await trio.testing.wait_all_tasks_blocked()
            running.cancel()
            queued.cancel()
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        await store.db.run(lambda c: c.set_trace_callback(None))
    assert results == {"running": "returned", "queued": "cancelled"}
    async with await AgentStore.open(tmp_path) as store:
        assert await store.load() == (records(), [])


@hang_guard
async def test_identity_is_made_once_and_bound_to_the_first_name(tmp_path):
    from reckon.daemon.store.statelock import WrongStateDir

    async with await AgentStore.open(tmp_path) as store:
        # A directory from before identities (records, no identity yet) gets one on its next start.
        await store.apply([E.StoreRecord(record=records()[0])])
        identity = await store.claim_identity("n1")
        assert len(identity) == 32 and int(identity, 16) >= 0
        assert await store.claim_identity("n1") == identity
    async with await AgentStore.open(tmp_path) as store:
        assert await store.claim_identity("n1") == identity  # durable
        with pytest.raises(WrongStateDir, match=f"{tmp_path} belongs to agent 'n1', not 'n2'"):
            await store.claim_identity("n2")
        assert await store.claim_identity("n1") == identity  # the refusal changed nothing
        assert (await store.load())[0] == [records()[0]]
    async with await AgentStore.open(tmp_path / "other") as store:
        assert await store.claim_identity("n1") != identity  # random, one per directory
