"""A rejoin round over the real wire that spans many pages both ways.

Page size 3 on the controller (query pages) and on the agent (report
pages): 20 running jobs make a round of 7 query pages and at least 7 report
pages.  After a controller restart the round completes (the node is MIXED
again, not RECONCILING, and no round timed out), every job is still RUNNING
on its first attempt, and each then finishes with its own exit code.
"""

from __future__ import annotations

import collections
import re

import pytest

from reckon.model.facts import JobFinished, JobRequeued

pytestmark = pytest.mark.e2e

N_JOBS = 20


def test_rejoin_round_spanning_many_pages(cluster, truth_dir):
    cluster.start_controller("--page-size", "3")
    cluster.start_agent("a1", "--page-size", "3", slots=N_JOBS + 4)
    gate = truth_dir / "go"
    # Held until the gate opens (a condition, not a guess at how long the round takes).
    ids = cluster.submit_many([
        {"name": f"p{i:02d}", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.2; done; exit {i % 5}"],
         "cwd": None, "env": [], "slots": 1} for i in range(N_JOBS)])
    expected = {job_id: i % 5 for i, job_id in enumerate(ids)}
    cluster.wait_jobs(ids, states=("RUNNING",))
    cluster.wait_for(lambda: all(cluster.pid_file("a1", j) for j in ids), what="every job to run")
    assert cluster.nodes()["a1"]["used"] == N_JOBS

    cluster.kill("controller")
    log_before = len(cluster.log_text("controller"))
    cluster.start_controller()
    # DISCONNECTED (restored, nobody joined) -> RECONCILING (round open) -> MIXED (round resolved).
    node = cluster.wait_node("a1", ("MIXED",))  # N_JOBS of N_JOBS + 4 slots
    assert node["used"] == N_JOBS
    after = cluster.log_text("controller")[log_before:]
    assert re.search(r"resync round (\w+) with agent a1 started(.|\n)*resync round \1 with agent a1 ended", after), after
    assert "timed out" not in after

    jobs = cluster.jobs()
    assert all(jobs[j]["state"] == "RUNNING" and jobs[j]["attempt"] == 1 and jobs[j]["requeues"] == 0
               and jobs[j]["agent"] == "a1" for j in ids), [jobs[j] for j in ids]

    gate.touch()
    final = cluster.wait_jobs(ids)
    for job_id, code in expected.items():
        j = final[job_id]
        assert (j["state"], j["exit_code"], j["signal"], j["attempt"]) == (
            "COMPLETED" if code == 0 else "FAILED", code, None, 1), j
    assert cluster.log_text("a1").count("connected to") == 2  # one join, one rejoin: no round was retried

    cluster.stop("controller")
    facts = cluster.facts()
    assert collections.Counter(f.job for f in facts if isinstance(f, JobFinished)) == collections.Counter(ids)
    assert not [f for f in facts if isinstance(f, JobRequeued)]
