"""One dedicated OS thread per SQLite database, and the helpers both stores share.

Why a thread of our own: every commit with ``synchronous=FULL`` waits for
fsync, so SQLite calls must not run on the Trio thread; and a connection that
is created on and used from exactly one thread needs no locking (we keep
``check_same_thread`` on, so a slip is an error, not a race).
``trio.to_thread`` does not promise the same thread twice, hence this class.

Cancellation: a job that has not started when its caller is cancelled is
dropped and the caller gets ``Cancelled`` (nothing happened).  A job that has
started is never interrupted: the caller keeps waiting, uncancellably, and
gets its result, and Trio delivers the cancellation at the caller's next
checkpoint.  So a return always means "ran to completion" and ``Cancelled``
always means "never started": a commit is fully done or not begun, and the
caller knows which.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import outcome
import trio

from reckon.daemon.store.filemodes import private_dir, private_file

T = TypeVar("T")

_PENDING, _STARTED, _DROPPED = "pending", "started", "dropped"


class StoreError(Exception):
    """The database cannot be used as it is: corrupt, foreign or too new.  Never skipped."""


class _Job:
    __slots__ = ("fn", "args", "task", "token", "state")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.task = trio.lowlevel.current_task()
        self.token = trio.lowlevel.current_trio_token()
        self.state = _PENDING


class SqliteThread:
    """Owns one connection and the one thread that ever touches it."""

    def __init__(self, path: Path, *, name: str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None  # only ever touched on the thread
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _Job.state between the thread and abort()
        self._closing = False
        # daemon=True: a process that exits without aclose() must not hang; a
        # commit cut off that way is rolled back by SQLite on the next open.
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @classmethod
    async def open(cls, path: Path, *, name: str, version: int, ddl: Sequence[str],
                   migrations: Mapping[int, Sequence[str]] | None = None) -> "SqliteThread":
        """Open (creating if needed) a database with schema ``ddl`` at ``user_version`` ``version``.

        ``migrations[k]``: the statements that bring a version ``k`` database to
        ``k + 1``; an older database is upgraded in one transaction when opened.
        """
        db = cls(path, name=name)
        try:
            await db._call(db._connect, version, ddl, migrations or {})
        except BaseException:
            with trio.CancelScope(shield=True):
                await db.aclose()
            raise
        return db

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(connection, *args)`` on the database thread and return its result."""
        return await self._call(self._with_conn, fn, args)

    async def aclose(self) -> None:
        """Finish the queued jobs, close the connection, end the thread."""
        if self._closing:
            return
        with trio.CancelScope(shield=True):  # a half-closed database helps nobody
            self._closing = True  # later run() calls fail; jobs already queued still run first
            try:
                await self._submit(self._close_conn)
            finally:
                self._jobs.put(None)
                await trio.to_thread.run_sync(self._thread.join)

    # ---- the trio side -----------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closing:
            raise trio.ClosedResourceError(f"{self.path} is closed")
        return await self._submit(fn, *args)

    async def _submit(self, fn: Callable[..., T], *args: Any) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(fn, args)
        self._jobs.put(job)

        def abort(_: Any) -> trio.lowlevel.Abort:
            with self._lock:
                if job.state is _PENDING:
                    job.state = _DROPPED  # the thread will skip it
                    return trio.lowlevel.Abort.SUCCEEDED
            return trio.lowlevel.Abort.FAILED  # started: we get rescheduled when it is done

        return await trio.lowlevel.wait_task_rescheduled(abort)

    # ---- the thread --------------------------------------------------------

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                if job.state is _DROPPED:
                    continue
                job.state = _STARTED
            result = outcome.capture(job.fn, *job.args)
            try:
                job.token.run_sync_soon(trio.lowlevel.reschedule, job.task, result)
            except Exception:  # RunFinishedError and kin: the Trio run that asked is gone
                pass  # (cannot happen while its task waits); the thread must live on for other jobs
            del job, result

    def _with_conn(self, fn: Callable[..., T], args: tuple) -> T:
        if self._conn is None:
            raise trio.ClosedResourceError(f"{self.path} is not open")
        return fn(self._conn, *args)

    def _connect(self, version: int, ddl: Sequence[str], migrations: Mapping[int, Sequence[str]]) -> None:
        private_dir(self.path.parent)
        created = not self.path.exists()
        private_file(self.path)  # 0600 before SQLite opens it: its -wal and -shm files take this mode
        # isolation_level=None: no implicit transactions; ``transaction`` says BEGIN/COMMIT.
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA synchronous = FULL")  # every COMMIT is on disk when it returns
            # The schema check comes before WAL: a file we refuse is left as it was.
            _ensure_schema(conn, self.path, version, ddl, migrations)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot use WAL journal mode (got {mode!r})")
            conn.execute("PRAGMA journal_size_limit = 67108864")  # don't keep a huge WAL after a checkpoint
        except BaseException:
            conn.close()
            raise
        if created:  # the new file's directory entry must survive a crash too (SQLite does this for the WAL)
            _fsync_dir(self.path.parent)
        self._conn = conn

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class RowStatement:
    """One statement for many rows: ``head`` + ``row``, ``row``, ... + ``tail``.

    Why not ``executemany``: CPython's sqlite3 lets go of the GIL around every
    statement step, and while the event loop on the main thread is busy each
    step then waits up to a switch interval to get it back.  ``executemany``
    steps once per row: 100k fact rows took 233 s against a busy main thread,
    0.17 s against an idle one (``docs/performance.md``).  Here a whole chunk
    of rows (as many as SQLite's variable limit allows) is one step.
    """

    head: str
    row: str
    tail: str = ""

    def run(self, conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
        per_row = self.row.count("?")
        chunk = max(1, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // per_row)
        for i in range(0, len(rows), chunk):
            part = rows[i:i + chunk]
            sql = f"{self.head}{', '.join([self.row] * len(part))}{self.tail}"
            conn.execute(sql, [value for row in part for value in row])


@contextmanager
def transaction(conn: sqlite3.Connection, *, write: bool = True) -> Iterator[None]:
    """One explicit transaction: committed on success, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT may or may not have ended it
            conn.execute("ROLLBACK")
        raise


def _ensure_schema(conn: sqlite3.Connection, path: Path, version: int, ddl: Sequence[str],
                   migrations: Mapping[int, Sequence[str]]) -> None:
    """Create the schema in a new database, accept ours, upgrade an older one we
    have migrations for, refuse anything else clearly."""
    with transaction(conn):
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        if current == version:
            return
        if current > version:
            raise StoreError(
                f"{path} has schema version {current}, newer than this reckon understands ({version}); "
                "refusing to open it: run a newer reckon"
            )
        if 0 < current < version and all(v in migrations for v in range(current, version)):
            for step in range(current, version):
                for statement in migrations[step]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {int(version)}")  # part of this transaction
            return
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if current != 0 or tables:
            raise StoreError(f"{path} has schema version {current} and is not a database this reckon can use")
        for statement in ddl:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {int(version)}")  # part of this transaction
