"""Issue #10 part B in the model: arrays, time limits, retries, dependencies,
hold / release / requeue (protocol version 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.model.harness import Harness, facts_of, sends_of

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.arrays import ENV_ARRAY_ID, ENV_ARRAY_INDEX, ArrayRange, parse_array
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec, JobState
from reckon.model.state import restore, snapshot
from reckon.model.transaction import Transaction


def _spec(**kw) -> JobSpec:
    return JobSpec(name=kw.pop("name", "j"), command=("true",), **kw)


def _submit(h: Harness, **kw) -> str:
    job_id = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=_spec(**kw), now=h.now, uid=h.uid()))
    return job_id


def _run(h: Harness, job: str, agent: str = "a1") -> int:
    """Place ``job`` on ``agent`` through the scheduler; its attempt."""
    proposals = h.schedule()
    assert (job, agent) in proposals, f"{job} was not placed: {proposals}"
    h.pump()
    return h.job(job).attempt


def _finish(h: Harness, job: str, *, exit_code: int | None = 0, signal: int | None = None,
            timed_out: bool = False, agent: str = "a1") -> None:
    attempt = h.job(job).attempt
    h.agents[agent].processes.discard((job, attempt))
    h.agent_handle(agent, E.ProcessExited(job=job, attempt=attempt, exit_code=exit_code, signal=signal,
                                          finished_at=h.now, now=h.now, timed_out=timed_out))
    h.pump()


# ---- the spec and its codec ------------------------------------------------------------


def test_spec_v4_fields_default_out_of_the_map_so_old_specs_encode_as_before() -> None:
    plain = _spec()
    assert set(plain.to_dict()) == {"name", "command", "cwd", "env", "slots"}
    full = _spec(time_limit=90.0, retries=2, retry_on_exit=(3,), after=("1",), array_id="1", array_index=4,
                 array_max=2)
    assert JobSpec.from_dict(full.to_dict()) == full
    assert full.to_dict()["after"] == ["1"]


@pytest.mark.parametrize("bad", [
    dict(time_limit=0), dict(time_limit=-1.0), dict(time_limit=True), dict(retries=-1),
    dict(retry_on_exit=(3,)),  # without retries
    dict(retries=1, retry_on_exit=(0,)), dict(after=("1", "1")), dict(array_id="1"),
    dict(array_max=3), dict(array_id="1", array_index=-1),
])
def test_spec_v4_fields_validate(bad) -> None:
    with pytest.raises(ValueError):
        _spec(**bad)


def test_array_syntax() -> None:
    assert parse_array("1-1000") == ArrayRange(start=1, end=1000)
    r = parse_array("0-9:3%2")
    assert list(r.indices()) == [0, 3, 6, 9] and r.max_running == 2 and r.count == 4
    assert list(parse_array("7").indices()) == [7]
    for bad in ("", "1-", "a-b", "5-1", "1-10:0", "1-10%0", "1-2000000"):
        with pytest.raises(ValueError):
            parse_array(bad)


# ---- arrays -------------------------------------------------------------------------------


def test_array_submit_is_one_handle_with_one_job_per_index_and_the_first_id_names_it() -> None:
    h = Harness(slots=16)
    h.join("a1")
    before = len(h.log)
    commands = h.controller_handle(E.SubmitArray(spec=_spec(), array=parse_array("1-5:2"), now=h.now,
                                                 uids=(h.uid(), h.uid(), h.uid())))
    appends = [c for c in commands if isinstance(c, E.Append)]
    submitted = [f for f in appends[0].facts if isinstance(f, F.JobSubmitted)]
    assert len(appends) == 1 and len(submitted) == 3  # one group commit (with the id mark raised first)
    ids = [f.job for f in h.log[before:] if isinstance(f, F.JobSubmitted)]
    first = ids[0]
    for job_id, index in zip(ids, (1, 3, 5)):
        spec = h.job(job_id).spec
        assert (spec.array_id, spec.array_index) == (first, index)
        assert dict(spec.env)[ENV_ARRAY_ID] == first and dict(spec.env)[ENV_ARRAY_INDEX] == str(index)
    assert h.controller.state.arrays[first] == ids
    h.assert_replay_agrees()


def test_array_max_limits_how_many_run_at_once_and_survives_restart() -> None:
    h = Harness(slots=16)
    h.join("a1")
    h.controller_handle(E.SubmitArray(spec=_spec(), array=parse_array("1-6%2"), now=h.now))
    first = h.controller.state.next_job - 6
    ids = [str(first + i) for i in range(6)]
    placed = h.schedule()
    h.pump()
    assert [j for j, _ in placed] == ids[:2]
    assert h.schedule() == []  # the array runs its %MAX: nothing more, though slots are free
    # The controller refuses a proposal past %MAX too (the scheduler is not trusted with it).
    assert facts_of(h.dispatch(ids[2], "a1")) == []
    h.assert_views_agree()
    # Restart: the throttle is rebuilt from the state (RUNNING members noted to the new scheduler).
    h.crash_controller()
    h.connect("a1")
    h.pump()
    h.assert_views_agree()
    assert h.schedule() == []
    h.pump()
    _finish(h, ids[0])
    assert [j for j, _ in h.schedule()] == [ids[2]]
    h.assert_replay_agrees()


def test_cancel_of_the_array_id_cancels_its_pending_and_running_jobs() -> None:
    h = Harness(slots=16)
    h.join("a1")
    h.controller_handle(E.SubmitArray(spec=_spec(), array=parse_array("1-4%2"), now=h.now))
    ids = [str(h.controller.state.next_job - 4 + i) for i in range(4)]
    h.schedule()
    h.pump()
    _finish(h, ids[0])  # one done before the cancel: it stays COMPLETED
    h.schedule()
    h.pump()
    commands = h.controller_handle(E.CancelJob(job=ids[0], now=h.now, whole_array=True))
    assert {m.job for m in sends_of(commands, M.Kill)} == {ids[1], ids[2]}
    assert h.job(ids[0]).state is JobState.COMPLETED
    assert h.job(ids[3]).state is JobState.CANCELLED
    assert all(h.job(j).cancel_requested for j in ids[1:3])
    with pytest.raises(LocalProtocolError, match="not an array"):
        h.controller.handle(E.CancelJob(job=ids[1], now=h.now, whole_array=True))


# ---- time limits ----------------------------------------------------------------------------


def test_a_timed_out_attempt_ends_failed_with_reason_timeout() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h, time_limit=5.0, retries=3)  # a timeout is never retried
    _run(h, job)
    _finish(h, job, signal=15, exit_code=None, timed_out=True)
    record = h.job(job)
    assert (record.state, record.reason, record.signal) == (JobState.FAILED, "timeout", 15)
    assert record.to_dict()["reason"] == "timeout" and record.to_dict()["state"] == "FAILED"
    finished = [f for f in h.log if isinstance(f, F.JobFinished)]
    assert finished[-1].timed_out is True
    h.assert_replay_agrees()


def test_timed_out_travels_in_finished_and_report_entries_only_when_true() -> None:
    plain = M.Finished(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0)
    assert "timed_out" not in M.to_wire(plain)
    timed = replace(plain, exit_code=None, signal=9, timed_out=True)
    assert M.from_wire(M.to_wire(timed), to="controller") == timed
    entry = M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.FINISHED, signal=9, finished_at=1.0,
                          timed_out=True)
    assert len(entry.to_wire()) == 9 and M.ReportEntry.from_wire(entry.to_wire()) == entry
    assert len(replace(entry, timed_out=False).to_wire()) == 7
    with pytest.raises(ValueError):
        M.ReportEntry.from_wire(entry.to_wire()[:8] + [False])


# ---- retries ------------------------------------------------------------------------------


def test_a_failed_job_is_retried_up_to_n_times_and_each_attempt_stays_in_the_log() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h, retries=2)
    for attempt in (1, 2, 3):
        assert _run(h, job) == attempt
        _finish(h, job, exit_code=7)
    record = h.job(job)
    assert (record.state, record.exit_code, record.retried, record.attempt) == (JobState.FAILED, 7, 2, 3)
    finished = [(f.attempt, f.exit_code) for f in h.log if isinstance(f, F.JobFinished)]
    assert finished == [(1, 7), (2, 7), (3, 7)]
    h.assert_replay_agrees()


def test_retry_on_exit_retries_only_those_codes_and_a_cancelled_job_never() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h, retries=5, retry_on_exit=(75,))
    _run(h, job)
    _finish(h, job, exit_code=75)
    assert h.job(job).state is JobState.PENDING and h.job(job).attempt == 2
    _run(h, job)
    _finish(h, job, exit_code=1)  # not in the list
    assert h.job(job).state is JobState.FAILED
    other = _submit(h, retries=5)
    _run(h, other)
    h.cancel(other)
    _finish(h, other, signal=15, exit_code=None)
    assert h.job(other).state is JobState.CANCELLED and h.job(other).retried == 0


def test_a_successful_attempt_is_not_retried() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h, retries=2)
    _run(h, job)
    _finish(h, job, exit_code=0)
    assert h.job(job).state is JobState.COMPLETED and h.job(job).retried == 0


# ---- dependencies ---------------------------------------------------------------------------


def test_a_dependant_runs_only_after_its_dependencies_completed() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h)
    second = _submit(h)
    after = _submit(h, after=(first, second))
    placed = [j for j, _ in h.schedule()]
    assert after not in placed and {first, second} <= set(placed)
    h.pump()
    _finish(h, first)
    assert h.schedule() == []
    _finish(h, second)
    h.assert_views_agree()
    assert h.schedule() == [(after, "a1")]
    h.assert_replay_agrees()


def test_a_failed_dependency_cancels_the_dependants_with_a_reason_transitively() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h)
    middle = _submit(h, after=(first,))
    last = _submit(h, after=(middle,))
    _run(h, first)
    _finish(h, first, exit_code=3)
    assert h.job(middle).state is JobState.CANCELLED and h.job(middle).reason == f"dependency {first} ended FAILED"
    assert h.job(last).state is JobState.CANCELLED and h.job(last).reason == f"dependency {middle} ended CANCELLED"
    cancelled = [f for f in h.log if isinstance(f, F.JobCancelled)]
    assert [f.job for f in cancelled] == [middle, last]
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_a_dependency_that_is_retried_does_not_cancel_its_dependant() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h, retries=1)
    after = _submit(h, after=(first,))
    _run(h, first)
    _finish(h, first, exit_code=3)
    assert h.job(after).state is JobState.PENDING
    _run(h, first)
    _finish(h, first)
    assert h.schedule() == [(after, "a1")]


def test_an_unknown_or_doomed_dependency_is_refused_at_submit_and_changes_nothing() -> None:
    h = Harness()
    h.join("a1")
    before = h.controller.state.digest()
    with pytest.raises(LocalProtocolError, match="unknown job '99'"):
        h.controller.handle(E.SubmitJob(spec=_spec(after=("99",)), now=h.now))
    assert h.controller.state.digest() == before
    job = _submit(h)
    h.cancel(job)
    with pytest.raises(LocalProtocolError, match="already ended CANCELLED"):
        h.controller.handle(E.SubmitJob(spec=_spec(after=(job,)), now=h.now))
    # apply itself is strict too: a fact naming an unknown dependency never applies.
    with pytest.raises(LocalProtocolError):
        Transaction(h.controller.state, h.controller.volatile, h.controller.config).apply(
            F.JobSubmitted(job=h.controller.state.next_job_id(), spec=_spec(after=("98",)), submitted_at=h.now))


# ---- hold, release, requeue ------------------------------------------------------------------


def test_a_held_job_is_not_dispatched_until_released() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h)
    h.controller_handle(E.HoldJob(job=job, now=h.now))
    assert h.job(job).held and h.schedule() == []
    assert facts_of(h.dispatch(job, "a1")) == []  # the controller refuses a proposal too
    h.assert_views_agree()
    h.crash_controller()  # the hold is a fact: it survives a restart
    h.connect("a1")
    h.pump()
    assert h.job(job).held and h.schedule() == []
    h.controller_handle(E.ReleaseJob(job=job, now=h.now))
    assert h.schedule() == [(job, "a1")]
    with pytest.raises(LocalProtocolError, match="only a PENDING job can be held"):
        h.controller.handle(E.HoldJob(job=job, now=h.now))
    with pytest.raises(LocalProtocolError, match="not held"):
        h.controller.handle(E.ReleaseJob(job=job, now=h.now))
    h.assert_replay_agrees()


def test_requeue_runs_a_finished_job_again_as_a_new_attempt_and_refuses_a_pending_one() -> None:
    h = Harness()
    h.join("a1")
    job = _submit(h)
    with pytest.raises(LocalProtocolError, match="has not run yet"):
        h.controller.handle(E.RequeueJob(job=job, now=h.now))
    _run(h, job)
    _finish(h, job, exit_code=4)
    h.controller_handle(E.RequeueJob(job=job, now=h.now))
    record = h.job(job)
    assert (record.state, record.attempt, record.exit_code) == (JobState.PENDING, 2, None)
    assert _run(h, job) == 2
    _finish(h, job)
    assert h.job(job).state is JobState.COMPLETED
    assert [(f.attempt, f.exit_code) for f in h.log if isinstance(f, F.JobFinished)] == [(1, 4), (2, 0)]
    h.assert_replay_agrees()


def test_snapshot_keeps_the_v4_fields_and_reads_v2_snapshots() -> None:
    h = Harness()
    h.join("a1")
    held = _submit(h, retries=1)
    h.controller_handle(E.HoldJob(job=held, now=h.now))
    dep = _submit(h, after=(held,))
    data = snapshot(h.controller.state)
    again = restore(data)
    assert again.digest() == h.controller.state.digest()
    assert again.dependants == {held: [dep]}
    old = dict(data, v=2, jobs=[row[:14] for row in data["jobs"]])
    assert restore(old).jobs[held].held is False  # a v2 snapshot had no holds


def test_the_job_object_of_a_requeued_pending_job_names_no_agent() -> None:
    """``reckon show``/``jobs``: a requeued job runs nowhere until dispatched again; a finished job
    still names the agent it ran on."""
    h = Harness(["a1", "a2"])
    h.join("a1")
    job = _submit(h)
    _run(h, job)
    assert h.job(job).to_dict()["agent"] == "a1"
    _finish(h, job, exit_code=4)
    assert h.job(job).to_dict()["agent"] == "a1"  # where it ran
    h.controller_handle(E.RequeueJob(job=job, now=h.now))
    assert h.job(job).to_dict()["agent"] is None
    _run(h, job)
    h.disconnect("a1")
    h.controller_handle(E.ForgetAgent(agent="a1", now=h.now))  # its attempt lost: requeued
    record = h.job(job)
    assert (record.state, record.attempt, record.ran_on) == (JobState.PENDING, 3, "a1")
    assert record.to_dict()["agent"] is None
