"""A standby's ear on the fact log: LISTEN for the leader's commits (PostgreSQL store).

Every commit of facts or a snapshot NOTIFYs ``NOTIFY_CHANNEL`` in its own
transaction (daemon/store/postgres.py).  A standby LISTENs on a connection of
its own and reads the tail as soon as a notice arrives, so taking over replays
almost nothing; polling (every ``lease / 5``) stays as the fallback for a
notice missed or a connection dropped: then the listener closes, says so once,
and is opened again at a later poll.

The connection is only read when its socket is readable (trio waits on it), so
no thread is held while nothing happens; connecting runs on a worker thread.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from reckon.daemon.store.postgres import NOTIFY_CHANNEL, redacted

log = logging.getLogger("reckon.controller")


class FactListener:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: Any = None
        self._broken: str | None = None  # why the last connection failed, as logged (once per condition)

    async def open(self) -> bool:
        """(Re)connect and LISTEN if not listening; whether it listens now."""
        if self._conn is not None:
            return True
        try:
            self._conn = await trio.to_thread.run_sync(self._connect)
        except Exception as exc:
            self._failed(f"cannot listen for commits on {redacted(self.dsn)}: {exc}".strip())
            return False
        if self._broken is not None:
            log.info("listening for commits again (%s)", redacted(self.dsn))
            self._broken = None
        return True

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, application_name="reckon-standby", connect_timeout=10)
        try:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _failed(self, reason: str) -> None:
        if self._broken is None:
            log.warning("%s; following the log by polling meanwhile", reason)
        self._broken = reason
        self.close()

    async def wait_until(self, deadline: float) -> bool:
        """True as soon as a commit was notified, False at ``deadline`` (trio time) without one, or
        once it has passed (so that a stream of commits cannot hold off the caller's poll)."""
        if trio.current_time() >= deadline:
            return False
        with trio.move_on_after(max(0.0, deadline - trio.current_time())):
            while self._conn is not None:
                try:
                    # Non-blocking: what has arrived (psycopg reads the socket without waiting).
                    if any(n.channel == NOTIFY_CHANNEL for n in self._conn.notifies(timeout=0)):
                        return True
                    await trio.lowlevel.wait_readable(self._conn.fileno())
                except Exception as exc:  # the connection dropped: poll until it is back
                    self._failed(f"lost the connection that listens for commits: {exc}".strip())
            await trio.sleep_until(deadline)
        return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                trio.lowlevel.notify_closing(conn.fileno())  # (no task waits on it here: to be safe)
            except Exception:
                pass  # outside trio, or the socket is gone already
            try:
                conn.close()
            except Exception:
                pass  # a dead connection: nothing left to close
