"""Two real agents started with one `--name` (cloned machines share a hostname): issue #9, bug 1.

Before: each join kicked the other off about ten times a second, every join
requeued the name's jobs, 10 jobs ran 173 times, the fact log grew by ~20
`agent_registered` facts a second, and nothing was logged.  Now the second
agent is refused for good with a named message, logged once on each side,
and keeps retrying at its slow refusal pace; every job runs exactly once.

Invariant: INV-NAME-HANDOVER (docs/invariants.md).
"""

from __future__ import annotations

import re

import pytest

from reckon.model.facts import AgentRegistered

pytestmark = pytest.mark.e2e

HELD = "agent name node1 is held by another agent"


def test_a_second_agent_with_the_same_name_is_refused_and_every_job_runs_once(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("node1", slots=4)
    cluster.start_agent("node1", "-v", key="clone", slots=4, wait_joined=False)
    cluster.wait_for(lambda: HELD in cluster.log_text("clone"), what="the clone to be refused")

    # Each job appends one line to its own truth file per execution.
    jobs = [cluster.submit("sh", "-c", f"echo ran >> {truth_dir}/{i}; sleep 0.2", name=f"j{i}") for i in range(10)]
    records = cluster.wait_jobs(jobs)
    # The clone keeps trying (it is told no again: -v shows each further attempt).
    cluster.wait_for(lambda: "refused again" in cluster.log_text("clone") or cluster.log_text("clone").count(HELD) > 1,
                     what="a second refused attempt")

    for i, job in enumerate(jobs):
        assert (truth_dir / str(i)).read_text().splitlines() == ["ran"], f"job {job} did not run exactly once"
        assert (records[job]["state"], records[job]["attempt"], records[job]["agent"] or "node1") == \
            ("COMPLETED", 1, "node1")
    assert list((cluster.agent_dir("clone") / "jobs").glob("*.run")) == []  # the clone ran nothing
    assert cluster.running("node1") and cluster.running("clone")
    assert cluster.log_text("node1").count("connected to") == 1  # the holder was never disturbed

    # Logged once a side (WARNING lines), however many attempts there were.
    clone_warnings = [line for line in cluster.log_text("clone").splitlines() if " WARNING " in line]
    assert len([line for line in clone_warnings if HELD in line]) == 1, clone_warnings
    assert len(clone_warnings) <= 3, clone_warnings
    assert len(re.findall(f"refused agent node1 from 127.0.0.1: {HELD}", cluster.log_text("controller"))) == 1

    cluster.stop("clone")
    cluster.stop("controller")
    registrations = [f for f in cluster.facts() if isinstance(f, AgentRegistered)]
    assert len(registrations) == 1 and registrations[0].agent == "node1", registrations


def test_a_replacement_with_jobs_left_on_the_old_agent_waits_for_reckon_forget(cluster, truth_dir):
    """Same name, wiped state directory, the old machine gone with a job placed on it."""
    cluster.start_controller()
    cluster.start_agent("node1", slots=1)
    gate = truth_dir / "go"
    job = cluster.submit("sh", "-c", f"echo ran >> {truth_dir}/runs; while [ ! -e {gate} ]; do sleep 0.05; done")
    cluster.wait_job(job, states=("RUNNING",))
    cluster.kill("node1")  # the machine is gone (its job process is not: see below)
    cluster.wait_node("node1", ("DISCONNECTED",))

    cluster.start_agent("node1", key="replacement", slots=1, wait_joined=False)
    cluster.wait_for(lambda: "reckon forget node1" in cluster.log_text("replacement"),
                     what="the replacement to be refused, naming the way out")
    assert cluster.job(job)["state"] == "RUNNING" and cluster.job(job)["attempt"] == 1

    refused = cluster.run("forget", "nobody")
    assert refused.returncode != 0 and "unknown agent 'nobody'" in cluster.one_line_reason(refused)
    assert cluster.cli("forget", "node1").strip() == \
        "forgot node1: 1 job(s) requeued, 0 cancel(s) confirmed; its name is free"
    cluster.wait_for(lambda: "accepts us again" in cluster.log_text("replacement"), what="the replacement to join")
    record = cluster.wait_job(job, states=("RUNNING",))
    assert record["attempt"] == 2
    # The operator's word was wrong on purpose here: the old agent's process still
    # runs, so the job ran twice, as `reckon forget --help` warns.
    cluster.wait_for(lambda: (truth_dir / "runs").read_text().count("ran") == 2, what="the second run")
    gate.touch()
    assert cluster.wait_job(job)["state"] == "COMPLETED"


def test_a_state_directory_refuses_another_name_with_one_line(cluster):
    cluster.start_controller()
    cluster.start_agent("node1", slots=1)
    cluster.stop("node1")
    result = cluster.run("agent", "--name", "node2", "--slots", "1", "--state-dir", str(cluster.agent_dir("node1")))
    assert result.returncode == 1
    assert cluster.one_line_reason(result) == (
        f"reckon: {cluster.agent_dir('node1')} belongs to agent 'node1', not 'node2': start it as --name node1, "
        "or give 'node2' a state directory of its own")
    cluster.start_agent("node1", slots=1)  # under its own name it starts, with the same identity
    assert cluster.log_text("node1").count("is held by another agent") == 0
