"""The controller's accounting metrics (issue #20): CPU seconds, peak memory, OOM kills of finished attempts."""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

from reckon.daemon.controller.metrics import ControllerMetrics
from reckon.model import facts as F
from reckon.model.resources import Usage


def test_finished_attempts_feed_cpu_seconds_peak_memory_and_oom_kills_without_job_labels():
    owners = {"1": "alice", "2": "alice"}  # job 3 has no owner (token mode)
    metrics = ControllerMetrics(daemon=None, user_of=owners.get)  # type: ignore[arg-type]  # no scrape here
    usage = Usage(cpu_user=3.0, cpu_system=0.5, max_rss=300 << 20, wall=4.0, source="cgroup")
    metrics.committed([
        F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0, usage=usage, via="report"),
        F.JobFinished(job="2", attempt=1, exit_code=None, signal=9, finished_at=1.0, usage=usage, oom=True,
                      via="report"),
        F.JobFinished(job="3", attempt=1, exit_code=0, signal=None, finished_at=1.0, via="round"),  # measured nothing
        F.JobFinished(job="4", attempt=1, exit_code=0, signal=None, finished_at=1.0, usage=usage, via="report"),
    ], 0.01)
    def sample(name: str, labels: dict | None = None) -> float | None:
        # From the accounting metrics themselves (the registry's state collector needs a daemon).
        for metric in (metrics.job_cpu, metrics.job_peak_memory, metrics.oom_kills, metrics.user_cpu,
                       metrics.user_wall):
            for family in metric.collect():
                for s in family.samples:
                    if s.name == name and s.labels == (labels or {}):
                        return s.value
        return None

    assert sample("reckon_job_cpu_seconds_total", {"mode": "user"}) == 9.0
    assert sample("reckon_job_cpu_seconds_total", {"mode": "system"}) == 1.5
    assert sample("reckon_user_cpu_seconds_total", {"user": "alice", "mode": "user"}) == 6.0
    assert sample("reckon_user_cpu_seconds_total", {"user": "alice", "mode": "system"}) == 1.0
    assert sample("reckon_user_wall_seconds_total", {"user": "alice"}) == 8.0
    assert sample("reckon_user_wall_seconds_total", {"user": "(none)"}) == 4.0  # job 4: no owner
    assert sample("reckon_job_peak_memory_bytes_count") == 3
    assert sample("reckon_job_peak_memory_bytes_bucket", {"le": floatToGoString(1 << 28)}) == 0  # 256M < 300M
    assert sample("reckon_job_peak_memory_bytes_bucket", {"le": floatToGoString(1 << 30)}) == 3
    assert sample("reckon_jobs_oom_killed_total") == 1
    labels = {frozenset(s.labels) for metric in (metrics.job_cpu, metrics.job_peak_memory, metrics.oom_kills)
              for family in metric.collect() for s in family.samples}
    assert labels == {frozenset(), frozenset({"mode"}), frozenset({"le"})}  # no job, user or agent label
    per_user = {frozenset(s.labels) for metric in (metrics.user_cpu, metrics.user_wall)
                for family in metric.collect() for s in family.samples}
    assert per_user == {frozenset({"user", "mode"}), frozenset({"user"})}  # users are few; never a job label
