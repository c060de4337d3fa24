"""The exhaustive explorer at the CI bound (issue #13): every state of every scenario, every invariant.

``explorer.SCENARIOS`` is the bound: 1 controller x 2 agents x 2 jobs x 1 slot
x page size 1, one fault per trace, depth 2-3 from eight starting points; and
issue #22's three under backfill (a blocked wide job, short and unbounded jobs
behind it; a controller or agent crash; partitions changed by the operator).  The
figures (states, depth, time) are printed (run with ``-s``) and kept in
docs/invariants.md, "Exhaustive exploration".  ``make check-deep`` runs
``explorer.DEEP``.
"""

from __future__ import annotations

import os

import pytest

from reckon.model.jobs import JobState
from reckon.model.partitions import may_run_on

import tests.model.explorer as X
from tests.model import resource_checks

_CI_SCENARIOS = X.DEEP if os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz" else X.SCENARIOS
# The scenarios of over 20 s (the three largest state spaces, 6,500 of the bound's 8,700 states)
# run in `make test-long`; `make test` explores the other five, every invariant checked in each.
LONG_SCENARIOS = frozenset({"two-rounds", "settled", "dispatching"})


# One test per scenario, so the two workers of a run share the bound.
@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name, marks=[pytest.mark.long] if s.name in LONG_SCENARIOS
                                                   else []) for s in _CI_SCENARIOS])
def test_explore_ci_bound(scenario, record_property):
    # The fuzz profile (`make fuzz`) explores the deep bound instead.
    [(explored, result)] = X.run_scenarios((scenario,))
    print(f"explorer {explored.name}: {result.summary()}")
    record_property("report", f"explorer {explored.name}: {result.summary()}")  # make test's summary
    assert result.violation is None, f"scenario {explored.name}:\n{result.violation}"
    assert result.depth == explored.depth, f"scenario {explored.name} stopped at depth {result.depth}"
    # Every scenario reaches well over a hundred distinct states (2,000 for the largest): far
    # fewer means the bound shrank by accident.
    assert result.states > 100, f"scenario {explored.name} explored only {result.states} states"


def test_equal_states_are_explored_once():
    """States equal but for counters (connection numbers, round tokens) have one canonical form."""
    def cut_and_back(m: X.ExploredMachine) -> None:
        m.disconnect(i=0, lose_in_flight=False)  # a1
        m.rejoin(i=0, deliver_join=False, then_schedule=False)
        m.settle()
        m.check()

    a = X.ExploredMachine.start(X.Scope())
    b = X.ExploredMachine.start(X.Scope())
    cut_and_back(a)
    cut_and_back(b)
    cut_and_back(b)  # once more: newer connection numbers and tokens, the same state
    assert a.next_conn != b.next_conn and a.next_token != b.next_token
    assert X.canonical(a) == X.canonical(b)
    a.advance_time(dt=2.5, jitter=0.0, fire=False)
    assert X.canonical(a) != X.canonical(b)


def test_violation_prints_trace_and_replayable_snippet():
    v = X.Violation(invariant="SOME-CHECK", message="SOME-CHECK: boom", scope=X.Scope(settle_first=False),
                    trace=[X._step("deliver", i=0, keep_copy=False)])
    text = str(v)
    assert "1. deliver(i=0, keep_copy=False)" in text
    namespace: dict = {}
    exec(v.snippet(), {"ExploredMachine": X.ExploredMachine, "Scope": X.Scope}, namespace)  # noqa: S102
    namespace["test_found_by_explorer"]()  # the snippet runs (and, without a bug, passes)


# ---- issue #22: the scheduling scenarios reach the decisions they are there for -----------------


def _scenario(name: str) -> X.Scenario:
    return next(s for s in X.SCENARIOS if s.name == name)


def _backfilled(m: X.ExploredMachine) -> bool:
    """A job runs on the agent the latest pass promised to a job queued before it, still pending."""
    jobs = m.controller.state.jobs
    return any(rec.state is JobState.PENDING and any(j.state is JobState.RUNNING and j.agent == r.agent
                                                     and int(j.id) > int(job) for j in jobs.values())
               for job, r in m.scheduler.reservations.items() if (rec := jobs.get(job)) is not None)


def _held_back(m: X.ExploredMachine) -> bool:
    """A ready job fits an agent now, but starting it there would delay an earlier job's promise."""
    state = m.controller.state
    return any(m._may_start(job) and resource_checks.would_fit(state, name, job) and m._delays_a_promise(job, name)
               for job in state.jobs.values() if job.state is JobState.PENDING for name in state.agents)


@pytest.mark.parametrize("name", ["backfill", "backfill-fault"])
def test_backfill_scenarios_backfill_and_hold_back(name):
    """Not vacuous: the search meets a job started around a promise and one held back by it."""
    sc = _scenario(name)
    for goal in (_backfilled, _held_back):
        result = X.explore(sc.scope, sc.depth, prefix=sc.prefix, goal=goal, liveness=lambda level, leaf: False)
        assert result.violation is None and result.goal is not None, f"{name}: no state where {goal.__name__}"


def test_priority_scenario_starts_a_pushed_job_before_an_older_one():
    """Not vacuous: after the operator's push, a job runs while a job queued before it still waits."""
    sc = _scenario("backfill-priority")

    def pushed_ahead(m: X.ExploredMachine) -> bool:
        jobs = m.controller.state.jobs.values()
        return any(j.state is JobState.RUNNING and j.priority_adjust and any(
            o.state is JobState.PENDING and int(o.id) < int(j.id) for o in jobs) for j in jobs)

    result = X.explore(sc.scope, sc.depth, prefix=sc.prefix, goal=pushed_ahead, liveness=lambda level, leaf: False)
    assert result.violation is None and result.goal is not None and result.goal[0][0] == "prioritize"


def test_partition_scenario_meets_a_proposal_made_stale_by_the_operator():
    """Not vacuous: a proposal is on its way to an agent its job's partition no longer starts
    jobs on (moved or down), and a job runs on an agent outside its partition (it finishes there)."""
    sc = _scenario("partition-moved")

    def stale_proposal(m: X.ExploredMachine) -> bool:
        state = m.controller.state
        return any(job in state.jobs and not may_run_on(state.partitions, state.jobs[job].spec, agent)
                   for job, agent in m.proposals)

    def runs_outside(m: X.ExploredMachine) -> bool:
        state = m.controller.state
        return any(j.state is JobState.RUNNING and not may_run_on(state.partitions, j.spec, j.agent)
                   for j in state.jobs.values())

    for goal in (stale_proposal, runs_outside):
        result = X.explore(sc.scope, sc.depth, prefix=sc.prefix, goal=goal, liveness=lambda level, leaf: False)
        assert result.violation is None and result.goal is not None, f"no state where {goal.__name__}"
