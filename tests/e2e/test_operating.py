"""Operating a real cluster (issue #11 part B): the lifecycle log, history, drain/resume, metrics.

Real processes on loopback; the controller and agent run with ``-v
--log-format json --metrics 127.0.0.1:0``; the test reads their log lines,
the CLI's answers, and scrapes both metrics endpoints over real sockets.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

LOG_OPTIONS = ("-v", "--log-format", "json", "--metrics", "127.0.0.1:0")


def _log_objects(cluster, key: str) -> list[dict]:
    lines = cluster.log_text(key).splitlines()
    objects = [json.loads(line) for line in lines if line.strip()]  # every line is one JSON object
    assert objects and all({"time", "level", "logger", "message"} <= set(o) for o in objects)
    return objects


def _messages(cluster, key: str) -> list[str]:
    return [o["message"] for o in _log_objects(cluster, key)]


def _metrics_port(cluster, key: str) -> int:
    def port() -> int | None:
        for message in _messages(cluster, key) if cluster.log_text(key) else ():
            found = re.match(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", message)
            if found:
                return int(found[1])
        return None

    return cluster.wait_for(port, what=f"{key}'s metrics port in its log")


def _scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.samples
    return families


def _value(families: dict[str, list], sample_name: str, **labels: str) -> float:
    for samples in families.values():
        for s in samples:
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {sample_name} {labels}")


def test_lifecycle_log_history_drain_and_metrics(cluster, tmp_path: Path) -> None:
    cluster.start_controller("--rejoin-grace", "0", *LOG_OPTIONS)
    cluster.start_agent("a1", *LOG_OPTIONS, slots=2)
    gate = tmp_path / "gate"
    failed = cluster.submit("sh", "-c", "exit 3", name="fails")
    killed = cluster.submit("sh", "-c", "kill -9 $$", name="killed")
    cluster.wait_jobs([failed, killed])
    held = cluster.submit("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done", name="held")
    cluster.wait_job(held, states=("RUNNING",))
    # The start is its own fact (and log line) once the agent's Started report is in: wait for it,
    # or a cancel racing it may bring the start only inside the finish.
    cluster.wait_for(lambda: json.loads(cluster.cli("show", held, "--json"))["started_at"] is not None,
                     what=f"job {held}'s start recorded")
    cluster.cli("cancel", held)
    assert cluster.wait_job(held)["state"] == "CANCELLED"

    # An attempt lost with its agent: a2 dies with a job on it; the operator forgets it.
    cluster.start_agent("a2", slots=1)
    cluster.cli("drain", "a1")  # so the next job can only go to a2
    moved = cluster.submit("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done", name="moved")
    assert cluster.wait_job(moved, states=("RUNNING",))["agent"] == "a2"
    cluster.kill("a2")
    cluster.wait_node("a2", ("DISCONNECTED",))
    assert "forgot a2: 1 job(s) requeued" in cluster.cli("forget", "a2")
    assert "a2" not in cluster.nodes()  # a forgotten node with no jobs is gone from `nodes`

    # a1 is drained: the requeued job waits, and `show` says why.
    node = cluster.nodes()["a1"]
    assert node["state"] == "DRAINED" and node["drained"] and node["since"] is not None
    shown = cluster.job(moved)
    assert shown["state"] == "PENDING" and shown["pending_reason"] == "waiting for 1 free slot: agent a1 is drained"
    assert "why pending:  ReqNodeNotAvail: waiting for 1 free slot: agent a1 is drained" in cluster.cli("show", moved)
    assert "(it already was drained)" in cluster.cli("drain", "a1")
    assert cluster.cli("resume", "a1").startswith("resumed a1: now ")
    gate.write_text("")
    assert cluster.wait_job(moved)["state"] == "COMPLETED"
    cluster.wait_node("a1", ("IDLE",))

    # History: every attempt, how its outcome arrived, every requeue and cancel with its reason.
    h = cluster.cli_json("history", failed)
    assert not h["compacted"] and len(h["attempts"]) == 1
    first = h["attempts"][0]
    assert (first["agent"], first["exit_code"], first["signal"], first["via"], first["ended"]) == (
        "a1", 3, None, "report", "finished")
    assert first["started_at"] is not None and first["finished_at"] >= first["started_at"]
    assert cluster.cli_json("history", killed)["attempts"][0]["signal"] == 9
    h = cluster.cli_json("history", held)
    assert [e["event"] for e in h["events"]] == ["cancel_requested"]
    assert (h["attempts"][0]["ended"], h["attempts"][0]["signal"]) == ("cancelled", 15)  # the kill's SIGTERM
    h = cluster.cli_json("history", moved)
    assert [(a["attempt"], a["agent"], a["ended"]) for a in h["attempts"]] == [
        (1, "a2", "requeued"), (2, "a1", "finished")]
    assert h["attempts"][0]["reason"] == "agent forgotten by the operator"
    assert h["events"] == [{"event": "requeued", "attempt": 1, "reason": "agent forgotten by the operator"}]
    text = cluster.cli("history", moved)
    assert "requeued attempt 1: agent forgotten by the operator" in text and "ATTEMPT" in text
    bad = cluster.run("history", "999")
    assert cluster.one_line_reason(bad) == "reckon: unknown job '999'"
    assert cluster.one_line_reason(cluster.run("drain", "nobody")) == "reckon: unknown agent 'nobody'"

    # The lifecycle log: one line per event, from both daemons.
    lines = _messages(cluster, "controller")
    for expected in (
        f"job {failed} submitted: 'fails', 1 slot(s)",
        f"job {failed} attempt 1 dispatched to agent a1",
        f"job {held} attempt 1 started",
        f"job {failed} attempt 1 finished: exit code 3 (reported by the agent)",
        f"job {killed} attempt 1 finished: killed by SIGKILL (9) (reported by the agent)",
        f"job {held} cancel requested: its process is being killed",
        f"job {moved} attempt 1 requeued: agent forgotten by the operator",
        "agent a1 joined (2 slot(s))",
        "agent a2 disconnected",
        "agent a1 drained: no new jobs there; running jobs finish",
        "agent a1 resumed: it takes new jobs again",
    ):
        assert lines.count(expected) == 1, (expected, [line for line in lines if line.startswith(expected[:12])])
    agent_lines = _messages(cluster, "a1")
    assert f"job {failed} attempt 1 finished: exit code 3" in agent_lines
    assert f"job {failed} attempt 1: outcome recorded by the controller" in agent_lines
    # -v adds protocol detail, never the WebSocket layers' frame dumps.
    for key in ("controller", "a1"):
        loggers = {o["logger"] for o in _log_objects(cluster, key)}
        assert not {"trio-websocket", "wsproto"} & loggers, loggers

    # Metrics, scraped over real sockets and parsed as Prometheus text.
    families = _scrape(_metrics_port(cluster, "controller"))
    assert _value(families, "reckon_jobs", state="COMPLETED") == 1
    assert _value(families, "reckon_jobs", state="FAILED") == 2
    assert _value(families, "reckon_jobs", state="CANCELLED") == 1
    assert _value(families, "reckon_jobs_submitted_total") == 4
    assert _value(families, "reckon_jobs_requeued_total") == 1
    assert _value(families, "reckon_dispatch_to_start_seconds_count") >= 4
    assert _value(families, "reckon_finish_to_recorded_seconds_count") == 4  # three ends, one cancel
    assert _value(families, "reckon_group_commit_facts_count") >= 1
    assert _value(families, "reckon_agents", state="IDLE") == 1
    assert _value(families, "reckon_fact_log_bytes") > 0
    # Accounting per user, from the job table (token mode: the jobs have no owner).
    assert _value(families, "reckon_user_wall_seconds_total", user="(none)") > 0
    assert _value(families, "reckon_user_cpu_seconds_total", user="(none)", mode="user") >= 0
    agent = _scrape(_metrics_port(cluster, "a1"))
    assert _value(agent, "reckon_agent_outbox_depth") == 0
    assert _value(agent, "reckon_agent_session", state="OPERATING") == 1
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{_metrics_port(cluster, 'a1')}/other", timeout=10)
