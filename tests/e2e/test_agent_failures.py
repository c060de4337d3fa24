"""An agent dies, freezes or loses its records while its jobs run.

* killed and restarted: its jobs are re-adopted (not rerun) and recorded with
  their true outcomes;
* frozen past the heartbeat timeout: the controller disconnects it, a resync
  round runs when it comes back, the outcome made meanwhile is recorded;
* restarted with its state gone: it is a new agent under the old name,
  refused until the operator runs `reckon forget`; then the job it forgot is
  requeued and runs again (attempt 2), and only that attempt's outcome is
  recorded.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import time

import pytest

from reckon.model.facts import JobFinished, JobRequeued

pytestmark = pytest.mark.e2e


def _runs(path) -> int:
    """How many times a job started (each run appends a line)."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_kill9_agent_jobs_are_readopted_not_rerun(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=4)
    codes = [0, 2, 5, 9]
    ids = cluster.submit_many([
        {"name": f"j{i}", "command": ["sh", "-c", f"echo run >> {truth_dir}/runs-{i}; sleep 2; "
                                                  f"date +%s.%N > {truth_dir}/end-{i}; exit {code}"],
         "cwd": None, "env": [], "slots": 1} for i, code in enumerate(codes)])
    # All four run (a pid file means the agent got the dispatch, which the controller
    # sends only once it is durable): kill the agent now.
    pids = cluster.wait_for(lambda: all(cluster.pid_file("a1", j) for j in ids)
                            and [cluster.pid_file("a1", j) for j in ids], interval=0.01,
                            what="all jobs to start")
    killed_at = cluster.kill("a1")
    # The jobs outlive their agent: each runs under its own supervisor, in its own session.
    for info in pids:
        assert cluster.alive(info["job_pid"], info["job_start"]), "a job died with its agent"
    assert not any((truth_dir / f"end-{i}").exists() for i in range(len(codes))), \
        "precondition: the agent must die while its jobs run"

    cluster.start_agent("a1")
    final = cluster.wait_jobs(ids)
    for i, (job_id, code) in enumerate(zip(ids, codes)):
        j = final[job_id]
        assert (j["state"], j["exit_code"], j["signal"]) == ("COMPLETED" if code == 0 else "FAILED", code, None)
        assert j["attempt"] == 1 and j["requeues"] == 0 and j["agent"] == "a1"
        assert _runs(truth_dir / f"runs-{i}") == 1, f"job {job_id} ran more than once"
        end = float((truth_dir / f"end-{i}").read_text())
        assert 0.0 <= j["finished_at"] - end <= 1.0
        assert j["finished_at"] > killed_at
    assert re.search(r"re-adopted 4 job\(s\)", cluster.log_text("a1")), "the restarted agent did not re-adopt"

    cluster.stop("controller")
    facts = cluster.facts()
    assert collections.Counter(f.job for f in facts if isinstance(f, JobFinished)) == collections.Counter(ids)
    assert not [f for f in facts if isinstance(f, JobRequeued)]


def test_frozen_agent_is_disconnected_then_resynced(cluster, truth_dir):
    cluster.start_controller("--heartbeat-timeout", "2")
    cluster.start_agent("a1", "--heartbeat-interval", "0.25", slots=2)
    end = truth_dir / "end"
    job = cluster.submit("sh", "-c", f"sleep 1.5; date +%s.%N > {end}; exit 5")
    cluster.wait_for(lambda: cluster.pid_file("a1", job), interval=0.01, what="the job to start")
    cluster.signal("a1", signal.SIGSTOP)
    frozen_at = time.time()
    try:
        # Silent past the heartbeat timeout: the controller lets the agent go.
        node = cluster.wait_node("a1", ("DISCONNECTED",))
        assert node["used"] == 1
        # The job (its own session, its own supervisor) carries on and ends meanwhile.
        status = cluster.wait_for(lambda: cluster.status_file("a1", job), what="the job to end while frozen")
        assert status["exit_code"] == 5
        assert cluster.job(job)["state"] == "RUNNING", "nobody could have told the controller yet"
        log_before = len(cluster.log_text("controller"))
    finally:
        cluster.signal("a1", signal.SIGCONT)
    thawed_at = time.time()

    record = cluster.wait_job(job)
    assert (record["state"], record["exit_code"], record["signal"], record["attempt"]) == ("FAILED", 5, None, 1)
    assert frozen_at < record["finished_at"] < thawed_at
    assert 0.0 <= record["finished_at"] - float(end.read_text()) <= 1.0
    cluster.wait_node("a1", ("IDLE",))
    log = cluster.log_text("controller")
    assert re.search(r"agent a1 silent for \d+s: disconnecting", log[:log_before])
    # After the thaw: a round with a1 started and ended (it is what recorded the outcome).
    after = log[log_before:]
    assert re.search(r"resync round (\w+) with agent a1 started(.|\n)*resync round \1 with agent a1 ended", after), \
        f"no resync round after the thaw; controller log since:\n{after}"


def test_job_the_agent_forgot_is_requeued_and_runs_again(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    runs = truth_dir / "runs"
    job = cluster.submit("sh", "-c", f"echo run >> {runs}; sleep 1.5; exit 4")
    info = cluster.wait_for(lambda: cluster.pid_file("a1", job), interval=0.01, what="the job to start")

    # The agent dies, its job is killed, its records are gone: nobody can know the outcome.
    cluster.kill("a1")
    assert cluster.alive(info["job_pid"], info["job_start"]), "precondition: the agent must die while the job runs"
    os.killpg(info["job_pid"], signal.SIGKILL)
    cluster.wait_for(lambda: not cluster.alive(info["supervisor"], info["supervisor_start"]),
                     what="the job's supervisor to end")
    shutil.rmtree(cluster.agent_dir("a1"))
    assert _runs(runs) == 1

    # A wiped state directory is a new agent (a new identity): it may not take over
    # a name whose old holder still has a job placed, until the operator says the
    # old one is gone (here it is: its job was killed above).
    cluster.start_agent("a1", wait_joined=False)
    cluster.wait_for(lambda: "reckon forget a1" in cluster.log_text("a1"), what="the new a1 to be refused")
    assert cluster.job(job)["attempt"] == 1 and _runs(runs) == 1
    cluster.cli("forget", "a1")
    record = cluster.wait_job(job)
    assert (record["state"], record["exit_code"], record["signal"]) == ("FAILED", 4, None)
    assert record["attempt"] == 2 and record["requeues"] == 1 and record["agent"] == "a1"
    assert _runs(runs) == 2
    assert cluster.status_file("a1", job, attempt=2)["exit_code"] == 4

    cluster.stop("controller")
    facts = cluster.facts()
    requeued = [(f.job, f.attempt) for f in facts if isinstance(f, JobRequeued)]
    finished = [(f.job, f.attempt, f.exit_code) for f in facts if isinstance(f, JobFinished)]
    assert requeued == [(job, 1)]
    assert finished == [(job, 2, 4)], "only the attempt that really finished may be recorded"
