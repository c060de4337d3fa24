"""--log-file on both daemons, and SIGHUP reopening it after a rename (what logrotate does)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_sighup_reopens_the_log_file_after_a_rename(cluster, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    controller_log, agent_log = logs / "controller.log", logs / "agent.log"
    cluster.start_controller("--log-file", str(controller_log))
    cluster.start_agent("a1", "--log-file", str(agent_log))
    cluster.wait_for(lambda: "recovered 0 jobs" in controller_log.read_text(), what="the controller's first line")
    cluster.wait_for(lambda: "connected to" in agent_log.read_text(), what="the agent's first line")
    assert stat.S_IMODE(os.stat(controller_log).st_mode) == 0o600
    assert cluster.log_text("controller") == ""  # nothing on stderr: it all went to the file

    for key, path in (("controller", controller_log), ("a1", agent_log)):
        path.rename(path.with_name(path.name + ".1"))
        cluster.signal(key, signal.SIGHUP)
        cluster.wait_for(lambda: path.exists() and "SIGHUP: reopened" in path.read_text(),
                         what=f"{key} to reopen {path.name}")
        assert cluster.running(key), f"{key} stopped on SIGHUP"
        assert "SIGHUP" not in path.with_name(path.name + ".1").read_text()

    # Later lines go to the new files only: each daemon logs its stop there.
    for key, path in (("a1", agent_log), ("controller", controller_log)):
        cluster.stop(key)
        assert "SIGTERM: stopping" in path.read_text()
        assert "SIGTERM" not in path.with_name(path.name + ".1").read_text()


def test_without_a_log_file_sighup_is_a_clean_stop(cluster):
    cluster.start_controller()
    cluster.signal("controller", signal.SIGHUP)
    cluster.wait_for(lambda: not cluster.running("controller"), what="the controller to stop")
    assert cluster.daemons["controller"].proc.returncode == 0
    assert "SIGHUP: stopping" in cluster.log_text("controller")


def test_with_log_format_json_every_line_either_daemon_writes_is_json(tmp_path):
    """stdout's start-up line too (a plain banner broke log shippers reading the journal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    argv = [sys.executable, "-m", "reckon.daemon.cli"]
    controller = subprocess.Popen([*argv, "controller", "--listen", "127.0.0.1:0", "--state-dir",
                                   str(tmp_path / "c"), "--log-format", "json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    procs = [controller]
    try:
        first = json.loads(controller.stdout.readline())
        assert (first["level"], first["logger"]) == ("INFO", "reckon.controller"), first
        url = first["message"].removeprefix("reckon controller listening on ")
        assert url.startswith("ws://127.0.0.1:"), first
        agent = subprocess.Popen([*argv, "agent", "--name", "a1", "--slots", "1", "--state-dir", str(tmp_path / "a"),
                                  "--controller", url, "--log-format", "json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(agent)
        assert json.loads(agent.stdout.readline())["message"] == "reckon agent a1 running (1 slots)"
    finally:
        outputs = []
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            outputs.append(proc.communicate(timeout=30))
    lines = [line for out, err in outputs for line in (out + err).splitlines()]
    assert any("stopping" in json.loads(line)["message"] for line in lines), lines
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(json.loads(line)), line
