"""--log-file on both daemons, and SIGHUP reopening it after a rename (what logrotate does)."""

from __future__ import annotations

import os
import signal
import stat

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
