"""Fresh databases for the benchmarks, on a PostgreSQL server the operator names (``--dsn``).

An installed reckon starts no database server of its own: ``reckon bench failover`` and
``reckon bench throughput --store postgres`` take the ``postgresql://`` URL of a server
(``--dsn``, or ``RECKON_BENCH_DSN``) whose user may create databases.  Each run gets a
database of its own, ``reckon_bench_<pid>_<n>``, dropped when the bench ends.  From a
checkout, ``python -m tests.pgserver --durable -- reckon bench failover`` starts a private
server for it (tests/pgserver.py) and sets ``RECKON_BENCH_DSN``.

Only the standard library at import: the command line's parser reads ``DSN_ENV``/``DSN_HELP``.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from urllib.parse import urlsplit

DSN_ENV = "RECKON_BENCH_DSN"
DSN_HELP = (f"the postgresql:// URL of a PostgreSQL server whose user may create databases: each run gets a "
            f"fresh one, dropped at the end (default ${DSN_ENV}); from a checkout, `python -m tests.pgserver "
            f"--durable -- reckon bench ...` starts a private server and sets it")


class BenchDatabaseError(Exception):
    """The server named cannot give the bench its databases: one line, no password.  ``status``:
    the exit status (2: no usable ``--dsn`` given; 1: the server failed)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class BenchDatabases:
    """``with BenchDatabases(dsn) as dbs: dbs.new_database()`` (a URL); every database made is dropped at the end."""

    def __init__(self, dsn: str | None) -> None:
        if not dsn:
            raise BenchDatabaseError(f"this bench needs a PostgreSQL server: give --dsn postgresql://... "
                                     f"(or set {DSN_ENV}); from a checkout, run it under "
                                     f"`python -m tests.pgserver --durable -- reckon bench ...`", status=2)
        from reckon.daemon.store.interface import is_postgres_url

        if not is_postgres_url(dsn):
            raise BenchDatabaseError(f"--dsn must be a postgresql:// URL (got {dsn.split('://')[0]!r})", status=2)
        self.dsn = dsn
        self._names = itertools.count(1)
        self.made: list[str] = []

    def _connect(self):
        from reckon.daemon.store.postgres import one_line, redacted

        try:
            import psycopg
        except ImportError as exc:
            raise BenchDatabaseError("the PostgreSQL bench needs psycopg: pip install 'reckond[postgres]'") from exc
        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise BenchDatabaseError(f"cannot connect to {redacted(self.dsn)}: {one_line(exc)}") from None

    def new_database(self) -> str:
        """Create a fresh, empty database on the server; its URL (the given one, another database)."""
        import psycopg

        from reckon.daemon.store.postgres import one_line, redacted

        name = f"reckon_bench_{os.getpid()}_{next(self._names)}"
        with self._connect() as conn:
            try:
                conn.execute(f'CREATE DATABASE "{name}"')
            except psycopg.Error as exc:
                raise BenchDatabaseError(f"cannot create a database on {redacted(self.dsn)}: {one_line(exc)}") \
                    from None
        self.made.append(name)
        return urlsplit(self.dsn)._replace(path="/" + name).geturl()

    def server_pids(self) -> list[int]:
        """The server's processes on this machine (backends, writers), for CPU figures; none of a
        server elsewhere. Not the backend serving this query: it exits when the connection closes."""
        with self._connect() as conn:
            pids = [int(row[0]) for row in
                    conn.execute("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()").fetchall()]
        out = []
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"postgres"):
                    out.append(pid)
            except OSError:
                pass  # not here, or gone meanwhile
        return out

    def drop_all(self) -> None:
        """Drop every database this made (the controllers on them are stopped by then)."""
        if not self.made:
            return
        import psycopg

        with self._connect() as conn:
            while self.made:
                name = self.made.pop()
                try:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # PostgreSQL 13+
                except psycopg.errors.SyntaxError:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}"')

    def __enter__(self) -> "BenchDatabases":
        self._connect().close()  # a server that cannot be reached fails now, in one line
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop_all()
