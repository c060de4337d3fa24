"""Hypothesis strategies for scenarios: which steps, with which fault rules switched on."""

from __future__ import annotations

from hypothesis import strategies as st

import tests.sim.scenario as S
hosts = st.sampled_from(S.HOSTS)
short = st.floats(min_value=0.0, max_value=15.0, allow_nan=False).map(lambda s: round(s, 2))
# Jobs that end at once, short ones, and ones that outlive most scenarios (so cancels and orphans show).
durations = st.one_of(st.just(0.0), st.floats(min_value=0.1, max_value=40.0).map(lambda d: round(d, 2)), st.just(300.0))


submits = st.builds(S.Submit, duration=durations, exit_code=st.sampled_from([0, 0, 1, 3]))


def step(rules: frozenset[str]) -> st.SearchStrategy[S.Step]:
    """One step; the fault rules not in ``rules`` are never drawn."""
    options: list[st.SearchStrategy[S.Step]] = [submits, submits, st.builds(S.Wait, seconds=short)]
    by_rule = {
        "cancel": st.builds(S.Cancel, pick=st.integers(0, 50)),
        "delay": st.builds(S.Delay, host=hosts, seconds=short),
        "partition": st.builds(S.Partition, host=hosts, seconds=st.floats(1.0, 40.0).map(lambda s: round(s, 1))),
        "reset": st.builds(S.Reset, host=hosts),
        "controller_crash": st.builds(S.ControllerRestart, down=short, backup=st.booleans()),
        "rollback": st.builds(S.ControllerRollback, down=short),
        "agent_crash": st.builds(S.AgentRestart, host=hosts, down=short),
        "duplicate_name": st.builds(S.Duplicate, host=hosts, seconds=st.floats(1.0, 30.0).map(lambda s: round(s, 1))),
        "clock_step": st.builds(S.ClockStep, machine=st.sampled_from(["controller", "agents"]),
                                seconds=st.sampled_from([-30.0, -5.0, 5.0, 30.0, 600.0])),
        "online_backup": st.just(S.HotBackup()),
        "cloned_agent_state": st.builds(S.Duplicate, host=hosts, seconds=st.floats(1.0, 30.0).map(lambda s: round(s, 1)),
                                        copy_state=st.just(True)),
        "cloned_vm_same_machine": st.builds(S.Duplicate, host=hosts,
                                            seconds=st.floats(1.0, 30.0).map(lambda s: round(s, 1)),
                                            copy_state=st.just(True), same_machine=st.just(True)),
    }
    unknown = rules - set(S.RULES)
    if unknown:
        raise ValueError(f"unknown fault rules {sorted(unknown)}; known: {sorted(S.RULES)}")
    options += [strategy for name, strategy in by_rule.items() if name in rules]
    return st.one_of(options)


def scenarios(rules: frozenset[str], *, max_steps: int) -> st.SearchStrategy[S.Scenario]:
    launch_time = S.LAUNCH_TIME if "cancel_during_launch" in rules else 0.0
    # A few jobs first (so that faults find work to break), then the steps.
    steps = st.tuples(st.lists(submits, min_size=1, max_size=6),
                      st.lists(step(rules), min_size=1, max_size=max_steps)).map(lambda p: (*p[0], *p[1]))
    return st.builds(S.Scenario, seed=st.integers(0, 2**32 - 1), steps=steps,
                     launch_time=st.just(launch_time),
                     cancels_in_launch=st.just("cancel_during_launch" in rules),
                     reset_in_handshake=st.just("reset_in_handshake" in rules),
                     sends_fail_after_reset=st.booleans() if "sends_fail_after_reset" in rules else st.just(False),
                     latency=st.sampled_from([0.0, 0.01, 0.2]))
