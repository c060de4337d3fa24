"""The controller's fact log (daemon/store/facts.py, daemon/store/postgres.py) and its database thread.

The store-contract tests take ``backend`` and run on both stores; the rest are SQLite's own.

Real SQLite files under tmp_path.  No fixed sleeps: tests wait on conditions
(threading events, a child's output), and every test runs under a hang guard.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.postgres import PgFactStore, redacted
from reckon.daemon.store.sqlite_thread import SqliteThread, StoreError
from reckon.model import facts as F
from reckon.model.jobs import JobSpec
from reckon.model.state import ControllerState, replay, restore, snapshot
from tests.daemon.store_helpers import hang_guard, submits

REPO = Path(__file__).resolve().parents[2]


def history(n_jobs: int) -> list[F.Fact]:
    """A valid fact sequence touching every fact kind (checked by replaying it)."""
    out: list[F.Fact] = [F.AgentRegistered(agent="a1", slots=1000), F.AgentRegistered(agent="a2", slots=1000)]
    for j in range(1, n_jobs + 1):
        job, t, agent = str(j), 100.0 + j, "a1" if j % 2 else "a2"
        spec = JobSpec(name=f"job-{j}", command=("sh", "-c", f"exit {j % 3}"), env=(("K", str(j)),))
        out.append(F.JobSubmitted(job=job, spec=spec, submitted_at=t))
        kind = j % 6
        if kind == 0:
            out.append(F.JobCancelled(job=job))
            continue
        out.append(F.JobDispatched(job=job, attempt=1, agent=agent))
        if kind == 1:
            continue  # left running
        out.append(F.JobStarted(job=job, attempt=1, started_at=t + 0.25))
        if kind == 2:
            out.append(F.JobFinished(job=job, attempt=1, exit_code=0, signal=None, finished_at=t + 1.5))
        elif kind == 3:
            out.append(F.JobFinished(job=job, attempt=1, exit_code=None, signal=9, finished_at=t + 2.0,
                                     started_at=t + 0.25))
        elif kind == 4:
            out += [F.JobRequeued(job=job, attempt=1, reason="agent lost"),
                    F.JobAdopted(job=job, attempt=2, agent=agent, started_at=t + 3.0),
                    F.JobFinished(job=job, attempt=2, exit_code=3, signal=None, finished_at=t + 4.0)]
        else:
            out += [F.JobCancelRequested(job=job), F.JobCancelConfirmed(job=job, attempt=1)]
    return out


async def append_in_batches(store: FactStore, facts: list[F.Fact], size: int) -> None:
    for i in range(0, len(facts), size):
        await store.append(facts[i:i + size])


def _raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Tamper with or inspect a closed database from outside the store."""
    return await trio.to_thread.run_sync(_raw, path, sql, params)


def sqlite_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("reckon-sqlite")]


class Backend:
    """One fact store implementation for the tests every store must pass: open it, tamper with it."""

    def __init__(self, kind: str, tmp_path: Path, dsn: str | None) -> None:
        self.kind, self.tmp_path, self.dsn = kind, tmp_path, dsn
        self.name = r"controller\.db" if kind == "sqlite" else re.escape(redacted(dsn))

    async def open(self, *, prune: bool = True):
        if self.kind == "sqlite":
            return await FactStore.open(self.tmp_path, prune=prune)
        store = await PgFactStore.open(self.dsn, prune=prune, holder="test")
        assert await store.try_lead() is not None  # the last store that led here is closed: gone
        return store

    async def raw(self, sql: str, params: tuple = ()) -> list[tuple]:
        if self.kind == "sqlite":
            return await raw(self.tmp_path / "controller.db", sql, params)
        return await trio.to_thread.run_sync(_raw_pg, self.dsn, sql.replace("?", "%s"), params)


def _raw_pg(dsn: str, sql: str, params: tuple) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """Each store-contract test runs on SQLite and on a real PostgreSQL (daemon/bench/pgserver.py)."""
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    return Backend(request.param, tmp_path, dsn)


# ---- round trips -----------------------------------------------------------------


