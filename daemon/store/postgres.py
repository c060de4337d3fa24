"""The controller's fact log in PostgreSQL, and leadership fenced by an epoch.

The same contract as the SQLite store (``daemon.store.interface``), with the
same tables (``fact``, ``snapshot``) and one more, ``leader``: a single row
holding the current **epoch**, its holder's advertised URL and its lease's end
on the database's clock (``now()``; the hosts' clocks play no part).

* Any number of controllers open one database; the one whose ``try_lead``
  bumped the epoch leads.  Only the leader can append: every append is ONE
  statement that locks the leader row ``FOR SHARE`` and inserts nothing unless
  the row still names its epoch.  A takeover updates that row (``FOR UPDATE``),
  so the two serialize: a deposed leader's batch either committed before the
  new epoch began or not at all (``Deposed``), and no fact of an old epoch
  ever follows the first fact of a newer one (each row records its epoch).
* A takeover is allowed when the lease has expired, or at once when the
  holder's database session is gone: the leader of epoch E holds the session
  advisory lock (KEY, E) for as long as its connection lives, so a standby that
  can take that lock knows the old leader's process (or connection) is dead.
* The leader renews its lease (``renew``) well before it ends; see
  ``daemon.controller.leadership`` for when it stops releasing effects.

One statement per append also means no transaction is ever left open across
a client pause: a frozen (SIGSTOPped) leader holds no row lock that would keep
a standby from taking over.  The few multi-statement transactions (snapshot,
takeover, schema) are bounded by ``idle_in_transaction_session_timeout``.

All database work runs on the store's own thread, as in the SQLite store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import cbor2
import trio

from reckon.model import facts as F

from reckon.daemon import runtime
from reckon.daemon.store.facts import decode_facts
from reckon.daemon.store.interface import StoreKind
from reckon.daemon.store.sqlite_thread import SqliteThread, StoreError

SCHEMA_VERSION = 1
LOCK_KEY = 0x7265636B  # "reck": the first half of every advisory lock key this store takes
_SCHEMA = (
    "CREATE TABLE reckon_schema (version integer NOT NULL)",
    "CREATE TABLE fact (seq bigint PRIMARY KEY, epoch bigint NOT NULL, data bytea NOT NULL)",
    "CREATE TABLE snapshot (upto_seq bigint PRIMARY KEY, data bytea NOT NULL)",
    # One row: epoch 0 means no controller has led yet.
    "CREATE TABLE leader (id integer PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL, holder text NOT NULL, "
    "expires_at timestamptz NOT NULL)",
    "INSERT INTO leader VALUES (1, 0, '', '-infinity')",
)
_FACT_TYPES = tuple(F.FACT_TYPES.values())
_POSITIONS = ("SELECT greatest(coalesce((SELECT max(seq) FROM fact), 0), coalesce((SELECT max(upto_seq) FROM "
              "snapshot), 0)), coalesce((SELECT max(upto_seq) FROM snapshot), 0)")
NOTIFY_CHANNEL = "reckon_fact"  # NOTIFYed with the last seq by every commit of facts or a snapshot
# The fenced append: the leader row (locked FOR SHARE) must still name our epoch, or nothing is inserted.
# A batch that is inserted also NOTIFYs the standbys (daemon/store/pglisten.py), in the same statement:
# the notice goes out exactly when the batch commits, and never for a batch the fence refused (no row).
_APPEND = f"""
WITH fence AS (SELECT epoch FROM leader WHERE id = 1 AND epoch = %(epoch)s FOR SHARE),
     base AS (SELECT greatest(coalesce((SELECT max(seq) FROM fact), 0),
                              coalesce((SELECT max(upto_seq) FROM snapshot), 0)) AS last),
     inserted AS (INSERT INTO fact (seq, epoch, data)
                  SELECT base.last + t.ord, fence.epoch, t.data
                  FROM fence, base, unnest(%(rows)s::bytea[]) WITH ORDINALITY AS t(data, ord)
                  RETURNING seq)
