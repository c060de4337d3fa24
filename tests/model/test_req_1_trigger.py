"""Requirement 1: Reconciliation Trigger (seed 001)."""

from __future__ import annotations

import pytest
from tests.model.harness import Harness, sends_of, spec, token

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState


def _rejoin_commands(h: Harness, name: str = "a1") -> list[E.Command]:
    h.connect(name)
    return h.deliver_to_controller(name, 1)


def test_req_1_1_join_with_nonterminal_jobs_arms_round() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(2)
    h.disconnect("a1")

    commands = _rejoin_commands(h)

    welcome = sends_of(commands, M.Welcome)
    assert len(welcome) == 1 and welcome[0].token is not None and welcome[0].query_pages == 1
    queries = sends_of(commands, M.ResyncQuery)
    assert [q.token for q in queries] == [welcome[0].token]
    assert h.controller.node_state("a1") == NodeState.RECONCILING
    assert h.timers["a1"][0] == welcome[0].token


def test_req_1_1_round_is_armed_by_the_join_itself() -> None:
    """Welcome, the query and the round timer all come out of handling the join."""
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    h.disconnect("a1")

    commands = _rejoin_commands(h)

    kinds = [type(c.message).__name__ if isinstance(c, E.Send) else type(c).__name__ for c in commands]
    assert kinds.index("Welcome") < kinds.index("ResyncQuery") < kinds.index("StartRoundTimer")
    assert h.controller.sessions["a1"].round is not None


def test_req_1_2_join_without_nonterminal_jobs_arms_no_round() -> None:
    h = Harness()
    commands = _rejoin_commands(h)

    welcome = sends_of(commands, M.Welcome)
    assert len(welcome) == 1 and welcome[0].token is None and welcome[0].query_pages == 0
    assert sends_of(commands, M.ResyncQuery) == []
    assert not any(isinstance(c, E.StartRoundTimer) for c in commands)
    assert h.controller.node_state("a1") == NodeState.IDLE


def test_req_1_2_only_terminal_jobs_on_agent_arms_no_round() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    for i, job in enumerate(ids):
        h.exit("a1", job, exit_code=i)
    h.pump()
    assert all(h.job(j).terminal for j in ids)
    h.disconnect("a1")

    commands = _rejoin_commands(h)

    assert sends_of(commands, M.Welcome)[0].token is None
    assert sends_of(commands, M.ResyncQuery) == []
    assert h.controller.sessions["a1"].round is None


def test_req_1_2_jobs_on_another_agent_arm_no_round() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.run_jobs(2, "a1")

    commands = _rejoin_commands(h, "a2")

    assert sends_of(commands, M.Welcome)[0].token is None
    assert h.controller.node_state("a2") == NodeState.IDLE


def _queried(commands: list[E.Command]) -> list[tuple[str, int]]:
    return [pair for q in sends_of(commands, M.ResyncQuery) for pair in q.jobs]


def test_req_1_3_first_ever_registration_with_recorded_jobs_arms_round() -> None:
    """A controller whose log places jobs on an agent that never registered."""
    facts = [
        F.JobSubmitted(job="1", spec=spec(), submitted_at=0.0),
        F.JobDispatched(job="1", attempt=1, agent="a1"),
    ]
    h = Harness()
    h.controller = Controller.from_log(facts, h.config)
    h.log = list(facts)
    assert "a1" not in h.controller.sessions
    assert not h.controller.state.agents["a1"].registered

    commands = _rejoin_commands(h)

    assert any(isinstance(f, F.AgentRegistered) for f in h.log)
    assert sends_of(commands, M.Welcome)[0].token is not None
    assert _queried(commands) == [("1", 1)]


@pytest.mark.parametrize("kind", ["reconnect", "failover"])
def test_req_1_3_trigger_does_not_depend_on_join_kind(kind: str) -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    h.exit("a1", ids[0])
    h.pump()
    if kind == "reconnect":
        h.disconnect("a1")
    else:
        h.crash_controller()
        assert h.controller.sessions == {}

    commands = _rejoin_commands(h)

    assert sends_of(commands, M.Welcome)[0].token is not None
    assert sorted(_queried(commands)) == [("2", 1), ("3", 1)]


def test_req_1_3_failover_without_jobs_arms_no_round() -> None:
    h = Harness()
    h.join("a1")
    h.crash_controller()
    commands = _rejoin_commands(h)
    assert sends_of(commands, M.Welcome)[0].token is None


def test_req_1_3_each_join_arms_a_fresh_round_token() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    tokens = []
    for _ in range(3):
        h.disconnect("a1")
        commands = _rejoin_commands(h)
        tokens.append(sends_of(commands, M.Welcome)[0].token)
        h.pump()
        assert h.job("1").state is JobState.RUNNING
    assert len(set(tokens)) == 3 and None not in tokens
    assert token(0) not in tokens
