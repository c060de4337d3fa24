"""Why pending end to end (issue #22): `reckon show`, `reckon jobs` and squeue / scontrol / sacct give
one reason code per PENDING job, the controller's (model/pending.py), on a real controller and agent."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import cluster, hang_guard, wait_for  # noqa: F401 (fixtures)
from tests.slurm.test_query_e2e import slurm

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def test_show_jobs_and_the_slurm_commands_give_the_same_reason(cluster):
    cluster.start_controller()
    cluster.start_agent("a1", slots=1)
    running = cluster.submit("sleep", "60")
    cluster.wait_job(running, ("RUNNING",))
    first, second = cluster.submit("true"), cluster.submit("true")
    held = cluster.cli("submit", "--hold", "--", "true").strip()
    after = cluster.cli("submit", "--after", first, "--", "true").strip()
    expected = {first: "Resources", second: "Priority", held: "JobHeldUser", after: "Dependency"}

    def codes() -> dict[str, str] | None:
        shown = {job: cluster.cli_json("show", job)["pending_code"] for job in expected}
        return shown if shown == expected else None  # the scheduler's pass has met the first one

    wait_for(codes, what="the reasons after a scheduling pass")
    # reckon show: one line, the code first, then the words.
    lines = [line for line in cluster.cli("show", second).splitlines() if line.startswith("why pending:")]
    assert len(lines) == 1 and lines[0].split()[2] == "Priority:" and "queued before it" in lines[0]
    # reckon jobs: a REASON column for the PENDING jobs, "-" for the running one.
    table = cluster.cli("jobs").splitlines()
    column = table[0].split().index("REASON")
    assert {row.split()[0]: row.split()[column] for row in table[1:]} == {**expected, running: "-"}
    # squeue's %r and %R, scontrol's Reason=, sacct's Reason: the controller's code, as show gave it.
    rows = dict(line.split(" ", 1) for line in slurm(cluster, "squeue", "-h", "-t", "PD", "-o", "%i %r").splitlines())
    assert rows == expected
    long = dict(line.split(" ", 1) for line in slurm(cluster, "squeue", "-h", "-t", "PD", "-o", "%i %R").splitlines())
    assert long == {job: f"({code})" for job, code in expected.items()}
    for job, code in expected.items():
        assert f"Reason={code} " in slurm(cluster, "scontrol", "show", "job", job)
    sacct = slurm(cluster, "sacct", "-n", "-X", "-P", "-j", ",".join(expected), "-o", "JobID,Reason").split()
    assert dict(line.split("|") for line in sacct) == expected
    # The Python API: Job.pending_code, from show and from jobs.
    import reckon

    with reckon.Client(cluster.url, cluster.token) as client:
        assert client.job(second).pending_code == "Priority"
        assert {j.id: j.pending_code for j in client.jobs(state="PENDING")} == expected
    cluster.cli("cancel", running)
    cluster.wait_jobs([first, second, after], ("COMPLETED",))
