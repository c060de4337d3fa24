"""Issue #21's model remainder: ``--begin`` (spec v8 ``begin``, the clock and its heap),
``--dependency=singleton`` (spec v8 ``singleton``, the (user, name) index), a cancel while held
keeping its hold (Slurm's JobHeldUser) and a pending cancel's time (JobCancelled v3)."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model.history import job_history
from reckon.model.jobs import JobSpec, JobState
from reckon.model.nodes import pending_reason
from reckon.model.permissions import Caller
from reckon.model.state import replay, restore, snapshot

from tests.model.harness import Harness, facts_of

ALICE = Caller(uid=1001, gid=1001, user="alice")
BOB = Caller(uid=1002, gid=1002, user="bob")


def _submit(h: Harness, name: str = "j", caller: Caller | None = None, **kw) -> str:
    job_id = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=JobSpec(name=name, command=("true",), **kw), now=h.now, uid=h.uid(),
                                    caller=caller))
    return job_id


def _end(h: Harness, job: str) -> None:
    h.start("a1", job)
    h.exit("a1", job)
    h.pump()
    assert h.job(job).state is JobState.COMPLETED


def test_spec_v8_fields_are_left_out_at_their_defaults_and_never_sent_to_agents() -> None:
    plain = JobSpec(name="j", command=("true",))
    assert "begin" not in plain.to_dict() and "singleton" not in plain.to_dict()
    later = JobSpec(name="j", command=("true",), begin=1_800_000_000.5, singleton=True)
    assert later.to_dict()["begin"] == 1_800_000_000.5 and later.to_dict()["singleton"] is True
    assert JobSpec.from_dict(later.to_dict()) == later
    assert "begin" not in later.agent_dict() and "singleton" not in later.agent_dict()
    for bad in ({"begin": "soon"}, {"begin": float("nan")}, {"begin": -1.0}, {"begin": True}, {"singleton": 1}):
        with pytest.raises(ValueError):
            JobSpec(name="j", command=("true",), **bad)


def test_a_begin_job_waits_for_its_time_and_the_clock_releases_it() -> None:
    h = Harness()
    h.join("a1")
    h.now = 100.0
    job = _submit(h, begin=130.0)
    assert h.schedule() == []
    assert "begin time" in pending_reason(h.controller, job)
    assert facts_of(h.dispatch(job, "a1")) == []  # a proposal before its time is refused too
    h.now = 129.0
    h.tick_controller()
    assert h.schedule() == []
    h.now = 130.0
    h.tick_controller()  # the tick moves the clock past the begin: the job is noted again
    h.assert_views_agree()
    assert h.schedule() == [(job, "a1")]
    assert not h.controller.volatile.begin_heap and not h.controller.volatile.begin_queued


def test_a_begin_job_waits_after_a_restart_too() -> None:
    h = Harness()
    h.join("a1")
    h.now = 100.0
    job = _submit(h, begin=200.0)
    h.crash_controller()
    h.connect("a1")
    h.pump()
    assert h.schedule() == []
    h.now = 201.0
    h.tick_controller()
    assert h.schedule() == [(job, "a1")]


def test_singleton_runs_one_job_of_a_name_and_user_at_a_time() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h, "solo", ALICE, singleton=True)
    second = _submit(h, "solo", ALICE, singleton=True)
    bobs = _submit(h, "solo", BOB, singleton=True)  # another user: not in the way
    other = _submit(h, "other", ALICE, singleton=True)  # another name: not in the way
    placed = {job for job, _ in h.schedule()}
    assert placed == {first, bobs, other}
    assert "singleton" in pending_reason(h.controller, second) and first in pending_reason(h.controller, second)
    h.pump()
    _end(h, first)
    h.assert_views_agree()
    assert h.schedule() == [(second, "a1")]
    h.assert_replay_agrees()


def test_singleton_waits_for_an_earlier_pending_job_of_its_name_and_any_running_one() -> None:
    """Slurm's rule: the other jobs need not be singletons; an earlier PENDING one (held here)
    is in the way, a later one is not, a RUNNING one always is."""
    h = Harness()
    h.join("a1")
    held = _submit(h, "solo")
    h.controller_handle(E.HoldJob(job=held, now=h.now))
    solo = _submit(h, "solo", singleton=True)
    later = _submit(h, "solo")
    assert h.schedule() == [(later, "a1")]
    h.pump()
    h.controller_handle(E.ReleaseJob(job=held, now=h.now))
    assert h.schedule() == [(held, "a1")]
    h.pump()
    _end(h, held)
    assert h.schedule() == []  # `later` still runs
    _end(h, later)
    assert h.schedule() == [(solo, "a1")]
    h.assert_views_agree()


def test_the_singleton_index_follows_replay_snapshot_and_restarts() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h, "solo", singleton=True)
    second = _submit(h, "solo", singleton=True)
    h.schedule()
    h.pump()
    state = h.controller.state
    state.validate_state()
    assert replay(list(h.log)).named == state.named
    assert restore(snapshot(state)).named.keys() == state.named.keys()
    h.crash_controller()
    h.connect("a1")
    h.pump()
    assert h.schedule() == []
    _end(h, first)
    assert h.schedule() == [(second, "a1")]


def test_a_job_cancelled_while_held_keeps_its_hold_and_its_cancel_time() -> None:
    h = Harness()
    h.join("a1")
    h.now = 50.0
    job = _submit(h)
    h.controller_handle(E.HoldJob(job=job, now=h.now))
    h.now = 75.0
    h.cancel(job)
    record = h.job(job)
    assert record.state is JobState.CANCELLED and record.held and record.finished_at == 75.0
    assert record.exit_code is None and record.signal is None  # no outcome: it never ran
    assert job_history(job, h.log).events[-1] == {"event": "cancelled", "attempt": None,
                                                  "reason": "cancelled by a user before it ran", "at": 75.0}
    with pytest.raises(Exception, match="only a PENDING job can be released"):
        h.controller.handle(E.ReleaseJob(job=job, now=h.now))
    h.assert_replay_agrees()
    h.controller_handle(E.RequeueJob(job=job, now=h.now))  # a new run starts unheld
    assert h.job(job).state is JobState.PENDING and not h.job(job).held and h.job(job).finished_at is None


def test_an_old_cancel_fact_replays_as_before() -> None:
    old = {"k": "job_cancelled", "v": 2, "job": "1", "reason": None}
    fact = F.decode(old)
    assert fact == F.JobCancelled(job="1") and fact.cancelled_at is None
    with pytest.raises(ValueError, match="unknown fields"):
        F.decode({**old, "cancelled_at": 5.0})
    assert "cancelled_at" not in F.encode(F.JobCancelled(job="1"))
    assert F.decode(F.encode(F.JobCancelled(job="1", cancelled_at=5.0))).cancelled_at == 5.0


def test_a_dependant_cancelled_for_its_dependency_records_the_time() -> None:
    h = Harness()
    h.join("a1")
    first = _submit(h)
    dependant = _submit(h, after=(first,))
    h.schedule()
    h.pump()
    h.now = 42.0
    h.start("a1", first)
    h.exit("a1", first, exit_code=3)
    h.pump()
    assert h.job(dependant).state is JobState.CANCELLED and h.job(dependant).finished_at == 42.0
