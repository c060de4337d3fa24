"""`reckon submit` (issue #10): --file (one request, all or none), the working directory, unrunnable jobs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_submit_file_and_stdin(cluster):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    jobs_file = cluster.base / "jobs.txt"
    jobs_file.write_text("# a comment, then a blank line\n\n"
                         "sh -c 'echo \"$1\" > out1' sh 'two words'\n"
                         "   \n"
                         "  # an indented comment\n"
                         "sh -c 'exit 3'\n")
    out = cluster.cli("submit", "--file", str(jobs_file))
    assert re.fullmatch(r"(\d+\n){2}", out), out  # ids alone, one per line, in the file's order
    first, second = out.split()
    assert int(second) == int(first) + 1
    done = cluster.wait_jobs([first, second])
    assert (done[first]["state"], done[second]["exit_code"]) == ("COMPLETED", 3)
    assert (cluster.base / "out1").read_text() == "two words\n"  # quoting kept, run in the submitter's cwd

    # Standard input, and --json: the list of ids.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    env["RECKON_CONTROLLER"] = cluster.url
    result = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "submit", "--file", "-"], input="true\ntrue\ntrue\n",
                            capture_output=True, text=True, env=env, cwd=cluster.base, timeout=30)
    assert result.returncode == 0 and re.fullmatch(r"(\d+\n){3}", result.stdout), result
    assert cluster.cli_json("submit", "--file", str(jobs_file)).__len__() == 2

    # A line that does not parse: status 2, its line number, and nothing submitted.
    count = len(cluster.jobs())
    jobs_file.write_text("true\necho 'unclosed\n")
    reason = cluster.one_line_reason(cluster.run("submit", "--file", str(jobs_file)))
    assert "line 2" in reason, reason
    assert cluster.one_line_reason(cluster.run("submit", "--file", str(cluster.base / "nope"))).startswith(
        "reckon: cannot read")
    (cluster.base / "empty.txt").write_text("# nothing\n\n")
    assert "no command" in cluster.one_line_reason(cluster.run("submit", "--file", str(cluster.base / "empty.txt")))
    assert cluster.run("submit", "--file", str(jobs_file), "--", "true").returncode == 2  # not both
    assert len(cluster.jobs()) == count


def test_cwd_is_the_submitters_and_a_missing_one_fails_the_job(cluster):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    sub = cluster.base / "sub"
    sub.mkdir()
    default = cluster.submit("pwd")  # cluster.run runs the CLI in cluster.base
    relative = cluster.cli("submit", "--cwd", "sub", "--", "pwd").strip()
    missing = cluster.cli("submit", "--cwd", "/nonexistent/reckon-test-dir", "--", "pwd").strip()
    done = cluster.wait_jobs([default, relative, missing])
    assert cluster.job(default)["cwd"] == str(cluster.base)  # recorded at submit
    assert cluster.job(relative)["cwd"] == str(sub)  # made absolute at submit
    assert Path(cluster.job(default)["stdout"]).read_text().strip() == str(cluster.base)
    assert Path(cluster.job(relative)["stdout"]).read_text().strip() == str(sub)
    # A directory missing on the agent: the job FAILED, exit 127, the reason in its stderr; the agent lives on.
    assert (done[missing]["state"], done[missing]["exit_code"]) == ("FAILED", 127)
    assert "cannot change to directory" in Path(cluster.job(missing)["stderr"]).read_text()
    assert cluster.nodes()["a1"]["state"] in ("IDLE", "BUSY")


def test_a_job_no_agent_can_run_is_refused_unless_queued_anyway(cluster):
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    count = len(cluster.jobs())
    reason = cluster.one_line_reason(cluster.run("submit", "--slots", "3", "--", "true"))
    assert "no agent can ever run this job" in reason and "3 slots" in reason and "has 2" in reason, reason
    jobs_file = cluster.base / "jobs.txt"
    jobs_file.write_text("true\ntrue\n")
    reason = cluster.one_line_reason(cluster.run("submit", "--slots", "3", "--file", str(jobs_file)))
    assert "nothing submitted" in reason, reason  # all or none
    assert len(cluster.jobs()) == count
    queued = cluster.cli("submit", "--slots", "3", "--queue-anyway", "--", "true").strip()
    assert cluster.job(queued)["state"] == "PENDING"
    # A larger agent joins: the queued job runs there.
    cluster.start_agent("big", slots=4)
    assert cluster.wait_job(queued)["state"] == "COMPLETED"
