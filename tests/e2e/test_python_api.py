"""`import reckon` against a real controller and agent (docs/python-api.md).

The Client runs in the test process (blocking calls); the daemons are the usual real processes.
The unit checks (Job, the errors, the spec, type hints) are in tests/test_python_api.py.
"""

from __future__ import annotations

import threading

import pytest

import reckon


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch):
    for name in ("RECKON_CONTROLLER", "RECKON_TOKEN", "RECKON_TOKEN_FILE", "RECKON_AUTH", "RECKON_CA"):
        monkeypatch.delenv(name, raising=False)


def test_submit_wait_logs_cancel_hold_and_refusals(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=4)
    c = reckon.Client(cluster.url, timeout=30)

    job = c.submit(["sh", "-c", "echo out; echo err >&2; exit 3"], name="three", cwd=str(tmp_path),
                   env={"X": "1"}, time_limit="1m")
    assert isinstance(job, reckon.Job) and job.name == "three" and not job.done
    ended = c.wait(job, timeout=30)
    assert (ended.state, ended.exit_code, ended.done, ended.ok) == ("FAILED", 3, True, False)
    assert c.logs(ended) == b"out\n" and c.logs(ended.id, "stderr") == b"err\n"
    assert c.job(job.id).state == "FAILED" and job.id in {j.id for j in c.jobs(state="FAILED")}
    assert [a["exit_code"] for a in c.history(job)["attempts"]] == [3]

    many = c.submit_many([["true"], {"command": ["sh", "-c", "exit 0"], "name": "second"}], cpus=1)
    assert [j.name for j in many] == ["true", "second"]
    assert {j.state for j in c.wait(many, timeout=30)} == {"COMPLETED"}
    assert c.query(many, fields=["id", "state"]) == [{"id": j.id, "state": "COMPLETED"} for j in many]
    assert c.query(names=["second"], states=["COMPLETED"])[0]["name"] == "second"  # no fields: whole objects

    members = c.submit_array(["sh", "-c", 'echo "$RECKON_ARRAY_INDEX"'], "1-3", cwd=str(tmp_path))
    assert [j.array_index for j in members] == [1, 2, 3]
    assert [c.logs(j) for j in c.wait(members, timeout=30)] == [b"1\n", b"2\n", b"3\n"]

    # The sleeper takes every CPU, so the held job cannot start before its hold either way (a
    # controller before protocol 7 holds it just after the submit).
    sleeper = c.submit(["sleep", "60"], cpus=4)
    cluster.wait_for(lambda: c.job(sleeper).state == "RUNNING", what="the sleeper running")
    held = c.submit(["true"], hold=True)
    assert held.held and c.job(held).state == "PENDING"
    assert c.cancel(sleeper).id == sleeper.id
    assert c.wait(sleeper, timeout=30).state == "CANCELLED"
    assert c.job(held).held
    c.release(held)
    assert c.wait(held, timeout=30).ok

    # A refusal raises the CLI's own classes, with the controller's one line.
    with pytest.raises(reckon.Refused, match="424242"):
        c.job("424242")
    with pytest.raises(reckon.Refused, match="name must not be empty") as refused:
        c.submit(["true"], name="")
    assert isinstance(refused.value, reckon.ReckonError) and "\n" not in str(refused.value)
    with pytest.raises(reckon.UsageError, match="slots must be >= 1"):  # checked before sending
        c.submit(["true"], cpus=0)
    with pytest.raises(TimeoutError):
        c.wait(c.submit(["sleep", "60"]), timeout=0.3)
    with pytest.raises(reckon.Unreachable):
        reckon.Client("ws://127.0.0.1:1", timeout=5).jobs()


def test_wait_keeps_waiting_across_a_controller_restart(cluster, tmp_path):
    cluster.start_controller("--rejoin-grace", "0")
    cluster.start_agent("a1", slots=2)
    c = reckon.Client(cluster.url, timeout=5)
    go = tmp_path / "go"
    job = c.submit(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; echo done"])
    cluster.wait_for(lambda: c.job(job).state == "RUNNING", what="the job running")

    result: dict = {}
    waiter = threading.Thread(target=lambda: result.update(job=c.wait(job, timeout=90)), daemon=True)
    waiter.start()
    cluster.kill("controller")  # SIGKILL: the waiter's looks now fail (Unreachable) and go on
    go.touch()  # the job ends while no controller is there: the agent keeps the outcome
    cluster.wait_for(lambda: cluster.status_file("a1", job.id), what="the job's end on the agent")
    assert waiter.is_alive()
    cluster.start_controller()
    waiter.join(timeout=90)
    assert not waiter.is_alive() and result["job"].state == "COMPLETED", result
    assert c.logs(job) == b"done\n"
