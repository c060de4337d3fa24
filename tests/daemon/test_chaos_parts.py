"""The pieces of `reckon chaos` (daemon/chaos/): the seeded plan, the verdict, the proxy.

The whole run is tests/e2e/test_chaos.py; these show that each check can
fail (a verdict that cannot say FAIL proves nothing) and that a seed replays
the same schedule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from reckon.daemon.chaos.proxy import CuttableProxy
from reckon.daemon.chaos.schedule import CONTROLLER, ChaosJob, Fault, FaultKind, make_plan
from reckon.daemon.chaos.truth import Execution, Truth, job_command, judge, read_truth

AGENTS = ["agent-1", "agent-2", "agent-3"]


def plan(seed: int):
    return make_plan(seed=seed, duration=120, agents=AGENTS, jobs=300, fault_every=2, max_outage=6)


def test_a_seed_replays_the_same_jobs_and_faults_and_another_seed_does_not():
    assert plan(5) == plan(5)
    assert plan(5).faults != plan(6).faults


def test_faults_never_overlap_on_one_target():
    for seed in range(20):
        busy: dict[str, float] = {}
        for fault in plan(seed).faults:
            targets = [CONTROLLER, *AGENTS] if fault.kind is FaultKind.PARTITION else [fault.target]
            for t in targets:
                assert busy.get(t, 0.0) <= fault.at, (seed, fault)
                busy[t] = fault.at + fault.duration


def test_a_fault_the_target_cannot_have_is_refused():
    with pytest.raises(ValueError, match="applies to agents"):
        Fault(at=1.0, target=CONTROLLER, kind=FaultKind.CUT, duration=1.0)
    with pytest.raises(ValueError):
        Fault(at=1.0, target="agent-1", kind=FaultKind.KILL, duration=0)


# ---- the job's own record ---------------------------------------------------------------------


@pytest.mark.parametrize("exit_code, sig", [(3, None), (None, 9)])
def test_a_job_writes_its_own_truth(tmp_path: Path, exit_code, sig):
    """Run the job command as the supervisor would: stdout on a jobs/<job>.<attempt>.stdout file."""
    truth_dir, jobs_dir = tmp_path / "truth", tmp_path / "agent-7" / "jobs"
    truth_dir.mkdir()
    jobs_dir.mkdir(parents=True)
    job = ChaosJob(name="chaos-000001", submit_at=0, sleep=0.05, exit_code=exit_code, signal=sig)
    with open(jobs_dir / "17.2.stdout", "w") as out:
        result = subprocess.run(job_command(job, truth_dir), stdout=out, timeout=30)
    assert result.returncode == (exit_code if sig is None else -sig)
    truth = read_truth(truth_dir)
    assert truth.begins == {"chaos-000001": 1}
    [run] = truth.ends["chaos-000001"]
    assert (run.agent, run.job, run.attempt, run.exit_code, run.signal) == ("agent-7", "17", 2, exit_code, sig)
    assert run.started <= run.finished


# ---- the verdict --------------------------------------------------------------------------------


JOB = ChaosJob(name="chaos-000001", submit_at=0, sleep=0.1, exit_code=3, signal=None)
RUN = Execution(name=JOB.name, agent="agent-1", job="1", attempt=1, pid=100, started=1000.010, exit_code=3,
                signal=None, finished=1000.110)


def record(**changes) -> dict:
    job = {"id": "1", "name": JOB.name, "state": "FAILED", "agent": "agent-1", "attempt": 1, "exit_code": 3,
           "signal": None, "started_at": 1000.0, "finished_at": 1000.120}
    return {**job, **changes}


def truth(*runs: Execution, begins: int | None = None) -> Truth:
    t = Truth()
    if runs or begins:
        t.begins[JOB.name] = len(runs) if begins is None else begins
    if runs:
        t.ends[JOB.name] = list(runs)
    return t


def verdict(records: list[dict], t: Truth, facts: int = 1, acknowledged=(JOB.name,)):
    return judge([JOB], set(acknowledged), records, t, {"1": facts} if facts else {})


def test_a_true_record_passes_and_its_time_gaps_are_measured():
    v = verdict([record()], truth(RUN))
    assert v.passed and v.counts()["executions"] == 1
    assert v.finish_gaps == [pytest.approx(0.010)] and v.start_gaps == [pytest.approx(0.010)]


@pytest.mark.parametrize("changes, why", [
    ({"exit_code": 0, "state": "COMPLETED"}, "COMPLETED exit 0"),
    ({"finished_at": 1003.0}, "finished_at"),          # a processing time, not the job's end
    ({"finished_at": 1000.05}, "finished_at"),         # before the job's own end
    ({"started_at": 1000.5}, "started_at"),            # after the job's own start
    ({"attempt": 2}, "ran as 1.1 on agent-1"),
])
def test_a_record_other_than_the_truth_is_invented(changes, why):
    v = verdict([record(**changes)], truth(RUN))
    assert not v.passed and len(v.invented) == 1 and why in v.invented[0], v.invented


def test_an_outcome_without_an_execution_is_invented():
    v = verdict([record()], truth())
    assert v.invented and "no execution ended" in v.invented[0]


def test_an_outcome_recorded_twice_is_invented():
    assert "2 terminal facts" in verdict([record()], truth(RUN), facts=2).invented[0]


def test_two_executions_are_run_twice():
    second = Execution(name=JOB.name, agent="agent-2", job="1", attempt=2, pid=101, started=1001.0, exit_code=3,
                       signal=None, finished=1001.1)
    v = verdict([record()], truth(RUN, second))
    assert len(v.run_twice) == 1 and not v.passed
    # An execution killed before it could write its end still counts as one.
    assert verdict([record()], truth(RUN, begins=2)).run_twice


def test_acknowledged_and_unknown_is_lost_and_ran_unrecorded_is_lost():
    assert "acknowledged" in verdict([], truth()).lost[0]
    assert "though it ended" in verdict([record(state="RUNNING")], truth(RUN), facts=0).lost[0]


def test_not_terminal_and_never_ended_is_stuck():
    v = verdict([record(state="PENDING", agent=None)], truth(), facts=0)
    assert v.stuck and not v.lost and not v.passed


# ---- the proxy --------------------------------------------------------------------------------


async def _echo_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                while data := await stream.receive_some(1024):
                    await stream.send_all(data)
            except trio.BrokenResourceError:
                pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await trio.serve_listeners(echo, listeners, task_status=task_status)


async def test_proxy_relays_stalls_and_cuts(autojump_clock):
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(_echo_server)
            proxy = CuttableProxy(listener.socket.getsockname()[1])
            await nursery.start(proxy.serve)
            stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await stream.send_all(b"one")
            assert await stream.receive_some(10) == b"one"

            proxy.stall()  # held, not lost
            await stream.send_all(b"two")
            with trio.move_on_after(5) as waited:
                await stream.receive_some(10)
            assert waited.cancelled_caught
            proxy.restore()
            assert await stream.receive_some(10) == b"two"

            proxy.cut()  # the connection ends, and a new one is closed at once
            assert await stream.receive_some(10) == b""
            refused = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            assert await refused.receive_some(10) == b""
            proxy.restore()
            again = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await again.send_all(b"three")
            assert await again.receive_some(10) == b"three"
            assert proxy.connections == 2
            nursery.cancel_scope.cancel()


def test_a_missing_start_time_fails_the_verdict():
    v = verdict([record(started_at=None)], truth(RUN))
    assert v.start_missing and not v.passed


# ---- two users and memory limits (issue #20) ------------------------------------------------------


def test_users_and_hogs_leave_the_seeds_jobs_and_faults_as_they_were():
    """The submitters and hogs come from a stream of their own: a seed replays its old run."""
    with_users = make_plan(seed=5, duration=120, agents=AGENTS, jobs=300, fault_every=2, max_outage=6,
                           users=("alice", "bob"), hog_share=0.2)
    assert with_users.faults == plan(5).faults
    assert [(j.name, j.sleep, j.exit_code, j.signal) for j in with_users.jobs] == [
        (j.name, j.sleep, j.exit_code, j.signal) for j in plan(5).jobs]
    assert {j.user for j in with_users.jobs} == {"alice", "bob"}
    assert 30 < sum(j.hog for j in with_users.jobs) < 90


ALICE = ChaosJob(name=JOB.name, submit_at=0, sleep=0.1, exit_code=3, signal=None, user="alice")
HOG = ChaosJob(name=JOB.name, submit_at=0, sleep=0.1, exit_code=0, signal=None, user="alice", hog=True)


def test_a_job_must_be_owned_by_and_run_as_its_submitter():
    run = Execution(name=RUN.name, agent=RUN.agent, job=RUN.job, attempt=1, pid=RUN.pid, started=RUN.started,
                    exit_code=3, signal=None, finished=RUN.finished, uid=1001)
    good = judge([ALICE], {JOB.name}, [record(user="alice")], truth(run), {"1": 1}, {"alice": 1001})
    assert good.passed, good.invented
    owner = judge([ALICE], {JOB.name}, [record(user="bob")], truth(run), {"1": 1}, {"alice": 1001})
    assert "owned by 'bob'" in owner.invented[0]
    uid = judge([ALICE], {JOB.name}, [record(user="alice")], truth(run), {"1": 1}, {"alice": 2002})
    assert "ran as uid 1001" in uid.invented[0]


def test_a_memory_hog_must_end_failed_oom_once():
    ok = record(user="alice", state="FAILED", exit_code=None, signal=9, reason="oom")
    assert judge([HOG], {JOB.name}, [ok], truth(begins=1), {"1": 1}).passed
    v = judge([HOG], {JOB.name}, [{**ok, "reason": None}], truth(begins=1), {"1": 1})
    assert "not FAILED reason 'oom'" in v.invented[0]
    assert judge([HOG], {JOB.name}, [ok], truth(begins=2), {"1": 1}).run_twice
    assert "ended by itself" in judge([HOG], {JOB.name}, [ok], truth(RUN), {"1": 1}).invented[0]


def test_a_memory_hog_is_stopped_by_a_memory_limit(tmp_path: Path):
    """The hog's command allocates twice its limit in its main process (here: under ulimit -v)."""
    truth_dir = tmp_path / "truth"
    truth_dir.mkdir()
    job = ChaosJob(name="chaos-000002", submit_at=0, sleep=0.01, exit_code=0, signal=None, hog=True)
    with pytest.raises(ValueError, match="no --mem"):
        job_command(job, truth_dir)
    command = job_command(job, truth_dir, mem=64 << 20)
    free = subprocess.run(command, timeout=30)
    assert free.returncode == 0  # unlimited: dd gets its 128 MiB
    limited = subprocess.run(["sh", "-c", 'ulimit -v 100000; exec "$@"', "sh", *command], timeout=30)
    assert limited.returncode != 0  # past the limit: dd cannot have its buffer
    assert read_truth(truth_dir).begins == {"chaos-000002": 2} and not read_truth(truth_dir).ends
