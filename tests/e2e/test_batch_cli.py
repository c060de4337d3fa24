"""Issue #10 part B through the real CLI: arrays, time limits, retries,
dependencies, hold / release / requeue (each its own contract test)."""

from __future__ import annotations

import json
import re
import signal

import pytest

from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def test_array_submit_prints_every_id_sets_the_env_and_respects_max(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=4)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script = f'echo "$RECKON_ARRAY_ID $RECKON_ARRAY_INDEX" > {out_dir}/$RECKON_ARRAY_INDEX; sleep 0.3'
    out = cluster.cli("submit", "--array", "1-9:2%2", "--", "sh", "-c", script)
    assert re.fullmatch(r"(\d+\n){5}", out), out  # ids alone, one per line; the first names the array
    ids = out.split()
    assert [int(i) for i in ids] == list(range(int(ids[0]), int(ids[0]) + 5))
    done = cluster.wait_jobs(ids)
    assert {done[i]["state"] for i in ids} == {"COMPLETED"}
    for job_id, index in zip(ids, (1, 3, 5, 7, 9)):
        assert (out_dir / str(index)).read_text() == f"{ids[0]} {index}\n"
        assert (done[job_id]["array_id"], done[job_id]["array_index"]) == (ids[0], index)
    # %2: the supervisors' own start and end times never show three running at once.
    spans = sorted((done[i]["started_at"], done[i]["finished_at"]) for i in ids)
    for k, (start, _) in enumerate(spans):
        assert sum(1 for s, f in spans[:k] if f > start) < 2, spans
    # `jobs` folds the array into one line; --expand lists each job; --json is every job.
    folded = cluster.cli("jobs")
    assert re.search(rf"^{ids[0]}_\[1-9\]\s+\S+\s+COMPLETED:5\b", folded, re.M), folded
    assert all(re.search(rf"^{i}\s", cluster.cli("jobs", "--expand"), re.M) for i in ids)
    assert {j["id"] for j in cluster.cli_json("jobs")} >= set(ids)
    assert cluster.one_line_reason(cluster.run("submit", "--array", "5-1", "--", "true")).startswith(
        "reckon: invalid --array")


def test_cancel_of_an_array_id_cancels_its_pending_and_running_jobs(cluster):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=4)
    ids = cluster.cli("submit", "--array", "0-3%1", "--", "sleep", "60").split()
    cluster.wait_job(ids[0], ("RUNNING",))
    out = cluster.cli("cancel", ids[0])
    assert out.splitlines()[0] == f"{ids[0]} RUNNING (cancel requested)", out
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [[i, "CANCELLED"] for i in ids[1:]]
    done = cluster.wait_jobs(ids)
    assert {done[i]["state"] for i in ids} == {"CANCELLED"}


def test_a_time_limit_holds_while_the_agent_is_down(cluster):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    # The job ignores nothing: SIGTERM at 2 s ends it (the grace is 2 s, SIGKILL would follow).
    job = cluster.cli("submit", "--time", "2s", "--", "sleep", "120").strip()
    cluster.wait_job(job, ("RUNNING",))
    cluster.kill("a1")  # kill -9: only the supervisor is left to enforce the limit
    status = wait_for(lambda: cluster.status_file("a1", job))
    assert status["timed_out"] is True and status["signal"] == signal.SIGTERM
    assert cluster.job(job)["state"] == "RUNNING"  # the controller learns it only from the agent
    cluster.start_agent("a1")
    done = cluster.wait_job(job)
    assert (done["state"], done["reason"], done["signal"], done["exit_code"]) == (
        "FAILED", "timeout", signal.SIGTERM, None)
    assert done["time_limit"] == 2.0
    assert re.search(r"^reason:\s+timeout$", cluster.cli("show", job), re.M)
    for bad in ("0s", "ten", "1x"):
        assert "bad duration" in cluster.one_line_reason(cluster.run("submit", "--time", bad, "--", "true"))


def test_a_job_past_its_limit_that_ignores_sigterm_is_killed_after_the_grace(cluster):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    job = cluster.cli("submit", "--time", "1", "--", "sh", "-c", "trap '' TERM; sleep 120 & wait; sleep 120").strip()
    done = cluster.wait_job(job)
    assert (done["state"], done["reason"], done["signal"]) == ("FAILED", "timeout", signal.SIGKILL)


