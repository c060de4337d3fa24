"""Failover with real processes: two controllers on one real PostgreSQL, two agents, jobs running.

* SIGKILL the leader: the standby leads, the agents rejoin it, and a completion
  made during the failover is recorded once, with its true exit code and
  finish time (the agent's own record of it).
* SIGSTOP the leader past its lease, let the standby take over, SIGCONT the old
  leader: it commits nothing, steps down and says so, and no fact of the old
  epoch follows the first fact of the new one.

The agents and the CLI are given both controllers' URLs and find the leader.
"""

from __future__ import annotations

import signal

import cbor2
import pytest

from reckon.model import facts as F

pytestmark = pytest.mark.e2e

LEASE = "2"
GATED = "while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}"


def log_of(dsn: str) -> list[tuple[int, int, F.Fact]]:
    """(seq, epoch, fact) of every fact in the shared log."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT seq, epoch, data FROM fact ORDER BY seq").fetchall()
    return [(seq, epoch, F.decode(cbor2.loads(bytes(data)))) for seq, epoch, data in rows]


def leader_of(cluster, url: str) -> bool:
    """Whether the controller at ``url`` answers as the leader."""
    result = cluster.run("nodes", controller=url)
    return result.returncode == 0


def start_pair(cluster, dsn: str) -> tuple[str, str]:
    a = f"ws://127.0.0.1:{cluster.start_ha_controller('ctl-a', dsn, '--lease', LEASE, '--rejoin-grace', '0')}"
    cluster.wait_for(lambda: leader_of(cluster, a), what="controller a to lead")
    b = f"ws://127.0.0.1:{cluster.start_ha_controller('ctl-b', dsn, '--lease', LEASE, '--rejoin-grace', '0')}"
    cluster.wait_for(lambda: "standing by" in cluster.log_text("ctl-b"), what="controller b to stand by")
    cluster.controller_urls = f"{a},{b}"
    return a, b


def test_sigkill_of_the_leader_standby_leads_and_a_completion_during_failover_is_recorded_once(cluster, pg_dsn):
    a, b = start_pair(cluster, pg_dsn)
    cluster.start_agent("a1", slots=2)
    cluster.controller_urls = f"{b},{a}"  # a2 asks the standby first, which sends it to the leader
    cluster.start_agent("a2", slots=2)
    cluster.controller_urls = f"{a},{b}"
    assert "is a standby controller: not the leader: the leader is " + a in cluster.log_text("a2")
    gate = cluster.base / "gate"
    gated = cluster.submit("sh", "-c", GATED.format(gate=gate, code=7), name="gated")
    others = [cluster.submit("sh", "-c", GATED.format(gate=gate, code=0)) for _ in range(3)]
    cluster.wait_jobs([gated, *others], ("RUNNING",))
    agent = cluster.job(gated)["agent"]

    cluster.kill("ctl-a")  # the leader dies; its database session ends with it
    gate.touch()  # the jobs finish while no controller leads
    status = cluster.wait_for(lambda: cluster.status_file(agent, gated), what="the gated job's status record")

    cluster.wait_for(lambda: leader_of(cluster, b), what="controller b to lead")
    assert "is gone: its database session ended" in cluster.log_text("ctl-b")
    job = cluster.wait_job(gated)
    assert job["state"] == "FAILED" and job["exit_code"] == 7
    assert job["finished_at"] == status["finished_at"]  # the agent's true finish time, not the takeover's
    for other in others:
        assert cluster.wait_job(other)["state"] == "COMPLETED"
    for name in ("a1", "a2"):
        cluster.wait_node(name, ("IDLE",))
    finished = [f for _, _, f in log_of(pg_dsn) if isinstance(f, F.JobFinished) and f.job == gated]
    assert len(finished) == 1 and finished[0].exit_code == 7


def test_a_leader_frozen_past_its_lease_commits_nothing_after_takeover_and_steps_down(cluster, pg_dsn):
    a, b = start_pair(cluster, pg_dsn)
    cluster.start_agent("a1", "--ping-timeout", "2", slots=2)
    first = cluster.submit("true")
    assert cluster.wait_job(first)["state"] == "COMPLETED"

    cluster.signal("ctl-a", signal.SIGSTOP)  # frozen: its session stays open, its lease runs out
    try:
        cluster.wait_for(lambda: leader_of(cluster, b), what="controller b to take over on lease expiry")
        assert "lease of epoch 1" in cluster.log_text("ctl-b")
        # The CLI asks b alone from here: with both URLs each call would first spend its
        # per-controller connect time-out on the frozen a (README: High availability).
        cluster.controller_urls = b
        second = cluster.submit("sh", "-c", "exit 3")
        assert cluster.wait_job(second)["state"] == "FAILED"
    finally:
        cluster.signal("ctl-a", signal.SIGCONT)
    proc = cluster.daemons["ctl-a"].proc
    cluster.wait_for(lambda: proc.poll() is not None, what="the old leader to exit")
    assert proc.returncode == 1
    log = cluster.log_text("ctl-a")
    assert "stepping down" in log and "epoch 1" in log
    epochs = [epoch for _, epoch, _ in log_of(pg_dsn)]
    assert epochs == sorted(epochs) and epochs[-1] == 2  # nothing of epoch 1 after epoch 2's first fact
    assert leader_of(cluster, b) and cluster.job(second)["exit_code"] == 3
