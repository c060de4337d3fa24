"""The CLI is a contract scripts rely on: what it prints, how it fails, what cancel does."""

from __future__ import annotations

import json
import re
import signal
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

JOB_FIELDS = {"id", "name", "state", "agent", "attempt", "exit_code", "signal", "submitted_at", "started_at",
              "finished_at"}
NODE_FIELDS = {"name", "state", "slots", "used"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_contract(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)

    # submit prints the id alone; --json the job object.
    out = cluster.cli("submit", "--name", "quick", "--", "sh", "-c", "echo out; echo err >&2; exit 0")
    assert re.fullmatch(r"\d+\n", out), out
    quick = out.strip()
    obj = json.loads(cluster.cli("submit", "--json", "--name", "two", "--", "sh", "-c", "exit 2"))
    assert JOB_FIELDS <= set(obj), set(obj)
    assert obj["name"] == "two" and obj["state"] in ("PENDING", "RUNNING") and obj["attempt"] == 1
    assert obj["exit_code"] is None and obj["finished_at"] is None and isinstance(obj["submitted_at"], float)
    two = obj["id"]

    done = cluster.wait_jobs([quick, two])
    assert (done[quick]["state"], done[quick]["exit_code"]) == ("COMPLETED", 0)
    assert (done[two]["state"], done[two]["exit_code"]) == ("FAILED", 2)
    shown = cluster.job(two)
    assert JOB_FIELDS <= set(shown)
    assert {k: shown[k] for k in JOB_FIELDS} == {k: done[two][k] for k in JOB_FIELDS}
    assert shown["agent"] == "a1" and shown["signal"] is None
    assert shown["submitted_at"] <= shown["started_at"] <= shown["finished_at"]
    assert list(cluster.jobs(state="FAILED")) == [two]
    # show names the job's real output files on its agent.
    logs = cluster.job(quick)
    assert (Path(logs["stdout"]).read_text(), Path(logs["stderr"]).read_text()) == ("out\n", "err\n")
    # The plain (non-JSON) forms work too.
    assert "FAILED" in cluster.cli("jobs") and "a1" in cluster.cli("nodes")
    assert re.search(r"exit_code:\s+2", cluster.cli("show", two))

    # Unknown jobs, bad input, an unreachable controller: non-zero, one line, a reason.
    assert "unknown job" in cluster.one_line_reason(cluster.run("show", "4242"))
    assert "unknown job" in cluster.one_line_reason(cluster.run("cancel", "4242"))
    assert "already" in cluster.one_line_reason(cluster.run("cancel", quick))
    assert "no command" in cluster.one_line_reason(cluster.run("submit"))
    url = f"ws://127.0.0.1:{_closed_port()}"
    reason = cluster.one_line_reason(cluster.run("jobs", controller=url))
    assert "unreachable" in reason and url in reason, reason
    assert not reason.rstrip().endswith(":"), f"the reason is missing: {reason!r}"

    # Cancel a running job: SIGTERM to its process group, recorded as CANCELLED with signal 15.
    long = cluster.submit("sleep", "60", name="long")
    cluster.wait_job(long, states=("RUNNING",))
    info = cluster.wait_for(lambda: cluster.pid_file("a1", long), what="the sleep to start")
    out = cluster.cli("cancel", long)
    assert out.strip() in (f"{long} RUNNING (cancel requested)", f"{long} CANCELLED"), out
    record = cluster.wait_job(long)
    assert (record["state"], record["signal"], record["exit_code"]) == ("CANCELLED", signal.SIGTERM, None)
    assert not cluster.alive(info["job_pid"], info["job_start"]), "the cancelled job is still running"
    assert record["finished_at"] - record["started_at"] < 30, "it ran to its end instead of being cancelled"

    nodes = cluster.cli_json("nodes")
    assert [set(n) >= NODE_FIELDS for n in nodes] == [True]
    assert (nodes[0]["name"], nodes[0]["slots"], nodes[0]["used"]) == ("a1", 2, 0)
    assert nodes[0]["state"] == "IDLE"
