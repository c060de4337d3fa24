"""`reckon logs`, `submit --output/--error`, and `agent --keep-output`, through the CLI with real processes.

Every wait is on a condition under a hang guard; every process is cleaned up by the
cluster fixture (and the `logs --follow` processes here by their own ``finally``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tests.e2e.conftest import HANG, hermetic_env, reckon_argv

pytestmark = pytest.mark.e2e


def _follow(cluster, *args: str) -> subprocess.Popen:
    """`reckon logs --follow ...` in the background, its stdout and stderr in files under the cluster's base."""
    with open(cluster.base / "follow.out", "wb") as out, open(cluster.base / "follow.err", "wb") as err:
        return subprocess.Popen(reckon_argv() + ["logs", "--follow", *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=hermetic_env(RECKON_CONTROLLER=cluster.url),
                                cwd=cluster.base)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_logs_of_a_finished_job_its_stderr_and_where_show_says_they_are(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    job = cluster.submit("sh", "-c", "echo out; echo err >&2; echo more")
    cluster.wait_job(job, ("COMPLETED",))
    assert cluster.cli("logs", job) == "out\nmore\n"
    assert cluster.cli("logs", job, "--stderr") == "err\n"
    assert cluster.cli("logs", job, "--attempt", "1") == "out\nmore\n"
    shown = cluster.cli_json("show", job)
    assert Path(shown["stdout"]).read_text() == "out\nmore\n" and Path(shown["stderr"]).read_text() == "err\n"


def test_each_case_without_output_is_one_line(cluster):
    cluster.start_controller()
    pending = cluster.cli("submit", "--queue-anyway", "--", "true").strip()  # no agent yet: it cannot start
    reason = cluster.one_line_reason(cluster.run("logs", pending))
    assert reason == f"reckon: job {pending} has not started yet (PENDING)"
    assert cluster.one_line_reason(cluster.run("logs", "999")) == "reckon: unknown job 999"

    cluster.start_agent("a1")
    cluster.wait_job(pending, ("COMPLETED",))
    assert cluster.one_line_reason(cluster.run("logs", pending, "--attempt", "2")) == \
        f"reckon: job {pending} has no attempt 2 (its latest is 1)"

    cluster.stop("a1")
    cluster.wait_node("a1", ("DISCONNECTED",))
    assert cluster.one_line_reason(cluster.run("logs", pending)) == \
        f"reckon: agent a1, which holds the output of job {pending} attempt 1, is not connected"


def test_follow_streams_while_it_runs_and_ends_once_drained(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    go = cluster.base / "go"
    job = cluster.submit("sh", "-c", f"echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo second")
    follower = _follow(cluster, job)
    try:
        cluster.wait_for(lambda: (cluster.base / "follow.out").read_bytes() == b"first\n")
        assert follower.poll() is None  # still running: the job has not ended
        go.touch()
        assert follower.wait(timeout=HANG) == 0
    finally:
        _stop(follower)
    assert (cluster.base / "follow.out").read_bytes() == b"first\nsecond\n"
    assert (cluster.base / "follow.err").read_bytes() == b""


def test_follow_waits_for_a_disconnected_agent(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    job = cluster.submit("sh", "-c", "echo hello")
    cluster.wait_job(job, ("COMPLETED",))
    cluster.stop("a1")
    cluster.wait_node("a1", ("DISCONNECTED",))
    follower = _follow(cluster, job)
    try:
        said = f"reckon: agent a1, which holds the output of job {job} attempt 1, is not connected; waiting (--follow)\n"
        cluster.wait_for(lambda: (cluster.base / "follow.err").read_text() == said)
        cluster.start_agent("a1")
        assert follower.wait(timeout=HANG) == 0
    finally:
        _stop(follower)
    assert (cluster.base / "follow.out").read_bytes() == b"hello\n"
    assert (cluster.base / "follow.err").read_text() == said  # said once, however long it waited


def test_large_output_streams_in_chunks(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    lines = 500_000  # 5 MB: many times the relay's chunk (256 KiB) and the protocol's cap (1 MiB)
    job = cluster.submit("python3", "-c", f"for i in range({lines}): print(f'{{i:09d}}')")
    cluster.wait_job(job, ("COMPLETED",))
    out = cluster.cli("logs", job, timeout=120)
    assert len(out) == 10 * lines
    assert out == "".join(f"{i:09d}\n" for i in range(lines))


def test_output_and_error_patterns(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    work = cluster.base / "work"
    (work / "logs").mkdir(parents=True)
    job = cluster.cli("submit", "--cwd", str(work), "--output", "logs/%j.%a.out", "-e", str(work / "%j-err%%"),
                      "--", "sh", "-c", "echo to-out; echo to-err >&2").strip()
    cluster.wait_job(job, ("COMPLETED",))
    assert (work / "logs" / f"{job}.1.out").read_text() == "to-out\n"
    assert (work / f"{job}-err%").read_text() == "to-err\n"
    shown = cluster.cli_json("show", job)
    assert (shown["stdout"], shown["stderr"]) == (str(work / "logs" / f"{job}.1.out"), str(work / f"{job}-err%"))
    assert cluster.cli("logs", job) == "to-out\n"
    assert cluster.cli("logs", job, "--stderr") == "to-err\n"
    # A bad pattern is the controller's one-line refusal (the light CLI sends the spec unchecked:
    # docs/performance.md), and nothing is submitted.
    result = cluster.run("submit", "--output", "out.%q", "--", "true")
    assert result.returncode == 1 and "unknown pattern %q" in cluster.one_line_reason(result)
    assert len(cluster.jobs()) == 1


def test_retention_deletes_old_acknowledged_output_and_never_unacknowledged(cluster):
    keep_days = "0.00002"  # 1.7 s
    cluster.start_controller()
    cluster.start_agent("a1", "--keep-output", keep_days, "--recent-window", "0.2")
    jobs_dir = cluster.agent_dir("a1") / "jobs"
    acked = cluster.submit("sh", "-c", "echo acked")
    cluster.wait_job(acked, ("COMPLETED",))
    cluster.wait_for(lambda: not (jobs_dir / f"{acked}.1.run").exists())  # acknowledged, and forgotten

    go = cluster.base / "go"
    unacked = cluster.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; echo unacked")
    cluster.wait_job(unacked, ("RUNNING",))
    cluster.kill("controller")  # its outcome cannot be acknowledged now
    go.touch()
    cluster.wait_for(lambda: cluster.status_file("a1", unacked) is not None)

    def old_enough(path: Path) -> bool:
        return time.time() - path.stat().st_mtime > 2.5
    cluster.wait_for(lambda: old_enough(jobs_dir / f"{unacked}.1.stdout") and
                     old_enough(jobs_dir / f"{acked}.1.stdout"))
    cluster.stop("a1")
    cluster.start_agent("a1", wait_joined=False)  # a sweep at start, with the controller still down
    cluster.wait_for(lambda: "output retention: deleted the output of 1 finished attempt(s)" in cluster.log_text("a1"))
    assert (jobs_dir / f"{acked}.1.stdout").read_bytes() == b""
    assert (jobs_dir / f"{unacked}.1.stdout").read_text() == "unacked\n"

    cluster.start_controller()
    cluster.wait_job(unacked, ("COMPLETED",))
    assert cluster.cli("logs", unacked) == "unacked\n"
    reason = cluster.one_line_reason(cluster.run("logs", acked))
    assert reason == (f"reckon: job {acked} attempt 1 on agent a1: the output of job {acked} attempt 1 was deleted "
                      f"by this agent's output retention (--keep-output {float(keep_days):g} days)")
