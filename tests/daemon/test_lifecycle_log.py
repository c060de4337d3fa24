"""The lifecycle log's lines (daemon/controller/lifecycle.py, daemon/agent/lifecycle.py) and the log set-up."""

from __future__ import annotations

import io
import json
import logging

from reckon.daemon.agent import lifecycle as agent_lifecycle
from reckon.daemon.controller import lifecycle
from reckon.daemon.ops.logformat import setup_logging
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from reckon.model.nodes import NodeState


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "reckon.lifecycle"]


def test_every_fact_kind_has_a_line_or_is_named_as_logged_elsewhere():
    assert set(lifecycle.FACT_LINES) == set(F.FACT_TYPES.values())


def test_fact_lines(caplog):
    caplog.set_level(logging.INFO, logger="reckon.lifecycle")
    lifecycle.log_facts([
        F.JobSubmitted(job="1", spec=JobSpec(name="build", command=("make",), slots=2), submitted_at=1.0),
        F.JobFinished(job="1", attempt=2, exit_code=None, signal=15, finished_at=2.0, via="round"),
        F.JobRequeued(job="1", attempt=1, reason="agent lost"),
        F.JobIdsReserved(upto=9),  # the server explains it: no line here
    ])
    assert _lines(caplog) == [
        "job 1 submitted: 'build', 2 slot(s)",
        "job 1 attempt 2 finished: killed by SIGTERM (15) (found by a resync round)",
        "job 1 attempt 1 requeued: agent lost",
    ]


def test_round_lines_carry_their_counts(caplog):
    caplog.set_level(logging.INFO, logger="reckon.lifecycle")
    lifecycle.round_opened("a1", bytes.fromhex("0badc0de99"), 12)
    lifecycle.round_resolved("a1", bytes.fromhex("0badc0de99"), 0.25, 0.5, 12)
    assert _lines(caplog) == [
        "resync round 0badc0de with agent a1 started: 12 job(s) queried",
        "resync round 0badc0de with agent a1 ended after 0.250s, 0.500s since its join (12 job(s) queried)",
    ]


def test_node_tracker_logs_each_change_of_connection_once_and_keeps_since(caplog):
    caplog.set_level(logging.INFO, logger="reckon.lifecycle")
    now = [100.0]
    tracker = lifecycle.NodeTracker(clock=lambda: now[0])
    tracker.observe("a1", NodeState.RECONCILING, slots=4)
    now[0] = 101.0
    tracker.observe("a1", NodeState.IDLE, slots=4)
    tracker.observe("a1", NodeState.IDLE, slots=4)  # no change: nothing
    now[0] = 102.0
    tracker.observe("a1", NodeState.MIXED, slots=4)  # busy-ness is not a lifecycle event
    tracker.observe("a1", NodeState.DISCONNECTED)
    now[0] = 110.0
    tracker.observe("a1", NodeState.LOST)
    assert tracker.since("a1") == 110.0
    tracker.observe("a1", None)  # forgotten
    assert tracker.since("a1") is None
    assert _lines(caplog) == [
        "agent a1 joined (4 slot(s))",
        "agent a1 disconnected",
        "agent a1 lost: silent too long, its jobs were requeued",
    ]


def test_agent_lines(caplog):
    caplog.set_level(logging.INFO, logger="reckon.lifecycle")
    finished = M.Finished(job="3", attempt=1, exit_code=0, signal=None, started_at=1.0, finished_at=2.0)
    agent_lifecycle.log_commands([
        (E.StartProcess(job="3", attempt=1, spec=JobSpec(name="j", command=("true",))), None),
        (E.OutboxPut(report=finished), None),
        (E.OutboxDelete(job="3", attempt=1), None),
    ])
    assert _lines(caplog) == [
        "job 3 attempt 1 starting: 'j'",
        "job 3 attempt 1 finished: exit code 0",
        "job 3 attempt 1: outcome recorded by the controller",
    ]


def test_json_log_format_and_quiet_websocket_loggers():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        setup_logging(verbose=True, log_format="json", stream=stream)
        logging.getLogger("reckon.lifecycle").info("job %s submitted", "1")
        logging.getLogger("trio-websocket").debug("frame bytes")  # -v: still not logged
        logging.getLogger("wsproto").debug("frame bytes")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["message"] == "job 1 submitted" and obj["logger"] == "reckon.lifecycle" and obj["level"] == "INFO"
    assert obj["time"].endswith("Z")
