"""Node controls and the operator's views of nodes and waiting jobs.

``drain``/``resume`` are the operator's events (``reckon drain``/``resume``):
each becomes one fact, so the flag survives a restart and replay.  Draining
twice, or resuming an agent that is not drained, changes nothing (no fact):
the daemon tells the operator so.  The views below are read-only: what
``reckon nodes`` calls a node's state, and why a PENDING job waits.
"""

from __future__ import annotations

import enum
from typing import Any

from . import events as E
from . import facts as F
from . import messages as M
from .errors import LocalProtocolError
from .jobs import TERMINAL_STATES, JobState
from .admission import beyond_every_agent, capacity_shortfall
from .partitions import hold_reason, hold_text, partition_of
from .permissions import require
from .policy import NOT_OK_STATES, array_full, user_limit_refusal
from .state import AgentInfo
from .transaction import ControllerView, Transaction


class NodeState(enum.Enum):
    """A node's state as ``reckon nodes`` shows it (most urgent first)."""

    LOST = "LOST"  # disconnected longer than --lost-after: its jobs were requeued
    DISCONNECTED = "DISCONNECTED"  # not connected; its jobs stay placed until it rejoins (or is forgotten or lost)
    RECONCILING = "RECONCILING"  # connected, a resync round is open: nothing is dispatched there
    DRAINING = "DRAINING"  # drained by the operator, jobs still running there
    DRAINED = "DRAINED"  # drained by the operator, nothing running: safe to take down
    IDLE = "IDLE"  # connected, no slot in use
    MIXED = "MIXED"  # connected, some slots in use, some free
    BUSY = "BUSY"  # connected, every slot in use


