"""`reckon dev` stops what it started (issue #9, 8e).

With its default temporary state directory, Ctrl-C used to delete the
directory while the jobs it had started ran on, writing into a deleted
directory with nobody left to learn their outcome.  Now the jobs are stopped
and their supervisors waited for, and only then is the directory deleted.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

HANG = 30.0


def test_dev_ctrl_c_stops_its_jobs_before_deleting_its_state(cluster, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dev, line = cluster.start_dev("--agents", "1", "--slots", "2", tmpdir=tmp)
    state = Path(re.search(r"state in (\S+)$", line)[1])
    assert state.parent == tmp and state.is_dir()

    pid_file = tmp_path / "job.pid"
    cluster.submit("sh", "-c", f"echo $$ > {pid_file}; exec sleep 300")
    cluster.wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the job started")
    job_pid = int(pid_file.read_text())
    assert cluster.alive(job_pid)

    dev.proc.send_signal(signal.SIGINT)  # Ctrl-C
    dev.proc.wait(timeout=HANG)
    assert not cluster.alive(job_pid), "reckon dev left a job running"
    assert not state.exists()
