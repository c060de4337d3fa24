"""The e2e teardown removes the cgroups of the attempts it kills.

A supervisor SIGKILLed at teardown never removes its attempt's cgroup, and the test's agent (a
fresh identity each test) never starts again to clean it: without this, every e2e test that ends
with a job running left ``reckon/a1-<identity>/<job>.<attempt>`` under each v1 controller.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.conftest import agent_cgroups, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.long]  # checks the teardown every e2e test runs: 5 s


def test_teardown_removes_a_running_attempts_cgroup(cluster):
    cluster.start_controller()
    cluster.start_agent("a1", slots=1)
    job = cluster.submit("sh", "-c", "sleep 300 & sleep 300")
    cluster.wait_job(job, ("RUNNING",))
    wait_for(lambda: cluster.pid_file("a1", job), what="the attempt's pid record")
    specs = agent_cgroups(cluster.agent_dir("a1"))  # a job is in its cgroup from birth
    if not specs:
        pytest.skip("the agent puts jobs in no v1 cgroup here (not root, or no v1 controllers)")
    dirs = [d for spec in specs for d in spec["dirs"].values()]
    assert any(os.path.exists(os.path.join(d, "cgroup.procs")) for d in dirs)
    cluster.close()
    left = [d for d in dirs if os.path.exists(d)]
    assert not left, f"teardown left the attempt's cgroups: {left}"
    assert not agent_cgroups(cluster.agent_dir("a1"))
