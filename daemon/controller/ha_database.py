"""A standby controller whose database fails: say so once, retry with a capped backoff, go on.

A standby holds nothing the others need (no lease, no lock), so losing its
database connection is no reason to stop: it keeps answering "not the leader"
with the leader it last read, and reconnects.  The log says
``lost the database at URL: REASON: retrying`` once when the condition
begins, ``the database at URL is back after N s`` once when it ends, and each
failed attempt in between only at debug level (``-v``).  A *leader* that loses
its database steps down instead (daemon/controller/leadership.py: its lock
and lease went with the connection).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from daemon.store.postgres import DatabaseLost
from daemon.store.sqlite_thread import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from daemon.controller.ha_metrics import HaMetrics
    from daemon.store.postgres import PgFactStore  # noqa: F401

log = logging.getLogger("reckon.controller")

RETRY_CAP = 5.0  # seconds between a standby's attempts to reach its database, at most


class StandbyDatabase:
    def __init__(self, store: "PgFactStore", metrics: "HaMetrics", *, first_retry: float, cap: float) -> None:
        self.store = store
        self.metrics = metrics
        self.first_retry = first_retry
        self.cap = max(cap, first_retry)

    async def recover(self, failure: StoreError) -> None:
        """``failure`` came from the database: return once it answers again (reconnected if need be)."""
        self.metrics.database(False)
        if isinstance(failure, DatabaseLost):
            log.warning("lost the database at %s: %s: retrying", failure.where, failure.reason)
        else:  # the connection lives but the database failed a statement (a lock timeout, say)
            log.warning("%s: retrying", failure)
        lost_at = trio.current_time()
        delay = self.first_retry
        while True:
            await trio.sleep(delay)
            if not self.store.db.broken:
                break  # the connection lives (a lock timeout, a statement cancelled): the next poll retries
            try:
                await self.store.db.reconnect()
                break
            except StoreError as exc:
                delay = min(delay * 2, self.cap)
                log.debug("still no database: %s (next try in %gs)", exc, delay)
        log.warning("the database at %s is back after %.1fs", self.store.where, trio.current_time() - lost_at)
        self.metrics.database(True)
