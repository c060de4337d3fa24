"""Priorities and fair share (model/priority.py): factors, decay, validation, and the usage table
after a replay of the fact log equal to the live one."""

import dataclasses

import pytest

from reckon.daemon.bench.swf import SwfJob
from reckon.daemon.bench.trace import Replay
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.errors import ModelCorrupted, PermissionDenied
from reckon.model.jobs import JobSpec
from reckon.model.permissions import Caller
from reckon.model.priority import DAY, PriorityConfig, UsageTable, attempt_usage
from reckon.model.scheduler import Scheduler
from reckon.model.state import ControllerState, replay, restore, snapshot


def test_config_validation_is_one_line_value_errors():
    for bad in (dict(weight_age=-1), dict(weight_fairshare=1.5), dict(half_life=0), dict(age_max=-3),
                dict(recompute_batch=0), dict(shares=(("bob", 1), ("alice", 2))), dict(shares=(("a", 0),))):
        with pytest.raises(ValueError, match="priority"):
            PriorityConfig(**bad)
    with pytest.raises(ValueError, match="nice"):
        JobSpec(name="x", command=("true",), nice=10001)
    assert JobSpec(name="x", command=("true",), nice=-10000).nice == -10000


def test_nice_is_kept_in_the_fact_log_and_never_sent_to_agents():
    spec = JobSpec(name="x", command=("true",), nice=50)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "nice" not in spec.agent_dict() and "nice" not in JobSpec(name="x", command=("true",)).to_dict()


def test_usage_halves_every_half_life():
    table = UsageTable(half_life=DAY)
    table.charge("alice", 4, 0.0, 100.0)
    fresh = table.at("alice", 100.0)
    assert fresh == pytest.approx(400.0, rel=1e-3)  # a short attempt: nearly cpus x seconds
    assert table.at("alice", 100.0 + DAY) == pytest.approx(fresh / 2)
    assert table.at("bob", 100.0) == 0.0
    # A later charge decays what was there to its own time first.
    table.charge("alice", 4, DAY, DAY + 100.0)
    assert table.at("alice", DAY + 100.0) == pytest.approx(fresh / 2 + fresh)
    assert table.total_at(DAY + 100.0) == pytest.approx(fresh / 2 + fresh)
    # An end reported out of order is decayed to the table's time, not the other way round.
    table.charge("alice", 1, 0.0, 50.0)
    assert table.users["alice"][1] == DAY + 100.0
    assert attempt_usage(1, 0.0, DAY, DAY) == pytest.approx(DAY / 2 / 0.6931471805599453)


def _job(number, submit, run, procs, user):
    return SwfJob(number=number, submit=submit, wait=0.0, run=run, procs=procs, requested_time=None,
                  status=1, user=user, group=user, line=number)