@hang_guard
async def test_fresh_store_loads_empty(backend):
    async with await backend.open() as store:
        assert await store.load() == (None, [], 0)
        assert store.last_seq == 0 and store.facts_since_snapshot == 0
        assert await store.append([]) == 0  # an empty batch writes nothing
    if backend.kind == "sqlite":
        assert (backend.tmp_path / "controller.db").exists()


@hang_guard
async def test_append_round_trip_survives_reopen(backend):
    facts = history(40)
    replay(facts)  # the fixture is a valid history
    async with await backend.open() as store:
        if backend.kind == "sqlite":  # 2 values a row: a batch of 49 facts takes 3 statements
            await store.db.run(lambda conn: conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 40))
        assert await store.append(facts[:1]) == 1
        assert await store.append(facts[1:50]) == 50
        assert await store.append(facts[50:]) == len(facts)
        assert store.facts_since_snapshot == len(facts)
    async with await backend.open() as store:
        assert store.last_seq == len(facts) and store.facts_since_snapshot == len(facts)
        snap, loaded, last = await store.load()
        assert snap is None and loaded == facts and last == len(facts)
        assert await store.append(submits(41, 3)) == len(facts) + 3  # numbering continues
    rows = await backend.raw("SELECT seq FROM fact ORDER BY seq")
    assert [r[0] for r in rows] == list(range(1, len(facts) + 4))


@hang_guard
async def test_concurrent_appends_are_serialized(backend):
    async with await backend.open() as store:
        async with trio.open_nursery() as nursery:
            for t in range(8):
                nursery.start_soon(store.append, [F.AgentRegistered(agent=f"t{t}", slots=i + 1) for i in range(25)])
        assert store.last_seq == 200
        _, loaded, last = await store.load()
    assert last == 200 and len(loaded) == 200
    for t in range(8):  # each batch is contiguous and in order: one transaction each
        seqs = [i for i, f in enumerate(loaded) if f.agent == f"t{t}"]
        assert seqs == list(range(seqs[0], seqs[0] + 25))
        assert [loaded[i].slots for i in seqs] == list(range(1, 26))


@hang_guard
async def test_append_rejects_non_facts_and_writes_nothing(backend):
    async with await backend.open() as store:
        with pytest.raises(TypeError):
            await store.append([*submits(1, 2), {"k": "job_cancelled"}])
        assert store.last_seq == 0
        assert await store.load() == (None, [], 0)


# ---- snapshots and pruning ------------------------------------------------------------


@hang_guard
async def test_snapshot_plus_tail_equals_full_replay(backend):
    facts = history(120)
    full = replay(facts)
    cut = len(facts) // 2
    async with await backend.open() as store:
        await append_in_batches(store, facts[:cut], 17)
        await store.write_snapshot(snapshot(replay(facts[:cut])), cut)
        assert store.facts_since_snapshot == 0
        await append_in_batches(store, facts[cut:], 23)
        assert store.facts_since_snapshot == len(facts) - cut
    async with await backend.open() as store:
        assert store.facts_since_snapshot == len(facts) - cut
        snap, tail, last = await store.load()
    assert last == len(facts) and tail == facts[cut:]
    restored = replay(tail, restore(snap))
    assert restored.digest() == full.digest()
    assert restored.facts_applied == full.facts_applied


@hang_guard
async def test_snapshot_prunes_covered_facts_and_old_snapshots(backend):
    facts = history(60)
    async with await backend.open() as store:
        await store.append(facts[:100])
        await store.write_snapshot(snapshot(replay(facts[:80])), 80)
        await store.append(facts[100:])
        await store.write_snapshot(snapshot(replay(facts)), len(facts))  # covers everything
        assert store.facts_since_snapshot == 0
    assert await backend.raw("SELECT upto_seq FROM snapshot") == [(len(facts),)]
    assert await backend.raw("SELECT count(*) FROM fact") == [(0,)]
    async with await backend.open() as store:
        assert store.last_seq == len(facts)
        snap, tail, last = await store.load()
        assert tail == [] and last == len(facts)
        assert restore(snap).digest() == replay(facts).digest()
        # Numbering continues after the snapshot even though the fact table is empty.
        assert await store.append(submits(61, 2)) == len(facts) + 2
        snap, tail, last = await store.load()
        assert tail == submits(61, 2) and last == len(facts) + 2


