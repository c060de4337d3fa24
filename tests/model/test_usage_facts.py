"""Issue #22: fair share charges every attempt its CPU-seconds, however it ends -- a reported
finish, a requeue (an agent lost or forgotten, a dispatch never delivered) or a confirmed cancel --
from the facts alone, so the usage after a replay is the live one."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.history import job_history
from reckon.model.jobs import JobSpec, JobState
from reckon.model.permissions import Caller
from reckon.model.priority import DAY, PriorityConfig, attempt_usage
from reckon.model.state import ControllerState, replay, restore, snapshot

from tests.model.usage_check import usage_from_log

ALICE = Caller(uid=1000, gid=1000, user="alice")
ROOT = Caller(uid=0, gid=0, user="root", operator=True)
CPUS, STARTED = 2, 10.0


class World:
    """One controller and one agent "a" (4 CPUs) on connection 1; every appended fact is kept."""

    def __init__(self) -> None:
        self.ctrl = Controller(ControllerConfig(lost_after=60.0, priority=PriorityConfig(half_life=DAY)))
        self.log: list[F.Fact] = []
        self.handle(E.ControllerStarted(now=0.0, grace=0.0))  # records the half-life (UsageDecaySet)
        join = M.Join(agent="a", slots=4, version=M.PROTOCOL_VERSION, running=0)
        self.handle(E.AgentJoined(conn=1, join=join, token=b"t" * M.TOKEN_BYTES, now=0.0))

    def handle(self, event: E.ControllerEvent) -> list[F.Fact]:
        facts = [f for c in self.ctrl.handle(event) if isinstance(c, E.Append) for f in c.facts]
        self.log.extend(facts)
        return facts

    def running(self, *, start: bool = True) -> str:
        """Alice's CPUS-CPU job, dispatched to "a" and (if ``start``) started at STARTED."""
        job = str(len(self.ctrl.state.jobs) + 1)
        self.handle(E.SubmitJob(spec=JobSpec(name="j", command=("true",), slots=CPUS), now=1.0, caller=ALICE))
        self.handle(E.DispatchProposed(job=job, agent="a", now=1.0))
        if start:
            attempt = self.ctrl.state.jobs[job].attempt
            self.handle(E.MessageFromAgent(conn=1, message=M.Started(job=job, attempt=attempt, started_at=STARTED),
                                           now=STARTED))
        return job

    def usage(self, at: float) -> float:
        return self.ctrl.state.usage.at("alice", at)

    def assert_replay_agrees(self, at: float) -> None:
        """The log replayed from nothing, and from a snapshot at its middle, gives the live table;
        the oracle (tests/model/usage_check.py) computes the same from the facts alone."""
        live = self.ctrl.state.usage
        assert replay(list(self.log)).usage.key() == live.key()
        half = len(self.log) // 2
        assert replay(self.log[half:], restore(snapshot(replay(self.log[:half])))).usage.key() == live.key()
        assert usage_from_log(self.log, at) == pytest.approx({u: live.at(u, at) for u in live.users}, rel=1e-9)


def used(seconds: float) -> float:
    """What CPUS CPUs for ``seconds`` are charged, decayed to the attempt's end."""
    return attempt_usage(CPUS, 0.0, seconds, DAY)


def test_an_attempt_requeued_because_its_agent_was_lost_is_charged_up_to_the_loss():
    w = World()
    job = w.running()
    w.handle(E.ConnectionClosed(conn=1, now=100.0))
    facts = w.handle(E.Tick(now=200.0))  # silent for 100 s > lost_after
    assert facts == [F.JobRequeued(job=job, attempt=1, reason="agent lost", requeued_at=200.0)]
    assert w.ctrl.state.jobs[job].state is JobState.PENDING
    assert w.usage(200.0) == pytest.approx(used(200.0 - STARTED)) and w.usage(200.0) > 0
    w.assert_replay_agrees(500.0)
    attempt = job_history(job, w.log).attempts[1]  # the history's end of the attempt is the fact's time
    assert (attempt.ended, attempt.started_at, attempt.finished_at) == ("requeued", STARTED, 200.0)


def test_an_attempt_on_an_agent_the_operator_forgot_is_charged_up_to_the_forget():
    w = World()
    job = w.running()
    w.handle(E.ConnectionClosed(conn=1, now=30.0))
    facts = w.handle(E.ForgetAgent(agent="a", now=40.0, caller=ROOT))
    assert F.JobRequeued(job=job, attempt=1, reason="agent forgotten by the operator", requeued_at=40.0) in facts
    assert w.usage(40.0) == pytest.approx(used(40.0 - STARTED))
    w.assert_replay_agrees(40.0)


