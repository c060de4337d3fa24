"""The controller's fact log in SQLite: an append-only table of facts plus one snapshot.

One implementation of ``daemon.store.interface.ControllerStore`` (the embedded
default); ``daemon.store.postgres`` is the other.

A fact is stored as the CBOR of ``model.facts.encode(fact)``, one row per
fact, numbered by ``seq`` (1, 2, 3, ... with no gaps: a gap means lost facts
and is reported, never skipped).  A snapshot is the CBOR of the map
``model.state.snapshot()`` produced and covers every fact with
``seq <= upto_seq``; restart = restore(snapshot) + replay(facts after it), so
with pruning on (the default) restart time does not grow with history.

Every database call runs on the store's own thread (``SqliteThread``); the
CBOR work of a load or a snapshot runs there too, off the event loop.
"""

from __future__ import annotations

import os
import sqlite3
from itertools import count
from pathlib import Path
from typing import Any, Callable, Sequence

import cbor2

from reckon.model import facts as F

from reckon.daemon import runtime
from reckon.daemon.store.interface import StoreKind
from reckon.daemon.store.sqlite_thread import RowStatement, SqliteThread, StoreError, transaction

SCHEMA_VERSION = 1
_SCHEMA = (
    "CREATE TABLE fact (seq INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE snapshot (upto_seq INTEGER PRIMARY KEY, data BLOB NOT NULL)",
)
_FACT_TYPES = tuple(F.FACT_TYPES.values())
_INSERT_FACTS = RowStatement("INSERT INTO fact (seq, data) VALUES ", "(?, ?)")


class FactStore:
    def __init__(self, db: SqliteThread, *, prune: bool, last_seq: int, snapshot_seq: int) -> None:
        self.db = db  # public for inspection (tests, diagnostics); use only through db.run
        self.prune = prune
        self._last_seq = last_seq
        self._snapshot_seq = snapshot_seq

    @classmethod
    async def open(cls, state_dir: Path, *, prune: bool = True) -> "FactStore":
        """Open (creating if needed) ``state_dir/controller.db``.

        ``prune``: a snapshot deletes the facts it covers (default).  Off keeps
        the whole history (an audit trail); old snapshots go either way.
        """
        db = await SqliteThread.open(Path(state_dir) / "controller.db", name="reckon-sqlite-controller",
                                     version=SCHEMA_VERSION, ddl=_SCHEMA)
        try:
            last_seq, snapshot_seq = await db.run(_positions)
        except BaseException:
            await db.aclose()
            raise
        return cls(db, prune=prune, last_seq=last_seq, snapshot_seq=snapshot_seq)

    @property
    def kind(self) -> StoreKind:
        return "sqlite"

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def where(self) -> str:
        return str(self.db.path)

    def disk_bytes(self) -> int | None:
        """The size of ``controller.db`` (0 while it cannot be read)."""
        try:
            return os.stat(self.db.path).st_size
        except OSError:
            return 0

    @property
    def facts_since_snapshot(self) -> int:
        """Facts a restart would replay: the controller snapshots when this grows large."""
        return self._last_seq - self._snapshot_seq

    async def load(self) -> tuple[dict[str, Any] | None, list[F.Fact], int]:
        """(latest snapshot or None, the facts after it in order, the last seq)."""
        snapshot, facts, snapshot_seq, last_seq = await self.db.run(_load, self.db.path)
        self._last_seq, self._snapshot_seq = max(self._last_seq, last_seq), max(self._snapshot_seq, snapshot_seq)
        return snapshot, facts, last_seq

    async def append(self, facts: Sequence[F.Fact], then: Callable[[int], None] | None = None) -> int:
        """Append the batch in one transaction, durable on return; the new last seq.

        ``then(last_seq)`` runs on the database thread once the transaction is
        durable, before this returns (the controller records the log's position
        in its id mark file there: daemon/controller/startup.py)."""
        rows = []
        for fact in facts:  # check and encode everything before any write
            if not isinstance(fact, _FACT_TYPES):
                raise TypeError(f"not a fact: {type(fact).__name__}")
            rows.append(cbor2.dumps(F.encode(fact)))
        if rows:
            last = await self.db.run(_append, rows, then)
            self._last_seq = max(self._last_seq, last)  # max: concurrent callers resume in any order
        return self._last_seq

    async def write_snapshot(self, snapshot: dict[str, Any], upto_seq: int) -> None:
        """Store a snapshot covering facts ``seq <= upto_seq``; drop older snapshots (and, pruning, those facts)."""
        if not isinstance(snapshot, dict):
            raise TypeError("a snapshot is the map model.state.snapshot() returns")
        if not isinstance(upto_seq, int) or isinstance(upto_seq, bool):
            raise TypeError("upto_seq must be an int")
        await self.db.run(_write_snapshot, snapshot, upto_seq, self.prune)
        self._snapshot_seq = max(self._snapshot_seq, upto_seq)
        if self.prune:
            # The pruned facts' pages would stay in the file (SQLite reuses, never
            # returns them): compact it so controller.db does not keep its largest size.
            await self.db.run(_compact)

    async def facts_about(self, job: str) -> list[F.Fact]:
        """The facts still in the log that name ``job``, in order (decoded on the store's thread)."""
        return await self.db.run(_facts_about, job, self.db.path)

    async def aclose(self) -> None:
        await self.db.aclose()

    async def __aenter__(self) -> "FactStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ---- on the database thread ------------------------------------------------------