@hang_guard
async def test_prune_off_keeps_history_but_not_old_snapshots(backend):
    facts = history(30)
    async with await backend.open(prune=False) as store:
        await store.append(facts)
        await store.write_snapshot(snapshot(replay(facts[:10])), 10)
        await store.write_snapshot(snapshot(replay(facts[:20])), 20)
        snap, tail, last = await store.load()
        assert tail == facts[20:] and last == len(facts)
        assert replay(tail, restore(snap)).digest() == replay(facts).digest()
    assert await backend.raw("SELECT count(*) FROM fact") == [(len(facts),)]
    assert await backend.raw("SELECT upto_seq FROM snapshot") == [(20,)]


@hang_guard
async def test_snapshot_out_of_range_is_refused_and_changes_nothing(backend):
    facts = history(10)
    async with await backend.open() as store:
        await store.append(facts)
        await store.write_snapshot(snapshot(replay(facts[:5])), 5)
        with pytest.raises(ValueError, match="between"):
            await store.write_snapshot(snapshot(replay(facts)), len(facts) + 1)  # beyond the log
        with pytest.raises(ValueError, match="between"):
            await store.write_snapshot(snapshot(ControllerState()), 4)  # behind the current snapshot
        with pytest.raises(TypeError):
            await store.write_snapshot([1, 2], 5)
        assert store.facts_since_snapshot == len(facts) - 5
        snap, tail, _ = await store.load()
        assert tail == facts[5:] and restore(snap).digest() == replay(facts[:5]).digest()


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


# ---- corruption is reported, never skipped ---------------------------------------------


@pytest.mark.parametrize("blob, why", [
    (b"\xff\x00garbage", "not CBOR"),
    (b"\xa2akfnope\x61v\x01", "CBOR, but an unknown fact kind"),
    (b"\xa3akmjob_cancelledav\x01cjob\x00", "a known kind with a bad field"),
])
@hang_guard
async def test_corrupt_fact_row_names_its_seq(backend, blob, why):
    async with await backend.open() as store:
        await store.append(history(3))
    await backend.raw("UPDATE fact SET data = ? WHERE seq = 4", (blob,))
    async with await backend.open() as store:
        with pytest.raises(StoreError, match=rf"{backend.name}: fact seq 4 cannot be decoded"):
            await store.load()


@hang_guard
async def test_missing_facts_are_reported(backend):
    async with await backend.open() as store:
        await store.append(submits(1, 6))
    await backend.raw("DELETE FROM fact WHERE seq IN (3, 4)")
    async with await backend.open() as store:
        with pytest.raises(StoreError, match=r"facts 3\.\.4 are missing"):
            await store.load()


@hang_guard
async def test_corrupt_snapshot_is_reported(backend):
    facts = history(5)
    async with await backend.open() as store:
        await store.append(facts)
        await store.write_snapshot(snapshot(replay(facts)), len(facts))
    await backend.raw("UPDATE snapshot SET data = ?", (b"\xff",))
    async with await backend.open() as store:
        with pytest.raises(StoreError, match=f"snapshot up to seq {len(facts)} cannot be decoded"):
            await store.load()


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


@pytest.mark.parametrize("checkpoints", range(8))
@hang_guard
async def test_cancel_at_any_point_returned_iff_durable(backend, checkpoints):
    """Whenever the cancel lands, the batch is on disk exactly when append returned."""
    returned: list[int] = []
    async with await backend.open() as store:
        async with trio.open_nursery() as nursery:
            async def appender():
                returned.append(await store.append(submits(1, 20)))  # no checkpoint after this

            nursery.start_soon(appender)
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
    async with await backend.open() as store:
        _, loaded, last = await store.load()
    assert (loaded, last) == ((submits(1, 20), 20) if returned else ([], 0))


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
from reckon.daemon.store.postgres import PgFactStore, redacted
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
