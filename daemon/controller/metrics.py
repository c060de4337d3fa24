"""The controller's Prometheus metrics.

Counters and histograms are fed by ``observe_batch`` after each group commit
(from the batch's durable facts and commands); gauges are read from the live
state at scrape time by a collector, so they cost nothing between scrapes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reckon.model import facts as F
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState

if TYPE_CHECKING:
    from reckon.daemon.controller.host import DaemonHost

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_SIZES = (1, 10, 100, 1_000, 10_000, 100_000)
_MEMORY = tuple(float(1 << shift) for shift in range(20, 41, 2))  # 1 MiB to 1 TiB, by 4x
MAX_TRACKED_DISPATCHES = 1_000_000  # dispatch times kept for the start latency, at most


class _StateCollector(Collector):
    def __init__(self, daemon: "DaemonHost") -> None:
        self.daemon = daemon

    def collect(self) -> Iterable[GaugeMetricFamily]:
        model = self.daemon.model
        jobs = GaugeMetricFamily("reckon_jobs", "Jobs in the table by state", labels=["state"])
        states = self.daemon.queries.states  # the query index's (the last commit's): no walk of every job
        for state in (s.value for s in JobState):
            jobs.add_metric([state], len(states[state]))
        yield jobs
        agents = GaugeMetricFamily("reckon_agents", "Known agents by node state", labels=["state"])
        nodes = dict.fromkeys(NodeState, 0)
        for name in model.state.agents:
            nodes[model.node_state(name)] += 1
        for state, n in nodes.items():
            agents.add_metric([state.value], n)
        yield agents
        store = self.daemon.store
        yield GaugeMetricFamily("reckon_fact_log_last_seq", "Sequence number of the newest fact", value=store.last_seq)
        yield GaugeMetricFamily("reckon_fact_log_since_snapshot", "Facts a restart would replay",
                                value=store.facts_since_snapshot)
        kind = GaugeMetricFamily("reckon_fact_store", "1 for the store this controller keeps its facts in",
                                 labels=["kind"])
        kind.add_metric([store.kind], 1)
        yield kind
        size = store.disk_bytes()
        if size is not None:  # (None: PostgreSQL, no file of ours)
            yield GaugeMetricFamily("reckon_fact_log_bytes", "Size of controller.db on disk", value=size)


NO_OWNER = "(none)"  # the user label of a job without an owner (token mode: the agent's user ran it)


class ControllerMetrics:
    """``user_of``: a job's owner's name, or None; by default from the daemon's job table (the
    facts of a commit are applied before it is observed, so a finished job is there)."""

    def __init__(self, daemon: "DaemonHost", user_of: "Callable[[str], str | None] | None" = None) -> None:
        self.registry = registry = CollectorRegistry()
        self.submits = Counter("reckon_jobs_submitted", "Jobs submitted", registry=registry)
        self.finished = Counter("reckon_jobs_finished", "Outcomes recorded, by how they arrived", ["via"],
                                registry=registry)
        self.requeues = Counter("reckon_jobs_requeued", "Attempts requeued", registry=registry)
        self.dispatch_to_start = Histogram("reckon_dispatch_to_start_seconds",
                                           "From the dispatch's commit to the start the agent reported",
                                           buckets=_LATENCY, registry=registry)
        self.finish_to_recorded = Histogram("reckon_finish_to_recorded_seconds",
                                            "From a job's end on its agent to its outcome's commit",
                                            buckets=_LATENCY, registry=registry)
        self.round_seconds = Histogram("reckon_resync_round_seconds", "Resync round durations",
                                       buckets=_LATENCY, registry=registry)
        self.round_jobs = Histogram("reckon_resync_round_jobs", "Jobs queried per resync round",
                                    buckets=(0,) + _SIZES, registry=registry)
        self.commit_facts = Histogram("reckon_group_commit_facts", "Facts per group commit",
                                      buckets=_SIZES, registry=registry)
        self.commit_seconds = Histogram("reckon_group_commit_seconds", "Group commit latency",
                                        buckets=_LATENCY, registry=registry)
        # Accounting (issue #20): what finished attempts used.  Labelled by kind only, never by job,
        # user or agent: a label per job id would grow without bound.
        self.job_cpu = Counter("reckon_job_cpu_seconds", "CPU time of finished attempts, as their agents measured it",
                               ["mode"], registry=registry)
        self.job_peak_memory = Histogram("reckon_job_peak_memory_bytes", "Peak memory of each finished attempt",
                                         buckets=_MEMORY, registry=registry)
        self.oom_kills = Counter("reckon_jobs_oom_killed", "Attempts killed for exceeding their memory limit",
                                 registry=registry)
        # Per user too: users are few and known (a cluster's accounts), unlike job ids.
        self.user_cpu = Counter("reckon_user_cpu_seconds", "CPU time of a user's finished attempts",
                                ["user", "mode"], registry=registry)
        self.user_wall = Counter("reckon_user_wall_seconds", "Wall time of a user's finished attempts",
                                 ["user"], registry=registry)
        self._user_of = user_of if user_of is not None else self._owner_in_table
        self._daemon = daemon
        registry.register(_StateCollector(daemon))
        self._dispatched_at: dict[tuple[str, int], float] = {}

    def committed(self, facts: list[F.Fact], seconds: float) -> None:
        """One group commit of ``facts``, durable after ``seconds``."""
        self.commit_facts.observe(len(facts))
        self.commit_seconds.observe(seconds)
        now = time.time()
        for fact in facts:
            kind = type(fact)
            if kind is F.JobSubmitted:
                self.submits.inc()
            elif kind is F.JobDispatched:
                if len(self._dispatched_at) < MAX_TRACKED_DISPATCHES:
                    self._dispatched_at[(fact.job, fact.attempt)] = now
            elif kind is F.JobStarted:
                at = self._dispatched_at.pop((fact.job, fact.attempt), None)
                if at is not None:  # clocks of two machines: never a negative latency
                    self.dispatch_to_start.observe(max(0.0, fact.started_at - at))
            elif kind is F.JobFinished:
                at = self._dispatched_at.pop((fact.job, fact.attempt), None)
                if at is not None and fact.started_at is not None:  # a short job's start comes with its end
                    self.dispatch_to_start.observe(max(0.0, fact.started_at - at))
                self.finished.labels(via=fact.via or "unknown").inc()
                self.finish_to_recorded.observe(max(0.0, now - fact.finished_at))
                self._accounted(fact)
            elif kind in (F.JobRequeued, F.JobCancelConfirmed):
                self._dispatched_at.pop((fact.job, fact.attempt), None)
                if kind is F.JobRequeued:
                    self.requeues.inc()

    def _accounted(self, fact: F.JobFinished) -> None:
        if fact.oom:
            self.oom_kills.inc()
        usage = fact.usage
        if usage is None:
            return  # an agent older than protocol 6 measures nothing
        self.job_cpu.labels(mode="user").inc(usage.cpu_user)
        self.job_cpu.labels(mode="system").inc(usage.cpu_system)
        if usage.max_rss is not None:
            self.job_peak_memory.observe(usage.max_rss)
        user = self._user_of(fact.job) or NO_OWNER
        self.user_cpu.labels(user=user, mode="user").inc(usage.cpu_user)
        self.user_cpu.labels(user=user, mode="system").inc(usage.cpu_system)
        self.user_wall.labels(user=user).inc(usage.wall)

    def _owner_in_table(self, job: str) -> str | None:
        record = self._daemon.model.state.jobs.get(job)
        return None if record is None or record.owner is None else record.owner.user

    def round_resolved(self, seconds: float, queried: int) -> None:
        self.round_seconds.observe(seconds)
        self.round_jobs.observe(queried)
