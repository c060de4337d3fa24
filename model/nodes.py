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
from .errors import LocalProtocolError
from .pending import why_pending
from .permissions import require
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
    The words of ``model.pending.why_pending``, which gives Slurm's code beside them."""
    why = why_pending(ctl, job_id)
    return why.text if why is not None else None


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
