"""A copy of an agent's state directory started on another machine refuses to start (issue #9, the open case).

The real CLI and daemons: node1 runs a job on "machine 1" and goes away
(SIGKILL; its job process runs on); a copy of its state directory is started
as node1 on "machine 2" (``--machine-id-file``, the production path's option:
the default reads /etc/machine-id).  Before the machine check the copy joined
as a restart of node1, found no such process and reported the job lost: it
ran a second time.  Now: exit status 2, one line naming the directory, both
machines and the way out; nothing changes; ``--moved-from`` with the wrong
machine is refused too, with the right one the agent starts.

Invariant: INV-SIM-RUN-AT-MOST-ONCE (docs/invariants.md: the machine check is one of its guards).
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest

pytestmark = pytest.mark.e2e

M1, M2, M3 = "a" * 32, "b" * 32, "c" * 32


def meta(state_dir) -> list[tuple]:
    conn = sqlite3.connect(state_dir / "agent.db")
    try:
        return sorted(conn.execute("SELECT key, value FROM meta"))
    finally:
        conn.close()


def test_a_copy_on_another_machine_is_refused_and_the_job_runs_once(cluster, truth_dir):
    (machine1 := cluster.base / "machine1").write_text(f"{M1}\n")
    (machine2 := cluster.base / "machine2").write_text(f"{M2}\n")
    cluster.start_controller()
    cluster.start_agent("node1", "--machine-id-file", str(machine1), slots=2)
    gate = truth_dir / "go"
    job = cluster.submit("sh", "-c", f"echo ran >> {truth_dir}/runs; while [ ! -e {gate} ]; do sleep 0.05; done; "
                                     f"echo ended >> {truth_dir}/ends")
    cluster.wait_job(job, states=("RUNNING",))
    cluster.kill("node1")  # away (its job process is not)
    cluster.wait_node("node1", ("DISCONNECTED",))

    copy = cluster.agent_dir("copy")
    shutil.copytree(cluster.agent_dir("node1"), copy)
    before = meta(copy)
    assert ("machine", M1) in before

    def start_copy(*extra: str):
        return cluster.run("agent", "--name", "node1", "--state-dir", str(copy), "--controller", cluster.url,
                           "--slots", "2", "--machine-id-file", str(machine2), *extra)

    refused = start_copy()
    assert refused.returncode == 2
    assert cluster.one_line_reason(refused) == (
        f"reckon: state directory {copy} belongs to machine {M1}, this is machine {M2}: it is a copy of another "
        f"agent's state directory (a copied directory or a cloned VM); a copy runs the original's jobs again. "
        f"Start this agent with an empty --state-dir and its own --name; if the directory was moved here and "
        f"machine {M1} is gone for good, start once with --moved-from {M1}")
    wrong = start_copy("--moved-from", M3)
    assert wrong.returncode == 2
    assert cluster.one_line_reason(wrong).startswith(f"reckon: --moved-from {M3} does not match: state directory "
                                                     f"{copy} belongs to machine {M1}, this is machine {M2}")
    missing = cluster.run("agent", "--name", "node1", "--state-dir", str(copy), "--controller", cluster.url,
                          "--slots", "2", "--machine-id-file", str(cluster.base / "absent"))
    assert missing.returncode == 2
    assert cluster.one_line_reason(missing) == f"reckon: --machine-id-file: {cluster.base / 'absent'}: missing"
    assert meta(copy) == before  # nothing changed
    record = cluster.job(job)
    assert (record["state"], record["attempt"]) == ("RUNNING", 1)  # nothing requeued

    # A real move: machine 1 is gone for good, its job process with it (here: it ends), and the moved
    # directory runs on machine 2, named once.  The job it ran there is reported lost and runs again,
    # as the README says (the operator's word that machine 1 is gone allows it).
    gate.touch()
    cluster.wait_for(lambda: (truth_dir / "ends").exists(), what="machine 1's job process to end")
    cluster.start_agent("node1", "--machine-id-file", str(machine2), "--moved-from", M1, key="copy", slots=2)
    assert ("machine", M2) in meta(copy)
    assert cluster.log_text("copy").count(f"moved from machine {M1} to this machine {M2} (--moved-from)") == 1
    record = cluster.wait_job(job)
    assert (record["state"], record["attempt"]) == ("COMPLETED", 2)
    assert (truth_dir / "runs").read_text().splitlines() == ["ran", "ran"]


def test_an_older_copy_on_the_same_machine_is_refused_for_good(cluster, truth_dir):
    """A state directory restored from an older backup (or a VM cloned before the agent joined again) keeps the
    machine id; the join generation it presents is older than the one node1 has since shown it stored."""
    (machine := cluster.base / "machine").write_text(f"{M1}\n")
    cluster.start_controller()
    cluster.start_agent("node1", "--machine-id-file", str(machine), slots=2)  # join generation 1
    cluster.stop("node1")
    backup = cluster.base / "backup"
    shutil.copytree(cluster.agent_dir("node1"), backup)  # holds generation 1
    cluster.start_agent("node1")  # joins again: generation 2, shown by what it sends next
    gate = truth_dir / "go"
    job = cluster.submit("sh", "-c", f"echo ran >> {truth_dir}/runs; while [ ! -e {gate} ]; do sleep 0.05; done")
    cluster.wait_job(job, states=("RUNNING",))
    cluster.kill("node1")  # away (its job process is not)
    cluster.wait_node("node1", ("DISCONNECTED",))

    shutil.copytree(backup, cluster.agent_dir("restored"))
    cluster.start_agent("node1", "--machine-id-file", str(machine), key="restored", slots=2, wait_joined=False)
    stale = "this agent's state directory is an older copy of its own (it presents join generation 1; the agent " \
            "has since stored 2)"
    cluster.wait_for(lambda: stale in cluster.log_text("restored"), what="the older copy to be refused")
    record = cluster.job(job)
    assert (record["state"], record["attempt"]) == ("RUNNING", 1)  # nothing requeued
    assert cluster.running("restored")  # it keeps retrying at the refusal pace, logging once
    assert cluster.log_text("restored").count(stale) == 1
    assert cluster.log_text("controller").count(stale) == 1
    gate.touch()
    cluster.wait_for(lambda: (truth_dir / "runs").read_text().splitlines() == ["ran"], what="one run")
