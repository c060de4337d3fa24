"""Issue #22's priorities through the real CLI and controller: --nice, reckon update --priority,
the PRIORITY column and reckon priority JOB."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_nice_and_an_operators_priority_move_a_pending_job(cluster):
    # Age off (its factor moves between two submits), shares from the file: its [priority] table.
    config = cluster.base / "reckon.toml"
    config.write_text('[priority]\nweight_age = 0\nhalf_life = "2d"\n[priority.shares]\nalice = 3\n')
    cluster.start_controller("--config", str(config))  # no agent: the jobs stay PENDING
    nice = cluster.cli("submit", "--queue-anyway", "--nice", "100", "--", "true").strip()
    plain = cluster.cli("submit", "--queue-anyway", "--", "true").strip()
    jobs = {j["id"]: j for j in cluster.cli_json("jobs")}
    assert jobs[plain]["priority"] - jobs[nice]["priority"] == 100
    table = cluster.cli("jobs")
    assert "PRIORITY" in table.splitlines()[0]
    cluster.cli("update", nice, "--priority", "1000")
    jobs = {j["id"]: j for j in cluster.cli_json("jobs")}
    assert jobs[nice]["priority"] - jobs[plain]["priority"] == 900  # -100 + 1000
    factors = cluster.cli_json("priority", nice)
    assert (factors["nice"], factors["adjust"], factors["priority"]) == (100, 1000, jobs[nice]["priority"])
    assert "FAIRSHARE" in cluster.cli("priority", nice)
