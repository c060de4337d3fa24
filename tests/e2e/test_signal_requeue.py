"""Protocol version 7 through the real CLI and daemons: a RUNNING job requeued (it runs twice,
and the first attempt's outcome is not the job's), `reckon signal`, `reckon submit --hold`."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def test_requeue_of_a_running_job_runs_it_again_and_keeps_the_stopped_attempt_out_of_its_outcome(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    runs = tmp_path / "runs"
    # The first attempt waits to be stopped; the second ends at once.
    script = f'echo "$RECKON_ATTEMPT" >> {runs}; [ "$RECKON_ATTEMPT" = 1 ] && exec sleep 60; exit 0'
    job = cluster.cli("submit", "--", "sh", "-c", script).strip()
    cluster.wait_job(job, ("RUNNING",))
    wait_for(lambda: runs.exists() and runs.read_text() == "1\n", what="the first attempt running")
    cluster.cli("requeue", job)
    done = cluster.wait_job(job, ("COMPLETED", "FAILED", "CANCELLED"))
    assert (done["state"], done["attempt"], done["requeues"], done["exit_code"], done["signal"]) == (
        "COMPLETED", 2, 1, 0, None)
    assert done["retried"] == 0  # a requeue, not a retry
    assert runs.read_text() == "1\n2\n"
    cluster.stop("controller")
    kinds = [(type(f).__name__, getattr(f, "attempt", None)) for f in cluster.facts() if getattr(f, "job", None) == job]
    assert ("JobRequeueRequested", 1) in kinds
    finished = [f for f in cluster.facts() if type(f).__name__ == "JobFinished" and f.job == job]
    assert [(f.attempt, f.signal) for f in finished] == [(1, 15), (2, None)]  # the stop stays attempt 1's


def test_signal_reaches_a_running_job_and_submit_hold_starts_held(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    got, up = tmp_path / "got", tmp_path / "up"
    held = cluster.cli("submit", "--hold", "--", "true").strip()
    shown = cluster.job(held)
    assert (shown["state"], shown["held"]) == ("PENDING", True)
    assert "only a RUNNING job" in cluster.one_line_reason(cluster.run("signal", held, "USR1"))
    assert cluster.run("signal", held, "NOPE").returncode == 2
    script = f'trap "echo got > {got}; exit 0" USR1; echo up > {up}; while :; do sleep 0.05 & wait; done'
    job = cluster.cli("submit", "--", "sh", "-c", script).strip()
    cluster.wait_file(up)
    assert cluster.cli("signal", job, "SIGUSR1") == f"signal 10 sent to job {job}\n"
    done = cluster.wait_job(job)
    assert (done["state"], done["exit_code"]) == ("COMPLETED", 0) and got.read_text() == "got\n"
    cluster.cli("release", held)
    assert cluster.wait_job(held)["state"] == "COMPLETED"