SELECT max(seq), pg_notify('{NOTIFY_CHANNEL}', max(seq)::text) FROM inserted HAVING count(*) > 0
"""


class Deposed(Exception):
    """This store's epoch is over (or it never led): it may not commit."""


class DatabaseFailed(StoreError):
    """The database server or the connection to it failed a statement (not the data, not our code):
    a one-line reason.  A leader steps down on it; a standby retries (daemon/controller/ha_database.py)."""


class DatabaseLost(DatabaseFailed):
    """The connection to the database broke (server down or restarted, network cut): a one-line reason.
    A leader steps down on it (daemon/controller/ha.py); a standby reconnects (``PgThread.reconnect``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"the connection to {where} broke: {reason}")
        self.where = where
        self.reason = reason


def one_line(exc: BaseException) -> str:
    """psycopg's (libpq's) messages span lines ("...\n\tIs the server running ...?"): one line of it."""
    return " ".join(str(exc).split()) or type(exc).__name__


class PgThread(SqliteThread):
    """The SQLite store's one-thread machinery around a psycopg connection."""

    def __init__(self, dsn: str, *, name: str) -> None:
        super().__init__(Path("."), name=name)
        self.dsn = dsn
        self.path = redacted(dsn)  # type: ignore[assignment]  # only ever shown in messages
        self._idle_timeout = 5.0  # idle_in_transaction_session_timeout of every connection (open_pg sets it)

    @classmethod
    async def open_pg(cls, dsn: str, *, name: str, idle_timeout: float) -> "PgThread":
        db = cls(dsn, name=name)
        db._idle_timeout = idle_timeout
        try:
            await db._call(db._pg_connect, idle_timeout)
        except BaseException:
            await db.aclose()
            raise
        return db

    async def run(self, fn: Any, *args: Any) -> Any:
        """As ``SqliteThread.run``; a connection that broke raises ``DatabaseLost`` (one line), and
        any other failure of the server or the connection a one-line ``DatabaseFailed``."""
        import psycopg

        try:
            return await super().run(fn, *args)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if self.broken:
                raise DatabaseLost(str(self.path), one_line(exc)) from exc
            raise DatabaseFailed(f"the database at {self.path} failed: {one_line(exc)}") from exc

    @property
    def broken(self) -> bool:
        """The connection is gone (read from the trio side: psycopg sets these flags, never unsets them)."""
        conn = self._conn
        return conn is None or bool(getattr(conn, "broken", False)) or bool(getattr(conn, "closed", False))

    async def reconnect(self) -> None:
        """Replace a broken connection with a new one; ``StoreError`` (one line) while that fails
        (``cannot connect to ...``, or the schema check's refusal)."""
        await self._call(self._reconnect)

    def _reconnect(self) -> None:
        old, self._conn = self._conn, None
        if old is not None:
            try:
                old.close()
            except Exception:  # a broken connection may fail to close: it is dropped all the same
                pass
        self._pg_connect(self._idle_timeout)

    def _pg_connect(self, idle_timeout: float) -> None:
        import psycopg

        try:
            conn = psycopg.connect(self.dsn, autocommit=True, application_name="reckon-controller",
                                   connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.path}: {one_line(exc)}") from exc
        try:
            ms = max(1000, int(idle_timeout * 1000))
            conn.execute(f"SET idle_in_transaction_session_timeout = {ms}")
            _ensure_schema(conn, self.path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn  # type: ignore[assignment]


def redacted(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(dsn)
    except Exception:
        return "postgresql://(unparsable url)"
    return "postgresql://{}@{}/{}".format(info.get("user", ""), info.get("host", ""), info.get("dbname", ""))


class PgFactStore:
    """A controller's view of the shared fact log; a leader when ``try_lead`` said so."""

    def __init__(self, db: PgThread, *, prune: bool, holder: str, lease: float, last_seq: int,
                 snapshot_seq: int) -> None:
        self.db = db
        self.prune = prune
        self.holder = holder  # the URL agents and clients are sent to while this store leads
        self.lease = lease
        self.epoch: int | None = None  # set by try_lead; None: a standby
        self._last_seq = last_seq
        self._snapshot_seq = snapshot_seq

    @classmethod
    async def open(cls, dsn: str, *, prune: bool = True, holder: str = "", lease: float = 5.0) -> "PgFactStore":
        if not lease > 0:
            raise ValueError("the lease must be positive")
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise StoreError("the PostgreSQL store needs psycopg: pip install 'reckond[postgres]'") from exc
        db = await PgThread.open_pg(dsn, name="reckon-postgres-controller", idle_timeout=lease / 2)
        try:
            last_seq, snapshot_seq = await db.run(_positions)
        except BaseException:
            await db.aclose()
            raise
        return cls(db, prune=prune, holder=holder, lease=lease, last_seq=last_seq, snapshot_seq=snapshot_seq)

    @property
    def kind(self) -> StoreKind:
        return "postgresql"

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def facts_since_snapshot(self) -> int:
        return self._last_seq - self._snapshot_seq

    @property
    def where(self) -> str:
        return str(self.db.path)

    def disk_bytes(self) -> int | None:
        return None  # no file of ours: the database's own size is its operator's to watch

    # ---- the fact log ---------------------------------------------------------------

    async def load(self) -> tuple[dict[str, Any] | None, list[F.Fact], int]:
        snapshot, facts, snapshot_seq, last_seq = await self.db.run(_load, self.where, 0)
        self._last_seq, self._snapshot_seq = max(self._last_seq, last_seq), max(self._snapshot_seq, snapshot_seq)
        return snapshot, facts, last_seq

    async def follow(self, after_seq: int) -> tuple[dict[str, Any] | None, list[F.Fact], int]:
        """What a standby lacks after ``after_seq``: (None, the facts after it, last seq), or, when a
        snapshot has pruned facts it never saw, (that snapshot, the facts after it, last seq)."""
        snapshot, facts, snapshot_seq, last_seq = await self.db.run(_load, self.where, after_seq)
        self._last_seq, self._snapshot_seq = max(self._last_seq, last_seq), max(self._snapshot_seq, snapshot_seq)
        return snapshot, facts, last_seq

    async def append(self, facts: Sequence[F.Fact], then: Callable[[int], None] | None = None) -> int:
        """As the SQLite store's: one fenced statement (``Deposed`` if the epoch is over, and then
        nothing was written); ``then(last_seq)`` runs on the store's thread after the commit."""
        rows = []
        for fact in facts:  # check and encode everything before any write
            if not isinstance(fact, _FACT_TYPES):
                raise TypeError(f"not a fact: {type(fact).__name__}")
            rows.append(cbor2.dumps(F.encode(fact)))
        if rows:
            last = await self.db.run(_append, rows, self._require_epoch(), then)
            self._last_seq = max(self._last_seq, last)
        return self._last_seq

    async def write_snapshot(self, snapshot: dict[str, Any], upto_seq: int) -> None:
        if not isinstance(snapshot, dict):
            raise TypeError("a snapshot is the map model.state.snapshot() returns")
        if not isinstance(upto_seq, int) or isinstance(upto_seq, bool):
            raise TypeError("upto_seq must be an int")
        await self.db.run(_write_snapshot, snapshot, upto_seq, self.prune, self._require_epoch())
        self._snapshot_seq = max(self._snapshot_seq, upto_seq)

    async def log_head(self) -> int:
        """The log's last seq as the database says now (a standby's metrics: how far behind it is)."""
        return (await self.db.run(_positions))[0]

    async def facts_about(self, job: str) -> list[F.Fact]:
        """The facts still in the log that name ``job``, in order (one consistent read, decoded on
        the store's thread).  A standby may read too: it writes nothing."""
        return await self.db.run(_facts_about, job, self.where)

    def _require_epoch(self) -> int:
        if self.epoch is None:
            raise Deposed(f"{self.where}: this controller does not lead, so it may not write facts")
        return self.epoch

    # ---- leadership -------------------------------------------------------------------

    async def try_lead(self) -> str | None:
        """Take the next epoch if the current one is free; why it was free (None: it is not)."""
        taken = await self.db.run(_try_lead, self.holder, self.lease, self.epoch)
        if taken is None:
            return None
        self.epoch, reason = taken
        return reason

    async def renew(self) -> None:
        """Extend the lease from the database's now(); ``Deposed`` if the epoch is no longer ours."""
        epoch = self._require_epoch()
        if not await self.db.run(_renew, epoch, self.lease):
            current = await self.leader()
            self.epoch = None
            raise Deposed(f"epoch {epoch} is over: epoch {current[0]} is led by {current[1] or '?'}")

    async def leader(self) -> tuple[int, str, bool]:
        """(current epoch, its holder's URL, whether its lease is still running)."""
        return await self.db.run(_leader)

    async def aclose(self) -> None:
        # Give the leadership lock back now: the server ends a closed session's backend (and
        # frees its advisory locks) a moment later, and a successor's takeover must not race that.
        with trio.CancelScope(shield=True):
            try:
                if not self.db.broken:
                    await self.db.run(lambda conn: conn.execute("SELECT pg_advisory_unlock_all()"))
            except StoreError:
                pass  # the database is away: its session ends with the connection anyway
            finally:
                await self.db.aclose()

    async def __aenter__(self) -> "PgFactStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ---- on the database thread ------------------------------------------------------


def _ensure_schema(conn: Any, where: str) -> None:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_KEY,))  # two controllers creating at once
        if conn.execute("SELECT to_regclass('reckon_schema')").fetchone()[0] is None:
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()[0]
            if tables:
                raise StoreError(f"{where} has tables but no reckon schema: not a database this reckon can use")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO reckon_schema VALUES (%s)", (SCHEMA_VERSION,))
            return
        row = conn.execute("SELECT version FROM reckon_schema").fetchone()
        version = row[0] if row else None
        if version != SCHEMA_VERSION:
            raise StoreError(f"{where} has reckon schema version {version}, this reckon understands "
                             f"{SCHEMA_VERSION}: refusing to use it" +
                             ("; run a newer reckon" if isinstance(version, int) and version > SCHEMA_VERSION else ""))