def _positions(conn: sqlite3.Connection) -> tuple[int, int]:
    """(last seq, snapshot seq) as the database says: the only source of truth."""
    fact_seq, snap_seq = conn.execute(
        "SELECT ifnull((SELECT max(seq) FROM fact), 0), ifnull((SELECT max(upto_seq) FROM snapshot), 0)"
    ).fetchone()
    return max(fact_seq, snap_seq), snap_seq


def _append(conn: sqlite3.Connection, rows: list[bytes], then: Callable[[int], None] | None) -> int:
    with transaction(conn):
        last, _ = _positions(conn)
        _INSERT_FACTS.run(conn, list(zip(count(last + 1), rows)))
    if then is not None:
        then(last + len(rows))
    return last + len(rows)


def _write_snapshot(conn: sqlite3.Connection, snapshot: dict[str, Any], upto_seq: int, prune: bool) -> None:
    blob = cbor2.dumps(snapshot)  # here, not on the event loop: a big table takes a while
    with transaction(conn):
        last, current = _positions(conn)
        if not current <= upto_seq <= last:
            raise ValueError(f"a snapshot up to seq {upto_seq} must lie between the current one ({current}) "
                             f"and the last fact ({last})")
        conn.execute("INSERT OR REPLACE INTO snapshot (upto_seq, data) VALUES (?, ?)", (upto_seq, blob))
        conn.execute("DELETE FROM snapshot WHERE upto_seq < ?", (upto_seq,))
        if prune:
            conn.execute("DELETE FROM fact WHERE seq <= ?", (upto_seq,))


def _compact(conn: sqlite3.Connection) -> None:
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _facts_about(conn: sqlite3.Connection, job: str, path: Path) -> list[F.Fact]:
    with transaction(conn, write=False):
        first = conn.execute("SELECT ifnull(min(seq), 1) FROM fact").fetchone()[0]
        facts = decode_facts(conn.execute("SELECT seq, data FROM fact ORDER BY seq"), first, path)
    return [f for f in facts if getattr(f, "job", None) == job]


def _load(conn: sqlite3.Connection, path: Path) -> tuple[dict[str, Any] | None, list[F.Fact], int, int]:
    with transaction(conn, write=False), runtime.gc_paused():  # one read view: snapshot and facts agree
        row = conn.execute("SELECT upto_seq, data FROM snapshot ORDER BY upto_seq DESC LIMIT 1").fetchone()
        snapshot, snap_seq = None, 0
        if row is not None:
            snap_seq = row[0]
            try:
                snapshot = cbor2.loads(row[1])
            except Exception as exc:
                raise StoreError(f"{path}: the snapshot up to seq {snap_seq} cannot be decoded: {exc}") from exc
            if not isinstance(snapshot, dict):
                raise StoreError(f"{path}: the snapshot up to seq {snap_seq} is not a map")
        facts = decode_facts(conn.execute("SELECT seq, data FROM fact WHERE seq > ? ORDER BY seq", (snap_seq,)),
                              snap_seq + 1, path)
        last, _ = _positions(conn)
    return snapshot, facts, snap_seq, last




def decode_facts(rows: Any, first: int, path: Path | str) -> list[F.Fact]:
    """Decode in one tight loop; any bad row stops the load, naming its seq."""
    out: list[F.Fact] = []
    add, loads, decode = out.append, cbor2.loads, F.decode
    expected = first
    seq = None
    try:
        for seq, blob in rows:
            if seq != expected:
                raise StoreError(f"{path}: facts {expected}..{seq - 1} are missing")
            add(decode(loads(blob)))
            expected += 1
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"{path}: fact seq {seq} cannot be decoded: {exc}") from exc
    return out