class _Recording(Replay):
    """The trace's replayer, keeping every fact the controller appended."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.facts = []

    def _handle(self, event):
        commands = super()._handle(event)
        self.facts.extend(f for c in commands if isinstance(c, E.Append) for f in c.facts)
        return commands


def _run(config, jobs):
    rep = _Recording(1, 1, scheduler=Scheduler(config.user_limits), config=config)
    ids = rep.run(jobs)
    return rep, {line.number: rep.controller.state.jobs[job_id] for job_id, line in ids.items()}


# User 1 runs a long job, then queues a short one; user 2 queues one after it.  One CPU.
WORKLOAD = [_job(1, 0, 1000, 1, 1), _job(2, 10, 10, 1, 1), _job(3, 20, 10, 1, 2)]


def test_fair_share_puts_the_light_user_first_and_without_weights_it_is_fifo():
    _, fair = _run(ControllerConfig(), WORKLOAD)
    assert fair[3].started_at < fair[2].started_at  # user 2 has used nothing: before user 1's second job
    zero = {f.name: 0 for f in dataclasses.fields(PriorityConfig) if f.name.startswith("weight_")}
    _, fifo = _run(ControllerConfig(priority=PriorityConfig(**zero)), WORKLOAD)
    assert fifo[2].started_at < fifo[3].started_at


def test_usage_after_replay_equals_live_usage_and_survives_a_snapshot():
    rep, _ = _run(ControllerConfig(), WORKLOAD + [_job(4, 2000, 500, 1, 3)])
    live = rep.controller.state
    assert set(live.usage.users) == {"user1", "user2", "user3"}
    replayed = replay(rep.facts, ControllerState(usage=UsageTable(half_life=live.usage.half_life)))
    assert replayed.usage.key() == live.usage.key()
    assert replayed.digest() == live.digest()
    half = len(rep.facts) // 2
    restored = replay(rep.facts[half:], restore(snapshot(replay(rep.facts[:half], ControllerState()))))
    assert restored.usage.key() == live.usage.key()


def test_factors_shown_for_a_pending_job():
    c = Controller(ControllerConfig())
    alice = Caller(uid=1000, gid=1000, user="alice")
    c.handle(E.SubmitJob(spec=JobSpec(name="x", command=("true",), nice=7), now=100.0, queue_anyway=True,
                         caller=alice))
    f = c.priority_factors("1")
    assert f.fairshare == 1.0 and f.nice == 7 and f.priority == int(10000 * f.fairshare + 20000 * f.age) - 7


def test_negative_nice_and_priority_adjustments_are_for_operators():
    c = Controller(ControllerConfig())
    alice = Caller(uid=1000, gid=1000, user="alice")
    root = Caller(uid=0, gid=0, user="root", operator=True)
    with pytest.raises(PermissionDenied, match="nice"):
        c.handle(E.SubmitJob(spec=JobSpec(name="x", command=("true",), nice=-5), now=1.0, caller=alice,
                             queue_anyway=True))
    c.handle(E.SubmitJob(spec=JobSpec(name="x", command=("true",)), now=1.0, caller=alice, queue_anyway=True))
    with pytest.raises(PermissionDenied, match="operator"):
        c.handle(E.UpdateJob(job="1", priority=500, now=2.0, caller=alice))
    before = c.priority_factors("1").priority
    commands = c.handle(E.UpdateJob(job="1", priority=500, now=2.0, caller=root))
    assert F.JobPriorityAdjusted(job="1", priority=500) in commands[0].facts
    notes = [cmd.note for cmd in commands if isinstance(cmd, E.Notify)]
    assert notes and notes[-1].priority == c.priority_factors("1").priority
    assert c.priority_factors("1").priority - before == 500


def test_a_start_records_the_configs_half_life_so_a_replay_decays_alike():
    c = Controller(ControllerConfig(priority=PriorityConfig(half_life=DAY)))
    commands = c.handle(E.ControllerStarted(now=1.0, grace=0.0))
    facts = [f for cmd in commands if isinstance(cmd, E.Append) for f in cmd.facts]
    assert F.UsageDecaySet(half_life=DAY) in facts
    assert c.state.usage.half_life == DAY == replay(facts).usage.half_life
    again = Controller(ControllerConfig(priority=PriorityConfig(half_life=DAY)), replay(facts))
    later = again.handle(E.ControllerStarted(now=2.0, grace=0.0))
    assert not any(isinstance(f, F.UsageDecaySet) for cmd in later if isinstance(cmd, E.Append) for f in cmd.facts)


def test_a_priority_left_behind_is_caught():
    rep, _ = _run(ControllerConfig(), WORKLOAD)
    rep.controller.validate_state()  # every job ended: no priority is left
    assert rep.controller.volatile.priorities == {}
    rep.controller.volatile.priorities["1"] = 5  # as if a finished job kept its priority
    with pytest.raises(ModelCorrupted, match="INV-FAIRSHARE-REPLAY"):
        rep.controller.validate_state()


def test_a_job_submitted_into_an_empty_queue_is_weighed_by_the_usage_as_of_then():
    """A view older than recompute_every is not what the scheduler hears: the sweep that came due
    runs in the submit's own transaction, so user 1's 1,000 CPU-seconds since the queue emptied
    count in its next job's priority before any pass can place it."""
    rep = Replay(1, 1, scheduler=Scheduler(), config=ControllerConfig())
    rep.join_agents(0.0)
    first = rep.submit(_job(1, 0, 1000, 1, 1), 0.0)
    rep._schedule(0.0)
    assert rep.controller.state.jobs[first].started_at == 0.0
    rep._finish(first, 1000.0)
    rep._handle(E.Tick(now=1000.0, mono=1000.0))
    second = rep.submit(_job(2, 2000, 10, 1, 1), 2000.0)
    assert rep.controller.priority_factors(second).fairshare == pytest.approx(0.5)  # all of the usage is user 1's