def _positions(conn: Any) -> tuple[int, int]:
    last, snap = conn.execute(_POSITIONS).fetchone()
    return int(last), int(snap)


def _append(conn: Any, rows: list[bytes], epoch: int, then: Callable[[int], None] | None) -> int:
    row = conn.execute(_APPEND, {"epoch": epoch, "rows": rows}).fetchone()
    if row is None:  # the fence held nothing back but our own epoch: it is over
        epoch_now, holder, _ = _leader(conn)
        raise Deposed(f"epoch {epoch} is over (epoch {epoch_now} is led by {holder or '?'}): "
                      f"{len(rows)} fact(s) not committed")
    last = int(row[0])
    if then is not None:
        then(last)
    return last


def _facts_about(conn: Any, job: str, where: str) -> list[F.Fact]:
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        first = int(conn.execute("SELECT coalesce(min(seq), 1) FROM fact").fetchone()[0])
        cursor = conn.execute("SELECT seq, data FROM fact ORDER BY seq")
        facts = decode_facts(((int(s), bytes(d)) for s, d in cursor), first, where)
    return [f for f in facts if getattr(f, "job", None) == job]


def _write_snapshot(conn: Any, snapshot: dict[str, Any], upto_seq: int, prune: bool, epoch: int) -> None:
    blob = cbor2.dumps(snapshot)
    with conn.transaction():
        if conn.execute("SELECT 1 FROM leader WHERE id = 1 AND epoch = %s FOR SHARE", (epoch,)).fetchone() is None:
            raise Deposed(f"epoch {epoch} is over: the snapshot is not written")
        last, current = _positions(conn)
        if not current <= upto_seq <= last:
            raise ValueError(f"a snapshot up to seq {upto_seq} must lie between the current one ({current}) "
                             f"and the last fact ({last})")
        conn.execute("INSERT INTO snapshot (upto_seq, data) VALUES (%s, %s) "
                     "ON CONFLICT (upto_seq) DO UPDATE SET data = excluded.data", (upto_seq, blob))
        conn.execute("DELETE FROM snapshot WHERE upto_seq < %s", (upto_seq,))
        if prune:
            conn.execute("DELETE FROM fact WHERE seq <= %s", (upto_seq,))
        conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, str(upto_seq)))  # delivered at commit