def on_drain(tx: Transaction, ev: E.DrainAgent) -> None:
    info = tx.state.agents.get(ev.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {ev.agent!r}")
    require(ev.caller, "drain", None, node=ev.agent)
    if not info.drained:  # draining a drained agent again: nothing to record
        tx.apply(F.AgentDrained(agent=ev.agent))


def on_resume(tx: Transaction, ev: E.ResumeAgent) -> None:
    info = tx.state.agents.get(ev.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {ev.agent!r}")
    require(ev.caller, "resume", None, node=ev.agent)
    if info.drained:  # resuming an agent that takes jobs already: nothing to record
        tx.apply(F.AgentResumed(agent=ev.agent))


def node_state(ctl: ControllerView, name: str) -> NodeState:
    """The node's state, from its session's state (model.session) and its slots."""
    session = ctl.sessions.get(name)
    info = ctl.state.agents.get(name)
    if session is None or not session.connected:
        return NodeState.LOST if session is not None and session.lost else NodeState.DISCONNECTED
    if session.reconciling:
        return NodeState.RECONCILING
    used, slots = (info.used, info.slots) if info is not None else (0, 0)
    if info is not None and info.drained:
        return NodeState.DRAINING if used > 0 else NodeState.DRAINED
    if used <= 0:
        return NodeState.IDLE
    return NodeState.BUSY if used >= slots else NodeState.MIXED


def pending_reason(ctl: ControllerView, job_id: str) -> str | None:
    """Why a PENDING job is not running yet, in the operator's words; None for a job not PENDING.

    The start gate (model/startup.py) holds every dispatch, so it outranks
    anything the agents say.
    """
    job = ctl.state.job(job_id)
    if job.state is not JobState.PENDING:
        return None
    # What keeps the job itself back (model/policy.py ready, array_full) outranks the cluster's state.
    if job.held:
        return "held by a user: not dispatched until released (reckon release)"
    for deps_of, meets, what in ((job.spec.after, (JobState.COMPLETED,), "complete (--after)"),
                                 (job.spec.after_any, TERMINAL_STATES, "end (after_any)"),
                                 (job.spec.after_not_ok, NOT_OK_STATES, "fail (after_not_ok)")):
        deps = {dep: ctl.state.jobs.get(dep) for dep in deps_of}
        waiting = [dep for dep, other in deps.items() if other is None or other.state not in meets]
        if waiting:
            shown = ", ".join(f"{dep} ({deps[dep].state.value if deps[dep] else 'unknown'})" for dep in waiting[:3])
            more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
            return f"waiting for job{'s' if len(waiting) > 1 else ''} {shown}{more} to {what}"
    if ctl.state.partitions and (held := hold_reason(ctl.state.partitions, job)) is not None:
        return hold_text(ctl.state.partitions, job, held)  # issue #22: its partition keeps it back
    if array_full(ctl.state, job):
        return (f"its array {job.spec.array_id} runs {job.spec.array_max} job(s) at once (%{job.spec.array_max}): "
                "waiting for one of them to end")
    if (limited := user_limit_refusal(ctl.state, ctl.config.user_limits, job)) is not None:
        return limited
    gate = ctl.start_gate
    if gate is not None:
        return (f"waiting for start grace: nothing is dispatched until every known agent has rejoined "
                f"(at most {gate.grace:g}s after the controller's start; {len(gate.waiting)} not back yet)")
    need = job.spec.slots
    agents = ctl.state.agents
    if not agents:
        return "no agent has joined"
    if ctl.state.partitions and (part := partition_of(ctl.state.partitions, job.spec)) is not None:
        agents = {name: info for name, info in agents.items() if ctl.state.partitions[part].has_node(name)}
        if not agents:
            return f"no agent of partition {part} has joined"
    big_enough = sorted(name for name, info in agents.items() if capacity_shortfall(info, job.spec) is None)
    if not big_enough:
        if job.spec.mem is None and not job.spec.gpus and not job.spec.gres:
            largest = max(info.slots for info in agents.values())
            return f"no agent has {need} slot{'s' if need != 1 else ''} (the largest has {largest})"
        registered = [info for info in agents.values() if info.registered]
        return f"no agent can run it: it needs {beyond_every_agent(registered, job.spec)}"
    why: list[str] = []
    for name in big_enough:
        info = agents[name]
        session = ctl.sessions.get(name)
        if session is None or not session.connected:
            why.append(f"agent {name} is {'lost' if session is not None and session.lost else 'disconnected'}")
        elif session.reconciling:
            why.append(f"agent {name} is reconciling")
        elif info.drained:
            why.append(f"agent {name} is drained")
        elif job.spec.uses_v7 and session.version < M.SPEC7_SINCE:
            why.append(f"agent {name} speaks protocol {session.version}: this job needs {M.SPEC7_SINCE}")
        elif info.slots - info.used < need:
            why.append(f"agent {name} has {info.slots - info.used} of {info.slots} slots free")
        elif (lacking := info.shortfall(job.spec)) is not None:
            why.append(f"agent {name} lacks {lacking}")
        else:
            # A fitting agent is free: the job is placed in the next scheduling pass
            # unless jobs submitted before it take the room first.
            return f"agent {name} has room: waiting for the next scheduling pass"
    shown = "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else "")
    if job.spec.mem is None and not job.spec.gpus and not job.spec.gres:
        return f"waiting for {need} free slot{'s' if need != 1 else ''}: {shown}"
    return f"waiting for {job.spec.resources_text()} free: {shown}"


def node_resources(info: AgentInfo) -> dict[str, Any]:
    """An agent's capacity and use beyond the state of its connection, for ``reckon nodes``."""
    res = info.resources
    return {
        "cpus": info.slots,
        "cpus_used": info.used,
        "mem": res.mem if res is not None else None,  # None: it schedules no memory
        "mem_used": info.mem_used,
        "gpus": list(res.gpus) if res is not None else [],
        "gpus_used": sorted(info.gpus_held),
        "gres": [list(p) for p in res.gres] if res is not None else [],
        "gres_used": sorted([k, v] for k, v in info.gres_used.items()),
        "enforcer": res.enforcer if res is not None else None,  # None: an agent older than protocol 6
        "unenforced": list(res.unenforced) if res is not None else None,
    }
