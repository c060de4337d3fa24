"""The exhaustive explorer at the CI bound (issue #13): every state of every scenario, every invariant.

``explorer.SCENARIOS`` is the bound: 1 controller x 2 agents x 2 jobs x 1 slot
x page size 1, one fault per trace, depth 2-3 from eight starting points.  The
figures (states, depth, time) are printed (run with ``-s``) and kept in
docs/invariants.md, "Exhaustive exploration".  ``make check-deep`` runs
``explorer.DEEP``.
"""

from __future__ import annotations

import os

import pytest

import tests.model.explorer as X
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
