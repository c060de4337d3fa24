"""``ControllerState.validate_state``: every derived index recomputed from the records and compared.

The checkers run it after every ``handle`` (the stateful machine, the explorer, the swarm, the
daemon simulation).  Here each index is corrupted in turn: the check must name it.
"""

from __future__ import annotations

from typing import Callable

import pytest

from reckon.model import facts as F
from reckon.model import state as S
from reckon.model.errors import ModelCorrupted
from reckon.model.jobs import JobSpec
from reckon.model.state import ControllerState

from tests.model.harness import spec


def busy() -> ControllerState:
    """Jobs of every kind of index: a dependency, a throttled array with a running member, placements."""
    array = JobSpec(name="arr", command=("true",), array_id="2", array_index=0, array_max=1)
    state = S.replay([
        F.AgentRegistered(agent="a1", slots=4),
        F.AgentRegistered(agent="a2", slots=4),
        F.JobSubmitted(job="1", spec=spec("one"), submitted_at=1.0),
        F.JobSubmitted(job="2", spec=array, submitted_at=1.0),
        F.JobSubmitted(job="3", spec=JobSpec(name="arr", command=("true",), array_id="2", array_index=1,
                                             array_max=1), submitted_at=1.0),
        F.JobSubmitted(job="4", spec=JobSpec(name="after", command=("true",), after=("1",)), submitted_at=1.0),
        F.JobDispatched(job="1", attempt=1, agent="a1"),
        F.JobDispatched(job="2", attempt=1, agent="a2"),
        F.JobRequeued(job="1", attempt=1, reason="agent lost"),
        F.JobDispatched(job="1", attempt=2, agent="a2"),
    ])
    state.placement_digest("a2")  # the heartbeat's cache, kept from now on
    return state


def _drop_placement(state: ControllerState) -> None:
    state.agents["a2"].running.discard("1")


def _stale_digest(state: ControllerState) -> None:
    digest = state.agents["a2"].digest
    assert digest is not None
    state.agents["a2"].digest = digest ^ 1


def _orphan_agent(state: ControllerState) -> None:
    state.jobs["1"].agent = "nobody"


CORRUPTIONS: dict[str, tuple[Callable[[ControllerState], None], str]] = {
    "dependants": (lambda s: s.dependants["1"].clear(), "dependants"),
    "arrays": (lambda s: s.arrays["2"].reverse(), "arrays"),
    "array_running": (lambda s: s.array_running.__setitem__("2", 2), "array_running"),
    "running": (_drop_placement, "agent a2 holds"),
    "used": (lambda s: setattr(s.agents["a1"], "used", 1), "agent a1 holds"),
    "digest": (_stale_digest, "a2's placement digest"),
    "next_job": (lambda s: setattr(s, "next_job", 3), "next_job is 3"),
    "placement": (_orphan_agent, "placed on nobody"),
    "pending placed": (lambda s: setattr(s.jobs["4"], "agent", "a1"), "job 4 is PENDING with agent 'a1'"),
}


def test_a_state_built_by_apply_or_restore_is_valid() -> None:
    state = busy()
    state.validate_state()
    S.restore(S.snapshot(state)).validate_state()


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
def test_each_corrupted_index_is_named(what: str) -> None:
    corrupt, words = CORRUPTIONS[what]
    state = busy()
    corrupt(state)
    with pytest.raises(ModelCorrupted, match=words):
        state.validate_state()
