"""Helpers the fact-store, agent-store and PostgreSQL tests share."""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path

import trio

from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.interface import ControllerStore
from reckon.daemon.store.postgres import PgFactStore, redacted
from reckon.model import facts as F
from reckon.model.jobs import JobSpec


def hang_guard(fn):
    """Fail a test that hangs instead of blocking the run."""

    @functools.wraps(fn)
    async def guarded(*args, **kwargs):
        with trio.fail_after(60):
            return await fn(*args, **kwargs)

    return guarded


def submits(first: int, n: int) -> list[F.Fact]:
    spec = JobSpec(name="s", command=("true",))
    return [F.JobSubmitted(job=str(i), spec=spec, submitted_at=float(i)) for i in range(first, first + n)]


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


async def append_in_batches(store: ControllerStore, facts: list[F.Fact], size: int) -> None:
    for i in range(0, len(facts), size):
        await store.append(facts[i:i + size])


def _raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Tamper with or inspect a SQLite database from outside the store."""
    return await trio.to_thread.run_sync(_raw, path, sql, params)


class Backend:
    """One fact store implementation for the tests every store must pass: open it, tamper with it."""

    def __init__(self, kind: str, tmp_path: Path, dsn: str | None) -> None:
        self.kind, self.tmp_path, self.dsn = kind, tmp_path, dsn
        self.name = r"controller\.db" if kind == "sqlite" else re.escape(redacted(dsn))

    async def open(self, *, prune: bool = True) -> ControllerStore:
        if self.kind == "sqlite":
            return await FactStore.open(self.tmp_path, prune=prune)
        store = await PgFactStore.open(self.dsn, prune=prune, holder="test")
        assert await store.try_lead() is not None  # the last store that led here is closed: gone
        return store

    async def raw(self, sql: str, params: tuple = ()) -> list[tuple]:
        """A statement on a connection of its own, off the event loop."""
        return await trio.to_thread.run_sync(self.raw_now, sql, params)

    def raw_now(self, sql: str, params: tuple = ()) -> list[tuple]:
        """The same, blocking (from a store's thread, say)."""
        if self.kind == "sqlite":
            return _raw(self.tmp_path / "controller.db", sql, params)
        return _raw_pg(self.dsn, sql.replace("?", "%s"), params)


def _raw_pg(dsn: str, sql: str, params: tuple) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []
