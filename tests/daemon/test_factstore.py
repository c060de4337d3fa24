"""The SQLite fact log (daemon/store/facts.py) and its database thread: what is SQLite's own.

What every store must do is tests/daemon/test_store_contract.py, run on SQLite and PostgreSQL.

Real SQLite files under tmp_path.  No fixed sleeps: tests wait on conditions
(threading events, a child's output), and every test runs under a hang guard.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.sqlite_thread import SqliteThread, StoreError
from reckon.model.state import replay, snapshot
from tests.daemon.store_helpers import hang_guard, history, raw, submits

REPO = Path(__file__).resolve().parents[2]


def sqlite_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("reckon-sqlite")]


# ---- the database's settings and its schema --------------------------------------------


@hang_guard
async def test_wal_and_synchronous_full_are_set(tmp_path):
    async with await FactStore.open(tmp_path) as store:
        mode, sync, version = await store.db.run(lambda c: (
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA synchronous").fetchone()[0],
            c.execute("PRAGMA user_version").fetchone()[0]))
    assert (mode, sync, version) == ("wal", 2, 1)  # 2 == FULL
    # WAL is a property of the file: a fresh connection sees it too.
    assert await raw(tmp_path / "controller.db", "PRAGMA journal_mode") == [("wal",)]


@hang_guard
async def test_newer_schema_version_is_refused(tmp_path):
    async with await FactStore.open(tmp_path) as store:
        await store.append(submits(1, 3))
    await raw(tmp_path / "controller.db", "PRAGMA user_version = 7")
    with pytest.raises(StoreError, match=r"schema version 7.*newer.*\(1\)"):
        await FactStore.open(tmp_path)
    assert sqlite_threads_alive() == []  # the failed open closed its thread
    assert await raw(tmp_path / "controller.db", "SELECT count(*) FROM fact") == [(3,)]  # untouched


@hang_guard
async def test_foreign_database_is_refused(tmp_path):
    await raw(tmp_path / "controller.db", "CREATE TABLE something_else (x)")
    with pytest.raises(StoreError, match="not a database this reckon can use"):
        await FactStore.open(tmp_path)
    assert sqlite_threads_alive() == []
    # Refusing it left it as it was: not even switched to WAL.
    assert await raw(tmp_path / "controller.db", "PRAGMA journal_mode") == [("delete",)]
    assert await raw(tmp_path / "controller.db", "PRAGMA user_version") == [(0,)]


# ---- threads -----------------------------------------------------------------------------


@hang_guard
async def test_every_sqlite_call_runs_on_one_thread_that_is_not_trio(tmp_path):
    seen: list[int] = []
    store = await FactStore.open(tmp_path)
    # The trace callback runs for every statement, on the thread that executes it.
    await store.db.run(lambda c: c.set_trace_callback(lambda sql: seen.append(threading.get_ident())))
    facts = history(10)
    await store.append(facts[:20])
    await store.write_snapshot(snapshot(replay(facts[:20])), 20)
    await store.append(facts[20:])
    await store.load()
    assert {await store.db.run(lambda c: threading.get_ident()) for _ in range(5)} == {store.db.thread_id}
    owner = store.db.thread_id
    await store.aclose()
    assert len(seen) > 10 and set(seen) == {owner}
    assert owner != threading.get_ident()
    assert sqlite_threads_alive() == []  # aclose ended the thread


@hang_guard
async def test_sqlite_thread_basics(tmp_path):
    db = await SqliteThread.open(tmp_path / "x.db", name="reckon-sqlite-test", version=3, ddl=["CREATE TABLE t (x)"])
    assert await db.run(lambda c: c.execute("PRAGMA user_version").fetchone()[0]) == 3
    with pytest.raises(ZeroDivisionError):  # the job's exception reaches the caller
        await db.run(lambda c: 1 / 0)
    assert await db.run(lambda c, a, b: a + b, 2, 3) == 5  # and the thread lives on
    await db.aclose()
    await db.aclose()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await db.run(lambda c: None)
    assert sqlite_threads_alive() == []


# ---- cancellation: a batch is fully written or not at all, and the caller knows which ---------


def blocking_trace(prefix: str) -> tuple[threading.Event, threading.Event, object]:
    """A trace callback that stops the database thread inside the first statement starting with ``prefix``."""
    inside, release = threading.Event(), threading.Event()

    def trace(sql: str) -> None:
        if sql.startswith(prefix) and not inside.is_set():
            inside.set()
            release.wait(30)

    return inside, release, trace


@hang_guard
async def test_cancel_while_the_commit_runs_still_completes_it(tmp_path):
    batch = submits(1, 50)
    returned: list[int] = []
    async with await FactStore.open(tmp_path) as store:
        inside, release, trace = blocking_trace("INSERT INTO fact")
        await store.db.run(lambda c: c.set_trace_callback(trace))

        async def appender(task_status=trio.TASK_STATUS_IGNORED):
            with trio.CancelScope() as scope:
                task_status.started(scope)
                returned.append(await store.append(batch))

        async with trio.open_nursery() as nursery:
            scope = await nursery.start(appender)
            await trio.to_thread.run_sync(inside.wait)  # the transaction is under way
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        assert returned == [50] and store.last_seq == 50  # the caller learnt it committed
        await store.db.run(lambda c: c.set_trace_callback(None))
    async with await FactStore.open(tmp_path) as store:
        assert (await store.load())[1] == batch


@hang_guard
async def test_cancel_before_the_job_starts_drops_it(tmp_path):
    entered, gate = threading.Event(), threading.Event()

    def occupy(conn):
        entered.set()
        gate.wait(30)

    async with await FactStore.open(tmp_path) as store:
        await store.append(submits(1, 2))
        outcome: list[str] = []

        async def appender(task_status=trio.TASK_STATUS_IGNORED):
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await store.append(submits(3, 5))
                outcome.append("returned")
            if scope.cancelled_caught:
                outcome.append("cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.db.run, occupy)
            await trio.to_thread.run_sync(entered.wait)  # the thread is busy
            scope = await nursery.start(appender)
            await trio.testing.wait_all_tasks_blocked()  # the append is queued behind it
            scope.cancel()
            gate.set()
        assert outcome == ["cancelled"] and store.last_seq == 2
        assert await store.append(submits(3, 1)) == 3  # the dropped batch used no seqs
    async with await FactStore.open(tmp_path) as store:
        assert (await store.load())[1] == submits(1, 3)


# ---- crash safety ----------------------------------------------------------------------------

# The child appends batches of JobSubmitted facts forever, printing "ack N" once
# append returned (durable up to seq N).  Modes: "run" never stops by itself;
# "row" halts inside the transaction of batch k+1 after half its rows are in;
# "commit" halts on that batch's COMMIT statement.  A halted child prints
# "halted" and blocks, holding its transaction open, until SIGKILL.  Its page
# cache is tiny so uncommitted pages spill into the WAL before the kill.
CHILD = """
import sys, threading, trio
from pathlib import Path
from reckon.daemon.store.facts import FactStore
from reckon.model import facts as F
from reckon.model.jobs import JobSpec