def test_retries_run_a_failed_job_again_and_keep_every_attempt(cluster):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    job = cluster.cli("submit", "--retries", "2", "--", "sh", "-c", "exit 3").strip()
    done = cluster.wait_job(job)
    assert (done["state"], done["exit_code"], done["attempt"], done["retried"]) == ("FAILED", 3, 3, 2)
    # --retry-on-exit: only the listed codes; the first success ends it.
    flaky = cluster.cli("submit", "--retries", "3", "--retry-on-exit", "75", "--", "sh", "-c",
                        'test "$(cat n 2>/dev/null)" = x && exit 0; echo x > n; exit 75').strip()
    done = cluster.wait_job(flaky)
    assert (done["state"], done["attempt"], done["retried"]) == ("COMPLETED", 2, 1)
    other = cluster.cli("submit", "--retries", "3", "--retry-on-exit", "75", "--", "sh", "-c", "exit 4").strip()
    assert cluster.wait_job(other)["attempt"] == 1
    assert "retry_on_exit needs retries" in cluster.one_line_reason(
        cluster.run("submit", "--retry-on-exit", "1", "--", "true"))
    cluster.stop("controller")  # every attempt's outcome is in the fact log
    finished = [f for f in cluster.facts() if type(f).__name__ == "JobFinished" and f.job == job]
    assert [(f.attempt, f.exit_code) for f in finished] == [(1, 3), (2, 3), (3, 3)]


def _wait_for_file(path) -> str:
    """A shell loop that ends once ``path`` exists: a job that ends when the test says so."""
    return f"while [ ! -e {path} ]; do sleep 0.05; done"


def test_after_waits_for_completion_and_a_failed_dependency_cancels_with_a_reason(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=4)
    go = tmp_path / "go"
    gate = cluster.cli("submit", "--", "sh", "-c", _wait_for_file(go)).strip()
    bad = cluster.cli("submit", "--", "sh", "-c", f"{_wait_for_file(go)}; exit 1").strip()
    good_after = cluster.cli("submit", "--after", gate, "--", "true").strip()
    doomed = cluster.cli("submit", "--after", f"{gate},{bad}", "--", "true").strip()
    assert cluster.job(good_after)["state"] == "PENDING"
    go.touch()
    done = cluster.wait_jobs([gate, bad, good_after, doomed])
    assert done[good_after]["state"] == "COMPLETED"
    assert done[good_after]["started_at"] >= done[gate]["finished_at"]
    assert (done[doomed]["state"], done[doomed]["reason"]) == ("CANCELLED", f"dependency {bad} ended FAILED")
    assert done[doomed]["started_at"] is None
    assert "unknown job '4242'" in cluster.one_line_reason(cluster.run("submit", "--after", "4242", "--", "true"))
    assert "will never complete" in cluster.one_line_reason(cluster.run("submit", "--after", bad, "--", "true"))


def test_hold_release_and_requeue_survive_a_controller_restart(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    go = tmp_path / "go"
    first = cluster.cli("submit", "--", "sh", "-c", _wait_for_file(go)).strip()
    job = cluster.cli("submit", "--after", first, "--", "true").strip()
    assert cluster.cli("hold", job) == f"{job} PENDING (held)\n"
    go.touch()
    cluster.stop("controller")
    cluster.start_controller()
    done_first = cluster.wait_job(first)
    assert done_first["state"] == "COMPLETED"
    shown = cluster.job(job)
    assert (shown["state"], shown["held"]) == ("PENDING", True)  # held: its dependency is done, it waits
    # Released: no longer held (it may be dispatched before the reply is written).
    assert re.fullmatch(rf"{job} (PENDING|RUNNING|COMPLETED)\n", cluster.cli("release", job))
    assert cluster.wait_job(job)["state"] == "COMPLETED"
    assert "has not run yet" in cluster.one_line_reason(cluster.run("requeue", cluster.cli(
        "submit", "--hold", "--", "sleep", "60").strip()))
    assert "only a PENDING job" in cluster.one_line_reason(cluster.run("hold", job))
    assert re.fullmatch(rf"{job} (PENDING|RUNNING|COMPLETED)\n", cluster.cli("requeue", job))
    again = cluster.wait_job(job)
    assert (again["state"], again["attempt"], again["requeues"]) == ("COMPLETED", 2, 1)
    assert "unknown job" in cluster.one_line_reason(cluster.run("release", "4242"))
