"""Metrics of a controller on the PostgreSQL store, standing by or leading.

One registry serves the whole life of the process (the ``--metrics``
endpoint is up from the start, while this controller stands by):

* always: ``reckon_controller_role{role}`` (1 for the current role, 0 for
  the other), ``reckon_controller_epoch`` (the epoch this controller leads,
  or the one it last saw another lead), ``reckon_controller_last_takeover_timestamp_seconds``
  (when this controller took over, or saw the epoch change while standing by;
  absent until it has seen one), ``reckon_database_up`` (the last round trip
  to the database succeeded);
* standing by: ``reckon_standby_facts_behind`` (facts in the log, as of this
  scrape, that this standby has not replayed: what a takeover would replay
  on top of what it follows anyway) and ``reckon_fact_log_last_seq``;
* leading: the single controller's metrics (daemon/controller/metrics.py) too.

The standby's figures need the log's head: ``refresh`` reads it before each
scrape (one indexed ``max(seq)``, bounded by ``REFRESH_TIMEOUT``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:  # pragma: no cover
    from reckon.daemon.controller.standby import Follower, Front
    from reckon.daemon.store.postgres import PgFactStore

REFRESH_TIMEOUT = 2.0  # seconds a scrape waits for the log's head before showing the last one read
ROLES = ("leader", "standby")


class HaMetrics(Collector):
    def __init__(self, store: "PgFactStore", follower: "Follower", front: "Front") -> None:
        self.store = store
        self.follower = follower
        self.front = front
        self.seen_epoch = 0  # the epoch last read from the database while standing by
        self.last_takeover: float | None = None  # wall time, see the module docstring
        self.log_last_seq = 0  # the log's newest seq as last read
        self.database_up = True
        self.registry = CollectorRegistry()
        self.registry.register(self)

    # ---- fed by daemon/controller/ha.py -------------------------------------------------

    def saw_epoch(self, epoch: int) -> None:
        """Standing by, the database named ``epoch`` as the current one."""
        if self.seen_epoch and epoch != self.seen_epoch:
            self.last_takeover = time.time()
        self.seen_epoch = epoch

    def took_over(self) -> None:
        self.last_takeover = time.time()

    def database(self, up: bool) -> None:
        self.database_up = up

    async def refresh(self) -> None:
        """Before a scrape: the log's head, for a standby's lag (a leader's own is always current)."""
        if self.front.daemon is not None:
            return
        with trio.move_on_after(REFRESH_TIMEOUT):
            try:
                self.log_last_seq = await self.store.log_head()
            except Exception:  # the database is away: the standby's loop says so in the log
                self.database_up = False
            else:
                self.database_up = True

    # ---- the collector ---------------------------------------------------------------

    def collect(self) -> Iterable[Any]:
        leading = self.front.daemon is not None
        role = GaugeMetricFamily("reckon_controller_role", "1 for this controller's role (PostgreSQL store)",
                                 labels=["role"])
        for name in ROLES:
            role.add_metric([name], 1 if (name == "leader") == leading else 0)
        yield role
        epoch = self.store.epoch if leading and self.store.epoch is not None else self.seen_epoch
        yield GaugeMetricFamily("reckon_controller_epoch", "The epoch this controller leads, or last saw led",
                                value=epoch)
        if self.last_takeover is not None:
            yield GaugeMetricFamily("reckon_controller_last_takeover_timestamp_seconds",
                                    "When this controller took over, or saw the epoch change (Unix time)",
                                    value=self.last_takeover)
        yield GaugeMetricFamily("reckon_database_up", "1 if the last round trip to the database succeeded",
                                value=1 if self.database_up else 0)
        if leading:
            yield from self.front.daemon.metrics.registry.collect()  # type: ignore[union-attr]
        else:
            head = max(self.log_last_seq, self.follower.seen)
            yield GaugeMetricFamily("reckon_standby_facts_behind", "Facts in the log this standby has not replayed",
                                    value=head - self.follower.seen)
            yield GaugeMetricFamily("reckon_fact_log_last_seq", "Sequence number of the newest fact", value=head)
