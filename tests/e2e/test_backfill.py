"""Issue #22's backfill with real processes: on one agent of two CPUs, a long job holds one CPU;
a job of two CPUs is blocked behind it and promised a start (`reckon show`'s expected start); a
short job backfills into the free CPU because it ends before that start, and a job without a
time limit does not (it could delay the promise)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_a_short_job_backfills_around_a_large_one_and_an_unbounded_one_waits(cluster, tmp_path):
    cluster.start_controller("--scheduler", "backfill")
    cluster.start_agent("a1", slots=2)
    gate = tmp_path / "release"
    long = cluster.cli("submit", "--time", "10m", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done").strip()
    cluster.wait_job(long, ["RUNNING"])
    wide = cluster.cli("submit", "--cpus", "2", "--time", "1m", "--", "true").strip()
    unbounded = cluster.cli("submit", "--", "true").strip()
    short = cluster.cli("submit", "--time", "1m", "--", "true").strip()
    assert cluster.wait_job(short)["state"] == "COMPLETED"  # it started behind the wide job, in the free CPU
    assert cluster.job(unbounded)["state"] == "PENDING"  # no time limit: it might outlast the promise
    shown = cluster.wait_for(lambda: (lambda j: j if j.get("expected_start") else None)(cluster.job(wide)),
                             what="the wide job's promised start")
    assert shown["state"] == "PENDING" and shown["expected_agent"] == "a1"
    # RUNNING comes with the dispatch; the start time with the agent's report, a moment later.
    started = cluster.wait_for(lambda: cluster.job(long).get("started_at"), what="the long job's start time")
    assert started + 600 - 5 <= shown["expected_start"] <= started + 600 + 5  # when the long job's limit ends
    assert "starts by:" in cluster.cli("show", wide)
    gate.touch()
    assert cluster.wait_job(long)["state"] == "COMPLETED"
    done = cluster.wait_jobs([wide, unbounded])
    assert done[wide]["state"] == done[unbounded]["state"] == "COMPLETED"
    assert done[wide]["started_at"] <= done[unbounded]["started_at"]  # the promised job went first


def test_reserve_after_lets_jobs_flow_around_a_young_blocked_job(cluster, tmp_path):
    """`--reserve-after 1h`: the wide job, blocked a moment ago, is promised nothing yet, so a job
    without a time limit starts in the free CPU at once (as first fit would) and the wide job's
    `show` gives no expected start."""
    cluster.start_controller("--scheduler", "backfill", "--reserve-after", "1h")
    cluster.start_agent("a1", slots=2)
    gate = tmp_path / "release"
    hold = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    long = cluster.cli("submit", "--time", "10m", "--", "sh", "-c", hold).strip()
    cluster.wait_job(long, ["RUNNING"])
    wide = cluster.cli("submit", "--cpus", "2", "--time", "1m", "--", "true").strip()
    unbounded = cluster.cli("submit", "--", "sh", "-c", hold).strip()
    assert cluster.wait_job(unbounded, ["RUNNING"])["state"] == "RUNNING"
    shown = cluster.job(wide)
    assert shown["state"] == "PENDING" and not shown.get("expected_start")
    gate.touch()
    done = cluster.wait_jobs([long, wide, unbounded])
    assert {done[j]["state"] for j in (long, wide, unbounded)} == {"COMPLETED"}
