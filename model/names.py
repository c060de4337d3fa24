"""Who may join under a name: the controller's rule binding each agent name to one identity.

A name belongs to one identity at a time (an agent's identity is created with
its state directory).  Another identity is refused while the holder is
connected, and while the disconnected holder still has jobs placed on it
(giving the name away would let them run twice); a disconnected holder with
nothing placed hands the name over (a wiped state directory, a replaced
machine).  ``reckon forget`` releases a name whose holder is gone with jobs
placed.  Agents without an identity (versions 1 and 2) keep the old rule: the
newest connection wins.

After a start the recovered state may be older than what agents ran (a
restored copy above all: README, "Restoring an older copy"), so while the
start gate is closed (model.startup) two more refusals hold a name back, both
retryable, both lifted when the gate opens:

- a holder the state knows that has not rejoined keeps its name: it may have
  run jobs this state calls PENDING, and must get to report them first;
- a name the state knows no holder for goes only to an agent that says it has
  joined this cluster before (``Join.cluster``): the copy may predate that
  agent's first join, and a newcomer under its name (a clone with a fresh
  state directory) would otherwise take the name and be given the jobs the
  returning agent ran, to run them again.

Join generations (version 4) tell the holder from an older copy of its own
state directory (restored from a backup, or a VM cloned before the holder
joined again): each accepted join of an identity gets the next generation
(``JoinGenerationIssued``, durable before the Welcome that carries it), the
agent stores it before it sends anything else and presents it in its next
Join.  A Join presenting a generation older than the newest one the holder has
*shown* it stored is a stale copy, refused for good (``generation_refusal``).
Shown, not issued: an agent that crashed after the controller committed G+1
but before it stored G+1 presents G and is the real agent.  The holder shows
G by presenting it in a Join (durable, in the next JoinGenerationIssued), or
by sending anything on the connection whose Welcome carried G (kept in the
session: a controller restart forgets it, and the check then lags one
generation behind).  Not caught: a copy made since the holder's last join
(it presents the newest generation), whichever of the two joins first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import facts as F
from . import messages as M

if TYPE_CHECKING:  # pragma: no cover
    from .session import AgentSession
    from .state import AgentInfo
    from .transaction import ControllerView


def name_refusal(ctrl: "ControllerView", join: M.Join, session: "AgentSession | None",
                 info: "AgentInfo | None") -> tuple[str, bool] | None:
    """Why ``join`` may not have its name, and whether that is permanent; or None."""
    if join.identity is None:
        return None
    connected = session is not None and session.connected
    holder = session.identity if connected else (info.identity if info is not None else None)
    if holder == join.identity:
        if connected and session is not None and None not in (session.instance, join.instance) \
                and session.instance != join.instance:
            # Another process with this identity while the holder's connection is open: a copy of
            # its state directory (a cloned VM) or, rarely, a restart the controller has not yet
            # seen the old connection of close (dropped when silent: then this one is accepted).
            return (f"agent name {join.agent}: another agent process with the same identity is connected "
                    f"(is this a copy of its state directory, a cloned machine? give the copy an empty "
                    f"--state-dir and its own --name)"), False
        return None
    gate = ctrl.start_gate
    if holder is None:
        if gate is not None and join.cluster != ctrl.state.cluster:
            return (f"agent name {join.agent} is new to this controller, which has just started and holds "
                    f"names it does not know for agents that have joined it before, until they rejoin or "
                    f"its start grace ends"), False
        return None
    held = f"agent name {join.agent} is held by another agent"
    if connected:
        return held, True
    placed = len(info.running) if info is not None else 0
    if placed:
        return (f"{held} (disconnected, {placed} unfinished job(s) placed on it); if that machine is gone "
                f"for good, release the name with `reckon forget {join.agent}`"), True
    if gate is not None and join.agent in gate.waiting:
        return (f"{held}, which has not rejoined since the controller started; the name is handed "
                f"over only if it is still away when the start grace ends"), False
    return None


def generation_refusal(join: M.Join, session: "AgentSession | None", info: "AgentInfo | None") -> str | None:
    """Why ``join`` (its identity holding the name) comes from an older copy of the holder's state
    directory (a permanent refusal); or None.  Agents without generations (older ones) are not checked."""
    if join.generation is None or join.identity is None or info is None or info.identity != join.identity:
        return None
    floor = shown_generation(session, info)
    if join.generation >= floor:
        return None
    return (f"agent name {join.agent}: this agent's state directory is an older copy of its own (it presents "
            f"join generation {join.generation}; the agent has since stored {floor}): a restored backup or a "
            f"cloned machine, which would run the agent's jobs again; start it with an empty --state-dir and its "
            f"own --name (or, if it is the agent's only copy, restored on purpose, free the name with "
            f"`reckon forget {join.agent}` first: its jobs are requeued)")


def shown_generation(session: "AgentSession | None", info: "AgentInfo") -> int:
    """The newest join generation the name's holder has shown it stored."""
    shown = session.shown_generation if session is not None and session.identity == info.identity else 0
    return max(info.confirmed, shown)


def issued_generation(join: M.Join, session: "AgentSession | None",
                      info: "AgentInfo | None") -> tuple[int, int] | None:
    """(generation, confirmed) of the ``JoinGenerationIssued`` an accepted ``join`` gets, or None
    (an agent without generations).  Read from the state before the join's first fact: a new
    holder's generations start afresh, and so does what its session has shown.  Above whatever
    the agent presents too: a restored controller state may be behind the agent."""
    if join.generation is None or join.identity is None:
        return None
    holder = info is not None and info.identity == join.identity
    generation, confirmed = (info.generation, info.confirmed) if holder and info is not None else (0, 0)
    shown = session.shown_generation if session is not None and session.identity == join.identity else 0
    confirmed = max(confirmed, shown, join.generation)
    return max(generation, confirmed) + 1, confirmed


def generation_spent(join: M.Join, session: "AgentSession | None", info: "AgentInfo | None") -> str | None:
    """Why ``join`` cannot be given a next generation (the last one the wire carries is spent): a
    permanent refusal; or None."""
    issued = issued_generation(join, session, info)
    if issued is None or issued[0] <= M.MAX_GENERATION:
        return None
    return (f"agent name {join.agent}: join generation {issued[0] - 1} is the last the protocol allows, there is "
            f"no next one to give this agent; start it with an empty --state-dir and its own --name")


def next_generation(join: M.Join, session: "AgentSession | None",
                    info: "AgentInfo | None") -> F.JoinGenerationIssued | None:
    """The fact of an accepted join's generation (``generation_spent`` said it has one), or None."""
    issued = issued_generation(join, session, info)
    if issued is None:
        return None
    return F.JoinGenerationIssued(agent=join.agent, generation=issued[0], confirmed=issued[1])