def test_a_cancelled_attempt_whose_agent_is_lost_is_charged_up_to_the_confirmation():
    w = World()
    job = w.running()
    w.handle(E.CancelJob(job=job, now=50.0, caller=ALICE))
    w.handle(E.ConnectionClosed(conn=1, now=60.0))
    facts = w.handle(E.Tick(now=150.0))
    assert facts == [F.JobCancelConfirmed(job=job, attempt=1, confirmed_at=150.0)]
    assert w.ctrl.state.jobs[job].state is JobState.CANCELLED
    assert w.usage(150.0) == pytest.approx(used(150.0 - STARTED))
    w.assert_replay_agrees(1000.0)
    attempt = job_history(job, w.log).attempts[1]
    assert (attempt.ended, attempt.finished_at) == ("cancelled", 150.0)


def test_an_attempt_that_never_started_is_not_charged():
    w = World()
    job = w.running(start=False)
    w.handle(E.ConnectionClosed(conn=1, now=5.0))
    facts = w.handle(E.DispatchUndelivered(job=job, attempt=1, now=5.0))
    assert facts == [F.JobRequeued(job=job, attempt=1, reason="dispatch not delivered", requeued_at=5.0)]
    assert w.ctrl.state.usage.users == {}
    w.assert_replay_agrees(5.0)


def test_a_requeued_attempt_and_its_next_are_both_charged():
    """The requeue clears the record's start: the second attempt's charge is its own, not the first's."""
    w = World()
    job = w.running()
    w.handle(E.ConnectionClosed(conn=1, now=100.0))
    w.handle(E.Tick(now=200.0))
    join = M.Join(agent="a", slots=4, version=M.PROTOCOL_VERSION, running=0)
    w.handle(E.AgentJoined(conn=2, join=join, token=b"u" * M.TOKEN_BYTES, now=300.0))
    w.handle(E.DispatchProposed(job=job, agent="a", now=300.0))
    w.handle(E.MessageFromAgent(conn=2, message=M.Started(job=job, attempt=2, started_at=310.0), now=310.0))
    w.handle(E.MessageFromAgent(conn=2, message=M.Finished(job=job, attempt=2, exit_code=0, signal=None,
                                                           finished_at=410.0, started_at=310.0), now=410.0))
    assert w.ctrl.state.jobs[job].state is JobState.COMPLETED
    first = used(200.0 - STARTED) * 2.0 ** (-(410.0 - 200.0) / DAY)
    assert w.usage(410.0) == pytest.approx(first + used(100.0))
    w.assert_replay_agrees(410.0)


def test_v1_requeue_and_confirm_facts_decode_as_before_and_charge_nothing():
    """A log written before the times were recorded replays as it did: the attempt uncharged."""
    old_requeue = {"k": "job_requeued", "v": 1, "job": "1", "attempt": 1, "reason": "agent lost"}
    old_confirm = {"k": "job_cancel_confirmed", "v": 1, "job": "2", "attempt": 1}
    assert F.decode(old_requeue) == F.JobRequeued(job="1", attempt=1, reason="agent lost")
    assert F.decode(old_confirm) == F.JobCancelConfirmed(job="2", attempt=1)
    for bad in ({**old_requeue, "requeued_at": 5.0}, {**old_confirm, "confirmed_at": 5.0}):
        with pytest.raises(ValueError, match="unknown fields"):
            F.decode(bad)  # a v1 fact with the v2 field is corruption
    new = F.JobRequeued(job="1", attempt=1, reason="agent lost", requeued_at=5.0)
    assert F.encode(new)["v"] == 2 and F.decode(F.encode(new)) == new
    assert "requeued_at" not in F.encode(F.JobRequeued(job="1", attempt=1, reason="x"))
    w = World()
    w.running()
    w.running()
    w.handle(E.CancelJob(job="2", now=20.0, caller=ALICE))
    state = replay(list(w.log) + [F.decode(old_requeue), F.decode(old_confirm)])
    assert state.jobs["1"].state is JobState.PENDING and state.jobs["2"].state is JobState.CANCELLED
    assert state.usage.users == {}
    assert usage_from_log(list(w.log) + [F.decode(old_requeue), F.decode(old_confirm)], 30.0) == {}


def test_a_time_that_is_not_a_time_is_refused():
    with pytest.raises(ValueError, match="requeued_at"):
        F.JobRequeued(job="1", attempt=1, reason="x", requeued_at=float("nan"))
    with pytest.raises(ValueError, match="confirmed_at"):
        F.JobCancelConfirmed(job="1", attempt=1, confirmed_at="soon")
