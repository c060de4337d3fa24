"""Every client operation that goes through the fact store, through the CLI, on both stores: a
controller on SQLite (--state-dir) and one on a real PostgreSQL (--store), with a real agent.

`reckon history` failed on every controller on PostgreSQL ("controller ... closed the connection:
code 1000"); on PostgreSQL a restart also skipped a block of 1000 job ids.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, cluster) -> str:
    """Start the controller on the store named by the parameter; the DSN on PostgreSQL, else ""."""
    if request.param == "sqlite":
        cluster.start_controller("--rejoin-grace", "0")
        return ""
    dsn = request.getfixturevalue("pg_dsn")
    cluster.port = cluster.start_ha_controller("ctl", dsn, "--rejoin-grace", "0")
    cluster.wait_for(lambda: cluster.run("nodes").returncode == 0, what="the controller to lead")
    return dsn


def test_submit_jobs_show_logs_cancel_and_history_on_each_store(cluster, store):
    cluster.start_agent("a1", slots=2)
    failed = cluster.submit("sh", "-c", "echo out; exit 3", name="failed")
    held = cluster.submit("sleep", "600", name="held")
    assert cluster.wait_job(failed)["exit_code"] == 3
    assert cluster.wait_job(held, ("RUNNING",))["agent"] == "a1"
    assert {failed: "FAILED", held: "RUNNING"}.items() <= {i: j["state"] for i, j in cluster.jobs().items()}.items()
    assert cluster.job(failed)["name"] == "failed"
    assert cluster.cli("logs", failed) == "out\n"
    cluster.cli("cancel", held)
    assert cluster.wait_job(held)["state"] == "CANCELLED"

    h = cluster.cli_json("history", failed)
    assert not h["compacted"] and [(a["agent"], a["exit_code"], a["ended"]) for a in h["attempts"]] == [
        ("a1", 3, "finished")]
    assert [e["event"] for e in cluster.cli_json("history", held)["events"]] == ["cancel_requested"]
    assert "ATTEMPT" in cluster.cli("history", failed)
    assert cluster.one_line_reason(cluster.run("history", "999")) == "reckon: unknown job '999'"

    if store:  # PostgreSQL: a restart on the same database continues the ids from the log
        cluster.stop("ctl")
        cluster.port = cluster.start_ha_controller("ctl-2", store, "--rejoin-grace", "0")
        cluster.wait_for(lambda: cluster.run("nodes").returncode == 0, what="the restarted controller to lead")
        assert cluster.cli("submit", "--queue-anyway", "--", "true").strip() == str(int(held) + 1)
