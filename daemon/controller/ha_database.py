"""A standby controller whose database fails: say so once, retry with a capped backoff, go on.

A standby holds nothing the others need (no lease, no lock), so losing its
database connection is no reason to stop: it keeps answering "not the leader"
with the leader it last read, and reconnects.  The log says
``lost the database at URL: REASON: retrying`` once when the condition
begins (``the database at URL failed: REASON: retrying`` for a statement that
failed on a live connection, a lock timeout say), ``the database at URL is
back after N s`` once when it answers again, and each failed
attempt in between only at debug level (``-v``).  A *leader* that loses its
database steps down instead (daemon/controller/leadership.py: its lock and
lease went with the connection).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from reckon.daemon.store.postgres import DatabaseFailed, DatabaseLost
from reckon.daemon.store.sqlite_thread import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from reckon.daemon.controller.ha_metrics import HaMetrics
    from reckon.daemon.store.postgres import PgFactStore

log = logging.getLogger("reckon.controller")

RETRY_CAP = 5.0  # seconds between a standby's attempts to reach its database, at most


class StandbyDatabase:
    def __init__(self, store: "PgFactStore", metrics: "HaMetrics", *, first_retry: float, cap: float) -> None:
        self.store = store
        self.metrics = metrics
        self.first_retry = first_retry
        self.cap = max(cap, first_retry)
        self._condition: str | None = None  # what the log last said is wrong (None: nothing)
        self._since = 0.0  # trio time the condition began
        self._delay = first_retry  # before the next attempt; doubles up to cap while failures go on

    async def failed(self, failure: DatabaseFailed) -> None:
        """A poll failed in the database: wait (reconnecting if the connection broke), then return
        for the caller to poll again."""
        self.metrics.database(False)
        condition = "lost" if isinstance(failure, DatabaseLost) else "failed"
        if condition != self._condition:
            if self._condition is None:
                self._since = trio.current_time()
            self._condition = condition
            if isinstance(failure, DatabaseLost):
                log.warning("lost the database at %s: %s: retrying", failure.where, failure.reason)
            else:
                log.warning("%s: retrying", failure)
        else:
            log.debug("still: %s (next try in %gs)", failure, self._delay)
        while True:
            await trio.sleep(self._delay)
            self._delay = min(self._delay * 2, self.cap)
            if not self.store.db.broken:
                return
            try:
                await self.store.db.reconnect()
                return
            except StoreError as exc:
                log.debug("still no database: %s (next try in %gs)", exc, self._delay)

    def answered(self) -> None:
        """The database answered a poll's first statement."""
        self._delay = self.first_retry
        if self._condition is not None:
            log.warning("the database at %s is back after %.1fs", self.store.where, trio.current_time() - self._since)
            self._condition = None
            self.metrics.database(True)
