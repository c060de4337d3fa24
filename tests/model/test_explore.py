"""The exhaustive explorer at the CI bound (issue #13): every state of every scenario, every invariant.

``explorer.SCENARIOS`` is the bound: 1 controller x 2 agents x 2 jobs x 1 slot
x page size 1, one fault per trace, depth 2-3 from eight starting points.  The
figures (states, depth, time) are printed (run with ``-s``) and kept in
docs/invariants.md, "Exhaustive exploration".  ``make check-deep`` runs
``explorer.DEEP``.
"""

from __future__ import annotations

import os

import tests.model.explorer as X
def test_explore_ci_bound(record_property):
    # The fuzz profile (`make fuzz`) explores the deep bound instead.
    scenarios = X.DEEP if os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz" else X.SCENARIOS
    results = X.run_scenarios(scenarios)
    for scenario, result in results:
        print(f"explorer {scenario.name}: {result.summary()}")
        record_property("report", f"explorer {scenario.name}: {result.summary()}")  # make test's summary
        assert result.violation is None, f"scenario {scenario.name}:\n{result.violation}"
        assert result.depth == scenario.depth, f"scenario {scenario.name} stopped at depth {result.depth}"
    assert len(results) == len(scenarios)
    assert sum(r.states for _, r in results) > 5000, "the bound explores fewer states than documented"


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
