"""A controller that starts over (new state directory) while an agent keeps its records.

Job ids restart at 1 with a new history, so the agent's record of the *old*
job 1 must never answer for the *new* job 1 (that would record an outcome
from before the job existed).  Every history is named by its first fact
(ClusterCreated); agents tie their records to it, let go of records that no
longer matter when the history changes, and refuse to mix histories while
old records still do.
"""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.e2e


def test_reset_controller_does_not_inherit_old_outcomes(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1")
    old = cluster.submit("sh", "-c", "exit 5")
    assert cluster.wait_job(old)["exit_code"] == 5

    cluster.stop("controller")
    shutil.rmtree(cluster.controller_dir)  # the operator starts the controller afresh
    cluster.start_controller()
    cluster.wait_node("a1", ("IDLE",))
    ran = truth_dir / "ran"
    new = cluster.submit("sh", "-c", f"touch {ran}; exit 0")
    assert new == old  # ids start over: this is what collides

    record = cluster.wait_job(new)
    assert record["finished_at"] >= record["submitted_at"], f"an outcome from before the job existed: {record}"
    assert ran.exists(), "the new job never ran"
    assert (record["state"], record["exit_code"]) == ("COMPLETED", 0)