def _load(conn: Any, where: str, after_seq: int) -> tuple[dict[str, Any] | None, list[F.Fact], int, int]:
    """The snapshot (only if it covers more than ``after_seq``) and the facts after what it and
    ``after_seq`` cover, in one consistent read."""
    with conn.transaction(), runtime.gc_paused():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = conn.execute("SELECT upto_seq, data FROM snapshot ORDER BY upto_seq DESC LIMIT 1").fetchone()
        snapshot, snap_seq = None, 0
        if row is not None:
            snap_seq = int(row[0])
            if snap_seq > after_seq:
                try:
                    snapshot = cbor2.loads(row[1])
                except Exception as exc:
                    raise StoreError(f"{where}: the snapshot up to seq {snap_seq} cannot be decoded: {exc}") from exc
                if not isinstance(snapshot, dict):
                    raise StoreError(f"{where}: the snapshot up to seq {snap_seq} is not a map")
        start = snap_seq if snapshot is not None else max(after_seq, snap_seq)
        cursor = conn.execute("SELECT seq, data FROM fact WHERE seq > %s ORDER BY seq", (start,))
        facts = decode_facts(((int(s), bytes(d)) for s, d in cursor), start + 1, where)
        last, _ = _positions(conn)
    return snapshot, facts, snap_seq, last