def halt(*_):
    print("halted", flush=True)
    threading.Event().wait()

async def main(state_dir, batch, mode, k):
    store = await FactStore.open(Path(state_dir))
    n = store.last_seq
    stop_seq = n + k * batch + batch // 2
    commits = 0

    def on_sql(sql):
        nonlocal commits
        if sql == "COMMIT":
            commits += 1
            if commits == k + 1:
                halt()

    def arm(conn):
        conn.execute("PRAGMA cache_size = 8")
        conn.create_function("halt", 0, halt)
        if mode == "row":
            conn.execute(f"CREATE TEMP TRIGGER halt_at AFTER INSERT ON main.fact WHEN NEW.seq = {stop_seq} "
                         "BEGIN SELECT halt(); END")
        elif mode == "commit":
            conn.set_trace_callback(on_sql)

    await store.db.run(arm)
    spec = JobSpec(name="s", command=("true",))  # as submits() in the test
    while True:
        n = await store.append([F.JobSubmitted(job=str(i), spec=spec, submitted_at=float(i))
                                for i in range(n + 1, n + batch + 1)])
        print("ack", n, flush=True)

trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
"""


async def run_until_killed(state_dir: Path, batch: int, mode: str, k: int, stderr_path: Path) -> int:
    """Run the child until it halts (or has acked k batches, mode "run"), SIGKILL it; the last seq it acked."""
    with open(stderr_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", CHILD, str(state_dir), str(batch), mode, str(k)],
            stdout=subprocess.PIPE, stderr=err, cwd=REPO)
    try:
        acked, acks, buffer = 0, 0, b""
        while True:
            chunk = await proc.stdout.receive_some()
            assert chunk, f"the child exited early: {stderr_path.read_text()}"
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"ack "):
                    acked, acks = int(line.split()[1]), acks + 1
            if b"halted" in lines or (mode == "run" and acks >= k):
                break
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        return acked
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
        await proc.stdout.aclose()


@hang_guard
async def test_sigkill_mid_run_leaves_a_prefix_of_whole_batches(tmp_path):
    batch = 400
    state = tmp_path / "state"
    last = 0
    # Crash in the middle of a batch's rows, on its COMMIT, and wherever a
    # free-running child happens to be; each round reopens what the last left.
    for round_, (mode, k) in enumerate([("row", 3), ("commit", 2), ("run", 5), ("row", 0), ("commit", 0)]):
        before = last
        acked = await run_until_killed(state, batch, mode, k, tmp_path / f"stderr{round_}")
        async with await FactStore.open(state) as store:
            snap, loaded, last = await store.load()
            check = await store.db.run(lambda c: c.execute("PRAGMA integrity_check").fetchall())
        assert check == [("ok",)]
        assert snap is None and last == len(loaded)
        assert loaded == submits(1, last), "the log is not the exact prefix the child wrote"
        assert last % batch == 0, "a partial batch survived"
        assert last >= acked, "an acknowledged batch was lost"
        if mode != "run":  # halted inside batch k+1: exactly k batches are there
            assert last == before + k * batch and acked == (last if k else 0)
        replay(loaded)
