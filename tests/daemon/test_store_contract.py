"""The store contract (daemon/store/interface.py): every test here runs on the SQLite store and on a
real PostgreSQL (the tests' private server, tests/pgserver.py), and the protocol's members are
checked to be on both classes with the same signatures.

The SQLite store's own properties (its thread, WAL, crash safety) are tests/daemon/test_factstore.py;
PostgreSQL's leadership is tests/daemon/test_pg_leadership.py.  No fixed sleeps; a hang guard on each.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import threading
from types import SimpleNamespace

import pytest
import trio

from reckon.daemon.controller.metrics import _StateCollector
from reckon.daemon.controller.query import QueryIndex
from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.interface import ControllerStore
from reckon.daemon.store.postgres import Deposed, PgFactStore
from reckon.daemon.store.sqlite_thread import StoreError
from reckon.model import facts as F
from reckon.model.controller import Controller
from reckon.model.history import job_history
from reckon.model.state import ControllerState, replay, restore, snapshot
from tests.daemon.store_helpers import Backend, append_in_batches, hang_guard, history, submits

STORES = (FactStore, PgFactStore)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """Each test here runs on SQLite and on a real PostgreSQL (tests/pgserver.py)."""
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



# ---- cancellation: a batch is fully written or not at all, and the caller knows which ---------


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



# ---- the protocol: complete on both classes ----------------------------------------------------


def protocol_members() -> dict[str, object]:
    """The members ``ControllerStore`` declares (properties and methods, the context manager's too)."""
    return {name: value for name, value in vars(ControllerStore).items()
            if (isinstance(value, property) or inspect.isfunction(value))
            and (not name.startswith("_") or name in ("__aenter__", "__aexit__"))}


def _shape(fn) -> list[tuple]:
    """What a caller relies on: each parameter's name, kind, default and annotation."""
    return [(p.name, p.kind, p.default, p.annotation) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("store_class", STORES, ids=lambda c: c.__name__)
def test_every_member_of_the_protocol_is_on_both_stores_with_its_signature(store_class):
    members = protocol_members()
    assert {"kind", "last_seq", "facts_since_snapshot", "where", "disk_bytes", "load", "append", "write_snapshot",
            "facts_about", "aclose", "__aenter__", "__aexit__"} <= set(members)
    for name, declared in members.items():
        actual = inspect.getattr_static(store_class, name, None)
        assert actual is not None, f"{store_class.__name__} lacks {name}"
        if isinstance(declared, property):
            assert isinstance(actual, property), f"{store_class.__name__}.{name} is not a property"
            assert (inspect.signature(actual.fget).return_annotation
                    == inspect.signature(declared.fget).return_annotation), name
            continue
        assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(declared), \
            f"{store_class.__name__}.{name}: async in one, not the other"
        assert _shape(actual) == _shape(declared), f"{store_class.__name__}.{name}{inspect.signature(actual)} " \
                                                   f"is not the protocol's {name}{inspect.signature(declared)}"
        if name != "__aenter__":  # (returns the class itself)
            assert inspect.signature(actual).return_annotation == inspect.signature(declared).return_annotation, name


@hang_guard
async def test_an_open_store_is_the_protocol_and_says_what_it_is(backend):
    async with await backend.open() as store:
        assert isinstance(store, ControllerStore)
        await store.append(history(3))
        if backend.kind == "sqlite":
            assert store.kind == "sqlite"
            assert store.disk_bytes() == os.stat(backend.tmp_path / "controller.db").st_size > 0
            assert store.where == str(backend.tmp_path / "controller.db")
        else:
            assert store.kind == "postgresql" and store.disk_bytes() is None
            assert store.where.startswith("postgresql://") and "@" in store.where
    assert not isinstance(object(), ControllerStore)  # (the check can fail)


@hang_guard
async def test_metrics_ask_the_store_what_it_is(backend):
    async with await backend.open() as store:
        await store.append(history(2))
        daemon = SimpleNamespace(model=Controller(), store=store)
        daemon.queries = QueryIndex.of(daemon)  # the job counts come from the query index
        collector = _StateCollector(daemon)  # type: ignore[arg-type]
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in collector.collect() for s in family.samples}
        assert samples[("reckon_fact_store", (("kind", store.kind),))] == 1
        assert samples[("reckon_fact_log_last_seq", ())] == store.last_seq > 0
        if backend.kind == "sqlite":
            assert samples[("reckon_fact_log_bytes", ())] == store.disk_bytes() > 0
        else:
            assert ("reckon_fact_log_bytes", ()) not in samples  # no file of ours on PostgreSQL


# ---- facts_about: what `reckon history` reads ------------------------------------------------------


def about(facts: list[F.Fact], job: str) -> list[F.Fact]:
    return [f for f in facts if getattr(f, "job", None) == job]


@hang_guard
async def test_facts_about_a_job_are_its_facts_in_order_until_a_pruning_snapshot_drops_them(backend):
    facts = history(24)
    async with await backend.open() as store:
        await append_in_batches(store, facts, 7)
        for job in ("4", "5", "10", "24"):  # a requeued, a cancelled-while-running, a running... job
            assert await store.facts_about(job) == about(facts, job) != []
        assert await store.facts_about("999") == []
        assert job_history("4", await store.facts_about("4")).attempts[2].exit_code == 3
        await store.write_snapshot(snapshot(replay(facts)), len(facts))
        assert await store.facts_about("4") == []  # pruned: the history says so (compacted)
        assert job_history("4", await store.facts_about("4")).compacted
        await store.append(submits(25, 2))
        assert await store.facts_about("26") == submits(26, 1)
    async with await backend.open() as store:  # read from the database, not from memory
        assert await store.facts_about("25") == submits(25, 1)


@hang_guard
async def test_facts_about_keeps_the_whole_history_when_snapshots_do_not_prune(backend):
    facts = history(12)
    async with await backend.open(prune=False) as store:
        await store.append(facts)
        await store.write_snapshot(snapshot(replay(facts)), len(facts))
        assert await store.facts_about("4") == about(facts, "4") != []
        assert not job_history("4", await store.facts_about("4")).compacted


@hang_guard
async def test_facts_about_reports_a_corrupt_row(backend):
    async with await backend.open() as store:
        await store.append(history(3))
    await backend.raw("UPDATE fact SET data = ? WHERE seq = 4", (b"\xff\x00garbage",))
    async with await backend.open() as store:
        with pytest.raises(StoreError, match=rf"{backend.name}: fact seq 4 cannot be decoded"):
            await store.facts_about("1")


# ---- append's ``then``: after the commit, on the store's thread -------------------------------------


@hang_guard
async def test_then_runs_once_the_batch_is_durable_on_the_stores_thread(backend):
    seen: list[tuple[int, int, bool]] = []

    def then(last: int) -> None:  # a second connection sees the batch already: it is committed
        rows = backend.raw_now("SELECT count(*) FROM fact")[0][0]
        seen.append((last, rows, threading.current_thread() is threading.main_thread()))

    async with await backend.open() as store:
        assert await store.append(submits(1, 3), then=then) == 3
        assert await store.append(submits(4, 2), then) == 5
        assert seen == [(3, 3, False), (5, 5, False)]
        assert await store.append([], then=then) == 5  # nothing written: nothing to record
        with pytest.raises(TypeError):
            await store.append([object()], then=then)  # type: ignore[list-item]
        assert len(seen) == 2


@hang_guard
async def test_a_fenced_batch_on_postgresql_runs_no_then(pg_dsn):
    seen: list[int] = []
    async with await PgFactStore.open(pg_dsn, holder="ws://a:7420", lease=60) as a:
        assert await a.try_lead() is not None
        await a.append(submits(1, 1), then=seen.append)
        await Backend("postgres", None, pg_dsn).raw("UPDATE leader SET epoch = epoch + 1")  # a takeover
        with pytest.raises(Deposed):
            await a.append(submits(2, 1), then=seen.append)
    assert seen == [1]
