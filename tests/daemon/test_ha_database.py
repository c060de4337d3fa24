"""A standby whose database fails (daemon/controller/ha_database.py): logged once per condition,
retried with a capped backoff, reconnected when the connection broke (trio's autojump clock)."""

from __future__ import annotations

import logging

from reckon.daemon.controller.ha_database import StandbyDatabase
from reckon.daemon.store.postgres import DatabaseFailed, DatabaseLost
from reckon.daemon.store.sqlite_thread import StoreError


class FakeDb:
    def __init__(self) -> None:
        self.broken = False
        self.refusals = 0  # reconnect attempts still to fail
        self.reconnects = 0

    async def reconnect(self) -> None:
        self.reconnects += 1
        if self.refusals:
            self.refusals -= 1
            raise StoreError("cannot connect to postgresql://r@/db: no such file")
        self.broken = False


class FakeStore:
    where = "postgresql://r@/db"

    def __init__(self) -> None:
        self.db = FakeDb()


class FakeMetrics:
    def __init__(self) -> None:
        self.up: list[bool] = []

    def database(self, up: bool) -> None:
        self.up.append(up)


async def test_a_lost_database_is_logged_once_retried_with_a_capped_backoff_and_its_return_once(
        autojump_clock, caplog):
    import trio

    caplog.set_level(logging.DEBUG, logger="reckon.controller")
    store, metrics = FakeStore(), FakeMetrics()
    database = StandbyDatabase(store, metrics, first_retry=0.2, cap=1.0)  # type: ignore[arg-type]
    store.db.broken, store.db.refusals = True, 5
    t0 = trio.current_time()
    await database.failed(DatabaseLost(store.where, "server closed the connection unexpectedly"))
    assert store.db.reconnects == 6 and not store.db.broken
    assert round(trio.current_time() - t0, 6) == 4.4  # 0.2, 0.4, 0.8, then 1 s (the cap) three times
    database.answered()
    database.answered()  # a steady good state says nothing more
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["lost the database at postgresql://r@/db: server closed the connection unexpectedly: "
                        "retrying", "the database at postgresql://r@/db is back after 4.4s"]
    assert sum("still no database" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) == 5
    assert metrics.up == [False, True]

    caplog.clear()  # a statement failing on a live connection, poll after poll: one warning, no reconnect
    for _ in range(4):
        await database.failed(DatabaseFailed("the database at postgresql://r@/db failed: lock timeout"))
    database.answered()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["the database at postgresql://r@/db failed: lock timeout: retrying",
                        "the database at postgresql://r@/db is back after 2.4s"]
    assert store.db.reconnects == 6
