"""The controller's lifecycle log: one INFO line per job or node event, in one place.

Every line is derived from what the model decided, after it is durable:
a fact (submit, dispatch, start, finish, cancel, requeue with its reason,
drain, ...), a round command (opened, resolved) or a node's change of state
(joined, disconnected, lost), never from log calls spread over the daemon.
Refusals are logged once per condition by ``daemon.refusals``.  The same
tracker remembers since when each node is in its state, for ``reckon nodes``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from reckon.model import facts as F
from reckon.model.events import Notify
from reckon.model.nodes import NodeState
from reckon.model.scheduler import AgentNote

from reckon.daemon.ops.outcomes import outcome_text

log = logging.getLogger("reckon.lifecycle")

_CONNECTED_STATES = frozenset(NodeState) - {NodeState.DISCONNECTED, NodeState.LOST}


def _finished(f: F.JobFinished) -> str:
    via = {"report": "reported by the agent", "round": "found by a resync round"}.get(f.via or "", "")
    timed_out = ", stopped at its time limit" if f.timed_out else ""
    return f"job {f.job} attempt {f.attempt} finished: {outcome_text(f.exit_code, f.signal)}{timed_out}" + (
        f" ({via})" if via else "")


# fact type -> its line; None: a fact with no line of its own (logged where it is handled).
FACT_LINES: dict[type, Callable[..., str] | None] = {
    F.ClusterCreated: lambda f: f"new cluster history {f.cluster}",
    F.JobSubmitted: lambda f: f"job {f.job} submitted: {f.spec.name!r}, {f.spec.slots} slot(s)",
    F.JobDispatched: lambda f: f"job {f.job} attempt {f.attempt} dispatched to agent {f.agent}",
    F.JobAdopted: lambda f: f"job {f.job} attempt {f.attempt} adopted: agent {f.agent} runs it unplaced",
    F.JobStarted: lambda f: f"job {f.job} attempt {f.attempt} started",
    F.JobFinished: _finished,
    F.JobCancelRequested: lambda f: f"job {f.job} cancel requested: its process is being killed",
    F.JobCancelled: lambda f: f"job {f.job} cancelled before it ran" + (f": {f.reason}" if f.reason else ""),
    F.JobCancelConfirmed: lambda f: f"job {f.job} attempt {f.attempt} cancelled: its process is gone",
    F.JobRequeued: lambda f: f"job {f.job} attempt {f.attempt} requeued: {f.reason}",
    F.JobRequeueRequested: lambda f: (f"job {f.job} attempt {f.attempt} requeue requested: its process is being "
                                      f"stopped, then it runs again"),
    F.AgentRegistered: lambda f: f"agent {f.agent} registered with {f.slots} slot(s)",
    F.AgentForgotten: lambda f: f"agent {f.agent} forgotten by the operator: its name is free",
    F.AgentDrained: lambda f: f"agent {f.agent} drained: no new jobs there; running jobs finish",
    F.AgentResumed: lambda f: f"agent {f.agent} resumed: it takes new jobs again",
    F.JobIdsReserved: None,  # the server explains it as a warning
    F.JobAttemptsReserved: lambda f: (f"job {f.job}: an agent holds attempt {f.upto}, which this controller never "
                                      f"issued (was its state restored from an older copy?): its attempts "
                                      f"continue above it"),
    F.IdMarkRaised: None,  # bookkeeping: a block of job ids reserved (model/startup.py)
    F.JoinGenerationIssued: None,  # bookkeeping at each join (model/names.py); the join has its own line
    F.JobHeld: lambda f: f"job {f.job} held: not dispatched until released",
    F.JobReleased: lambda f: f"job {f.job} released",
    F.JobRestarted: lambda f: f"job {f.job} requeued by the user: it runs again as attempt {f.attempt}",
    F.PartitionsConfigured: lambda f: (f"partitions from the config file: "
                                       f"{', '.join(p.name for p in f.partitions) or 'none'}"),
    F.PartitionSet: lambda f: f"partition {f.partition.name} set: {f.partition.to_dict()}",
    F.PartitionRemoved: lambda f: f"partition {f.name} removed",
    F.UsageDecaySet: lambda f: f"fair share's usage decays with a half-life of {f.half_life:g} s from now on",
    F.JobPriorityAdjusted: lambda f: f"job {f.job}: the operator set its priority adjustment to {f.priority}",
}
assert set(FACT_LINES) == set(F.FACT_TYPES.values()), "every fact kind needs a lifecycle entry"


def fact_line(fact: F.Fact) -> str | None:
    line = FACT_LINES[type(fact)]
    return None if line is None else line(fact)


def log_facts(facts: list[F.Fact]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    for fact in facts:
        line = fact_line(fact)
        if line is not None:
            log.info("%s", line)


def round_opened(agent: str, token: bytes, queried: int) -> None:
    # Wording kept from before this module: daemon/bench and the e2e tests parse these two lines.
    log.info("resync round %s with agent %s started: %d job(s) queried", token.hex()[:8], agent, queried)


def round_resolved(agent: str, token: bytes, seconds: float, since_join: float, queried: int) -> None:
    log.info("resync round %s with agent %s ended after %.3fs, %.3fs since its join (%d job(s) queried)",
             token.hex()[:8], agent, seconds, since_join, queried)


class NodeTracker:
    """Since when each node is in its state; logs joins, disconnects and losses once each."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.states: dict[str, tuple[NodeState, float]] = {}  # agent -> (state, wall time it entered it)

    def observe(self, name: str, state: NodeState | None, *, slots: int = 0, at: float | None = None) -> None:
        """``state`` None: the agent is gone from the table (forgotten).  ``at``: when it entered it, if known."""
        previous = self.states.get(name, (None, 0.0))[0]
        if state == previous:
            return
        if state is None:
            self.states.pop(name, None)
            return
        self.states[name] = (state, self._clock() if at is None else at)
        was_connected = previous in _CONNECTED_STATES
        if state in _CONNECTED_STATES and not was_connected:
            log.info("agent %s joined (%d slot(s))", name, slots)
        elif state is NodeState.DISCONNECTED and was_connected:
            log.info("agent %s disconnected", name)
        elif state is NodeState.LOST:
            log.info("agent %s lost: silent too long, its jobs were requeued", name)

    def since(self, name: str) -> float | None:
        entry = self.states.get(name)
        return None if entry is None else entry[1]


def after_commit(daemon: Any, facts: list[F.Fact], commands: list) -> None:
    """A batch is durable: its lifecycle lines, and the node states it changed (a ControllerDaemon's)."""
    log_facts(facts)
    agents = daemon.model.state.agents
    for cmd in commands:
        if isinstance(cmd, Notify) and isinstance(cmd.note, AgentNote):
            name = cmd.note.agent
            info = agents.get(name)
            daemon.nodes.observe(name, daemon.model.node_state(name) if info is not None else None,
                                 slots=info.slots if info is not None else 0)