def _try_lead(conn: Any, holder: str, lease: float, mine: int | None) -> tuple[int, str] | None:
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '2s'")
        epoch, current, expired = conn.execute(
            "SELECT epoch, holder, expires_at <= now() FROM leader WHERE id = 1 FOR UPDATE").fetchone()
        if epoch == 0:
            reason = "no controller has led this database yet"
        elif expired:
            reason = f"the lease of epoch {epoch} ({current or '?'}) has expired"
        elif epoch != mine and conn.execute("SELECT pg_try_advisory_lock(%s, %s::int)",
                                            (LOCK_KEY, epoch)).fetchone()[0]:
            conn.execute("SELECT pg_advisory_unlock(%s, %s::int)", (LOCK_KEY, epoch))
            reason = f"the leader of epoch {epoch} ({current or '?'}) is gone: its database session ended"
        else:
            return None
        new = epoch + 1
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s::int)", (LOCK_KEY, new)).fetchone()[0]:
            return None  # another controller is taking this very epoch
        try:
            conn.execute("UPDATE leader SET epoch = %s, holder = %s, expires_at = now() + make_interval(secs => %s) "
                         "WHERE id = 1", (new, holder, lease))
        except BaseException:
            conn.execute("SELECT pg_advisory_unlock(%s, %s::int)", (LOCK_KEY, new))
            raise
    return new, reason


def _renew(conn: Any, epoch: int, lease: float) -> bool:
    row = conn.execute("UPDATE leader SET expires_at = now() + make_interval(secs => %s) "
                       "WHERE id = 1 AND epoch = %s RETURNING epoch", (lease, epoch)).fetchone()
    return row is not None


def _leader(conn: Any) -> tuple[int, str, bool]:
    epoch, holder, live = conn.execute("SELECT epoch, holder, expires_at > now() FROM leader WHERE id = 1").fetchone()
    return int(epoch), str(holder), bool(live)
