"""The agent's lifecycle log (one INFO line per job event) and its Prometheus metrics.

Lines come from the model's commands in one place: a process to start, a
process to kill, an outcome put in the outbox (the job finished here), an
outbox entry acknowledged (the controller recorded it).  Metrics are read
from the live model at scrape time.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reckon.model import events as E
from reckon.model.records import LocalStatus

from reckon.daemon.ops.outcomes import outcome_text

log = logging.getLogger("reckon.lifecycle")


def log_commands(commands: Iterable[tuple[E.Command, Any]]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    for cmd, _ in commands:
        if isinstance(cmd, E.StartProcess):
            log.info("job %s attempt %s starting: %r", cmd.job, cmd.attempt, cmd.spec.name)
        elif isinstance(cmd, E.KillProcess):
            log.info("job %s attempt %s: killing its process (cancelled, or not ours to run)", cmd.job, cmd.attempt)
        elif isinstance(cmd, E.OutboxPut):
            r = cmd.report
            log.info("job %s attempt %s finished: %s", r.job, r.attempt, outcome_text(r.exit_code, r.signal))
        elif isinstance(cmd, E.OutboxDelete):
            log.info("job %s attempt %s: outcome recorded by the controller", cmd.job, cmd.attempt)


class _AgentCollector(Collector):
    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon

    def collect(self) -> Iterable[GaugeMetricFamily]:
        agent = self.daemon.model
        outbox = agent.outbox
        yield GaugeMetricFamily("reckon_agent_outbox_depth", "Outcomes waiting for the controller's ack",
                                value=len(outbox))
        oldest = min((e.report.finished_at for e in outbox.values()), default=None)
        yield GaugeMetricFamily("reckon_agent_outbox_oldest_seconds",
                                "Age of the oldest unacknowledged outcome (0: none)",
                                value=0.0 if oldest is None else max(0.0, time.time() - oldest))
        running = sum(1 for r in agent.records.values() if r.status is LocalStatus.RUNNING)
        yield GaugeMetricFamily("reckon_agent_running_jobs", "Jobs running here", value=running)
        yield GaugeMetricFamily("reckon_agent_slots", "Slots this agent offers", value=agent.config.slots)
        session = GaugeMetricFamily("reckon_agent_session", "1 for the session state the agent is in",
                                    labels=["state"])
        for state in type(agent.session):
            session.add_metric([state.name], 1.0 if agent.session is state else 0.0)
        yield session


def agent_registry(daemon: Any) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_AgentCollector(daemon))
    return registry
