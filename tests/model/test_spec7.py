"""The job spec's version 7 fields (issue #21): validation, and the wire left out at defaults."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.arrays import parse_array
from reckon.model.jobs import MAX_SCRIPT, V7_SPEC_DEFAULTS, JobRecord, JobSpec
from reckon.model.output_paths import check_pattern, expand_pattern, output_path

BASE = {"name": "j", "command": ["run.sh"], "cwd": None, "env": [], "slots": 1}
FULL = dict(BASE, time_limit=60, script="#!/bin/sh\necho hi\n", warn_signal=12, warn_before=30,
            warn_batch_only=True, open_mode="append", after_any=["3"], after_not_ok=["4"],
            labels=[["account", "lab"], ["comment", "x y"]], slurm_env=True)


def test_protocol_version_is_7():
    assert M.PROTOCOL_VERSION == 7 and 7 in M.SUPPORTED_VERSIONS and M.SPEC7_SINCE == 7


def test_v7_fields_round_trip():
    spec = JobSpec.from_dict(FULL)
    assert spec.labels == (("account", "lab"), ("comment", "x y")) and spec.uses_v7
    assert spec.dependencies == ("3", "4")
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict() == dict(FULL, time_limit=60)


def test_v7_fields_are_left_out_at_their_defaults():
    spec = JobSpec.from_dict(BASE)
    assert not spec.uses_v7
    assert spec.to_dict() == BASE
    assert all(key not in spec.to_dict() for key in V7_SPEC_DEFAULTS)


def test_labels_may_come_as_a_map():
    spec = JobSpec.from_dict(dict(BASE, labels={"wckey": "w", "account": "a"}))
    assert spec.labels == (("account", "a"), ("wckey", "w"))


@pytest.mark.parametrize("change, words", [
    ({"script": ""}, "script must not be empty"),
    ({"script": "a\0b"}, "NUL"),
    ({"script": "x" * (MAX_SCRIPT + 1)}, "script is longer"),
    ({"script": "\u00e9" * (MAX_SCRIPT // 2 + 1)}, "script is longer than"),
    ({"script": "\ud800"}, "surrogates"),
    ({"warn_signal": 10}, "warn_signal needs a time_limit"),
    ({"warn_signal": 0, "time_limit": 5}, "warn_signal must be >= 1"),
    ({"warn_signal": 65, "time_limit": 5}, "warn_signal must be <= 64"),
    ({"warn_before": 5}, "need a warn_signal"),
    ({"warn_batch_only": True}, "need a warn_signal"),
    ({"warn_signal": 10, "time_limit": 5, "warn_before": 65536}, "warn_before must be <= 65535"),
    ({"warn_signal": 10, "time_limit": 5, "warn_batch_only": 1}, "warn_batch_only must be a bool"),
    ({"open_mode": "overwrite"}, "open_mode must be one of append, truncate"),
    ({"after": ["1"], "after_any": ["1"]}, "name a job twice"),
    ({"after_not_ok": [""]}, "after_not_ok job must not be empty"),
    ({"after_any": "1"}, "after_any must be a list"),
    ({"labels": [["Account", "x"]]}, "lowercase letters"),
    ({"labels": [["b", "x"], ["a", "y"]]}, "sorted by key"),
    ({"labels": [["a", "x"], ["a", "y"]]}, "sorted by key"),
    ({"labels": [["k" * 33, "x"]]}, "longer than 32"),
    ({"labels": [["a", "x" * 1025]]}, "longer than 1024"),
    ({"labels": {f"k{'_' * i}": "v" for i in range(17)}}, "more than 16 labels"),
    ({"labels": [["a"]]}, "pair"),
    ({"slurm_env": "yes"}, "slurm_env must be a bool"),
])
def test_v7_refusals_name_the_field(change, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        JobSpec.from_dict(dict(BASE, **change))


def test_a_4_mib_script_of_ascii_is_accepted():
    assert JobSpec.from_dict(dict(BASE, script="x" * MAX_SCRIPT)).script is not None


def test_the_job_object_shows_the_v7_fields_not_the_script_text():
    record = JobRecord(id="7", spec=JobSpec.from_dict(FULL))
    shown = record.to_dict()
    assert shown["labels"] == {"account": "lab", "comment": "x y"}
    assert shown["script"] is True and shown["open_mode"] == "append"
    assert shown["after_any"] == ["3"] and shown["after_not_ok"] == ["4"] and shown["array_max"] is None
    assert JobRecord.from_row(record.row()).snapshot_key() == record.snapshot_key()


def test_submit_events_take_hold():
    spec = JobSpec.from_dict(BASE)
    assert E.SubmitJob(spec=spec, now=1.0, hold=True).hold
    assert E.SubmitBatch(specs=(spec,), uids=("u",), now=1.0, hold=True).hold
    assert E.SubmitArray(spec=spec, array=parse_array("0-1"), now=1.0, hold=True).hold
    assert not E.SubmitJob(spec=spec, now=1.0).hold
    with pytest.raises(ValueError, match="hold must be a bool"):
        E.SubmitJob(spec=spec, now=1.0, hold=1)


def test_v7_output_patterns():
    for pattern in ("%A_%I.out", "%x-%u@%N.%j.%a", "%%"):
        check_pattern("output", pattern)
    assert expand_pattern("%A_%I-%x-%u-%N", job="9", attempt=1, array="5", index=4, name="n", user="u",
                          host="h") == "5_4-n-u-h"
    # A job not in an array: %A is its id and %I Slurm's NO_VAL - 1.
    assert expand_pattern("%A_%I", job="9", attempt=2) == "9_4294967294"
    assert output_path("o/%x", job="1", attempt=1, cwd="/d", base_dir=None, name="nm") == "/d/o/nm"
    with pytest.raises(ValueError, match="unknown pattern %t"):
        check_pattern("output", "%t")


# ---- the controller model: dependencies, requeue of a running job, hold, versions, signal ------

from reckon.model import facts as F  # noqa: E402
from reckon.model.controller import Controller, ControllerConfig  # noqa: E402
from reckon.model.errors import LocalProtocolError, PermissionDenied  # noqa: E402
from reckon.model.jobs import JobState  # noqa: E402
from reckon.model.nodes import pending_reason  # noqa: E402
from reckon.model.permissions import Caller  # noqa: E402
from reckon.model.scheduler import Scheduler  # noqa: E402
from reckon.model.state import apply  # noqa: E402

from tests.model.harness import Harness, sends_of  # noqa: E402


def _submit(h: Harness, **kw) -> str:
    job_id = h.controller.state.next_job_id()
    hold = kw.pop("hold", False)
    h.controller_handle(E.SubmitJob(spec=JobSpec(name=f"j{job_id}", command=("true",), **kw), now=h.now,
                                    uid=h.uid(), hold=hold))
    return job_id


def _run(h: Harness, job: str) -> int:
    assert (job, "a1") in h.schedule()
    h.pump()
    return h.job(job).attempt


def _end(h: Harness, job: str, *, exit_code: int | None = 0, signal: int | None = None) -> None:
    attempt = h.job(job).attempt
    h.agents["a1"].processes.discard((job, attempt))
    h.agent_handle("a1", E.ProcessExited(job=job, attempt=attempt, exit_code=exit_code, signal=signal,
                                         finished_at=h.now, now=h.now))
    h.pump()


def _cluster() -> Harness:
    h = Harness()
    h.join("a1")
    return h


@pytest.mark.parametrize("kind, dep_exit, runs", [
    ("after_any", 0, True), ("after_any", 3, True),
    ("after_not_ok", 3, True), ("after_not_ok", 0, False),
])
def test_after_any_and_after_not_ok(kind, dep_exit, runs):
    h = _cluster()
    dep = _submit(h)
    waiter = _submit(h, **{kind: (dep,)})
    assert h.schedule() == [(dep, "a1")]  # the waiter is not ready while its dependency runs
    h.pump()
    assert "after_" in pending_reason(h.controller, waiter)
    _end(h, dep, exit_code=dep_exit)
    if runs:
        assert _run(h, waiter) == 1
    else:
        assert h.job(waiter).state is JobState.CANCELLED
        assert h.job(waiter).reason == f"dependency {dep} ended COMPLETED (after_not_ok)"
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_a_cancelled_pending_dependency_releases_after_any_and_after_not_ok():
    h = _cluster()
    dep = _submit(h, hold=True)
    anyone, not_ok, ok = _submit(h, after_any=(dep,)), _submit(h, after_not_ok=(dep,)), _submit(h, after=(dep,))
    h.cancel(dep)
    assert h.job(ok).state is JobState.CANCELLED  # after (afterok) can never be met
    assert sorted(j for j, _ in h.schedule()) == sorted([anyone, not_ok])
    h.assert_replay_agrees()


def test_after_not_ok_of_a_completed_job_is_refused_at_submit():
    h = _cluster()
    dep = _submit(h)
    _run(h, dep)
    _end(h, dep)
    with pytest.raises(LocalProtocolError, match="will never fail"):
        h.controller.handle(E.SubmitJob(spec=JobSpec(name="w", command=("true",), after_not_ok=(dep,)), now=h.now))
    with pytest.raises(LocalProtocolError, match="unknown job '99' in after_any"):
        h.controller.handle(E.SubmitJob(spec=JobSpec(name="w", command=("true",), after_any=("99",)), now=h.now))


def test_hold_at_submit_is_in_the_same_fact_group():
    h = _cluster()
    commands = h.controller_handle(E.SubmitJob(spec=JobSpec(name="w", command=("true",)), now=h.now,
                                               uid=h.uid(), hold=True))
    appends = [c for c in commands if isinstance(c, E.Append)]
    assert len(appends) == 1 and [type(f) for f in appends[0].facts][-2:] == [F.JobSubmitted, F.JobHeld]
    assert h.job("1").held and h.schedule() == []
    arr = h.controller_handle(E.SubmitArray(spec=JobSpec(name="a", command=("true",)), array=parse_array("0-2"),
                                            now=h.now, hold=True))
    assert sum(isinstance(f, F.JobHeld) for c in arr if isinstance(c, E.Append) for f in c.facts) == 3
    h.controller_handle(E.SubmitBatch(specs=(JobSpec(name="b", command=("true",)),), uids=(h.uid(),), now=h.now,
                                      hold=True))
    assert all(job.held for job in h.controller.state.jobs.values()) and h.schedule() == []
    h.assert_replay_agrees()


def test_requeue_of_a_running_job_stops_it_and_runs_it_again_not_as_a_retry():
    h = _cluster()
    job = _submit(h, retries=1)
    _run(h, job)
    commands = h.controller_handle(E.RequeueJob(job=job, now=h.now))
    assert [type(f) for f in h.log[-1:]] == [F.JobRequeueRequested]
    assert [(k.job, k.attempt) for k in sends_of(commands, M.Kill)] == [(job, 1)]
    assert h.job(job).state is JobState.RUNNING and h.job(job).requeue_requested
    assert h.controller_handle(E.RequeueJob(job=job, now=h.now)) == []  # asked twice: once
    h.pump()
    _end(h, job, signal=15)  # the kill's outcome is the attempt's, never the job's
    record = h.job(job)
    assert (record.state, record.attempt, record.requeues, record.retried) == (JobState.PENDING, 2, 1, 0)
    assert (record.exit_code, record.signal, record.requeue_requested) == (None, None, False)
    assert _run(h, job) == 2
    _end(h, job)
    assert (h.job(job).state, h.job(job).requeues) == (JobState.COMPLETED, 1)
    h.assert_replay_agrees()


def test_a_cancel_after_a_requeue_request_wins():
    h = _cluster()
    job = _submit(h)
    _run(h, job)
    h.controller_handle(E.RequeueJob(job=job, now=h.now))
    commands = h.cancel(job)
    assert sends_of(commands, M.Kill) == []  # the requeue's kill is on its way already
    _end(h, job, signal=15)
    assert h.job(job).state is JobState.CANCELLED and h.job(job).requeues == 0
    with pytest.raises(LocalProtocolError, match="being cancelled"):
        job2 = _submit(h)
        _run(h, job2)
        h.cancel(job2)
        h.controller.handle(E.RequeueJob(job=job2, now=h.now))
    h.assert_replay_agrees()


def test_a_requeued_attempt_lost_with_its_agent_is_requeued_once():
    h = _cluster()
    job = _submit(h)
    _run(h, job)
    h.controller_handle(E.RequeueJob(job=job, now=h.now))
    state = h.controller.state
    apply(state, F.JobRequeued(job=job, attempt=1, reason="lost"))
    assert (state.jobs[job].state, state.jobs[job].requeues, state.jobs[job].requeue_requested) == (
        JobState.PENDING, 1, False)


def test_v7_jobs_go_only_to_agents_of_version_7():
    ctrl, sched = Controller(ControllerConfig()), Scheduler()

    def feed(commands):
        for c in commands:
            if isinstance(c, E.Notify):
                sched.notify(c.note)
        return commands

    feed(ctrl.handle(E.AgentJoined(conn=1, join=M.Join(agent="old", slots=8, version=6), token=b"\1" * 16,
                                   now=1.0)))
    feed(ctrl.handle(E.SubmitJob(spec=JobSpec(name="s", command=("x",), script="#!/bin/sh\n"), now=2.0)))
    feed(ctrl.handle(E.SubmitJob(spec=JobSpec(name="p", command=("true",)), now=2.0)))
    assert sched.place() == [("2", "old")]
    assert "speaks protocol 6: this job needs 7" in pending_reason(ctrl, "1")
    feed(ctrl.handle(E.DispatchProposed(job="1", agent="old", now=3.0)))  # a stale proposal: refused
    assert ctrl.state.jobs["1"].state is JobState.PENDING
    feed(ctrl.handle(E.AgentJoined(conn=2, join=M.Join(agent="new", slots=8, version=7), token=b"\2" * 16,
                                   now=4.0)))
    assert ("1", "new") in sched.place()


def test_signal_goes_to_the_running_attempt_and_is_no_fact():
    h = _cluster()
    job = _submit(h)
    with pytest.raises(LocalProtocolError, match="only a RUNNING job can be signalled"):
        h.controller.handle(E.SignalJob(job=job, signal=10, now=h.now))
    _run(h, job)
    facts = len(h.log)
    commands = h.controller_handle(E.SignalJob(job=job, signal=10, batch_only=True, now=h.now))
    assert len(h.log) == facts and not any(isinstance(c, E.Append) for c in commands)
    [sent] = sends_of(commands, M.Signal)
    assert (sent.job, sent.attempt, sent.signal, sent.batch_only) == (job, 1, 10, True)
    out = h.deliver_to_agent("a1")
    assert [c for c in out if isinstance(c, E.SignalProcess)] == [
        E.SignalProcess(job=job, attempt=1, signal=10, batch_only=True)]
    with pytest.raises(ValueError, match="not both"):
        E.SignalJob(job=job, signal=10, batch_only=True, full=True, now=h.now)
    with pytest.raises(PermissionDenied, match="mallory may not signal it$"):  # not "may not cancel it"
        h.controller.handle(E.SignalJob(job=job, signal=10, now=h.now, caller=Caller(user="mallory", uid=1001, gid=1001)))


def test_an_array_of_slurm_env_jobs_carries_its_shape():
    h = _cluster()
    h.controller_handle(E.SubmitArray(spec=JobSpec(name="a", command=("true",), slurm_env=True),
                                      array=parse_array("2-8:3"), now=h.now))
    env = dict(h.job("1").spec.env)
    assert (env["SLURM_ARRAY_TASK_COUNT"], env["SLURM_ARRAY_TASK_MIN"], env["SLURM_ARRAY_TASK_MAX"]) == ("3", "2", "8")
    h.controller_handle(E.SubmitArray(spec=JobSpec(name="b", command=("true",)), array=parse_array("0-1"), now=h.now))
    assert "SLURM_ARRAY_TASK_COUNT" not in dict(h.job("4").spec.env)  # without slurm_env: as before
