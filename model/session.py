"""The controller's view of one agent: its session machine.

Volatile (never in the log, rebuilt as agents rejoin): whether the agent is
connected, reconciling in a resync round, disconnected or lost, and what its
current connection's Join said (protocol version, identity, process, join
generation).  The name binding and generations it carries are judged in
model.names; this module only keeps them, and moves the session through its
table: a missing entry raises and changes nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from . import messages as M
from .errors import LocalProtocolError
from .resources import Owner
from .resync import ResyncRound


class AgentSessionState(enum.Enum):
    DISCONNECTED = "disconnected"  # no live connection; its jobs stay placed until it rejoins (or is forgotten or lost)
    CONNECTED = "connected"  # joined on a live connection, no resync round open: may be given work
    RECONCILING = "reconciling"  # joined, a resync round is open: nothing is dispatched there
    LOST = "lost"  # disconnected longer than --lost-after: its jobs were requeued


class AgentSessionEvent(enum.Enum):
    JOIN = "join"  # a Join was accepted on a new connection
    ARM_ROUND = "arm_round"  # a resync round was armed (at the join, or on a heartbeat disagreement)
    END_ROUND = "end_round"  # the round was applied, timed out or discarded
    DROP = "drop"  # the connection closed, was superseded or refused
    LOSE = "lose"  # silent past --lost-after while disconnected


# The session machine.  A session starts DISCONNECTED (an agent the log knows,
# before it rejoins) and joins into CONNECTED; a round is armed only on a
# connection with none open and ends before the connection is dropped; only a
# disconnected agent can be lost, and a lost one can only rejoin.  Forgetting an
# agent (``reckon forget``, never of a connected one) removes its session.
AGENT_SESSION_TRANSITIONS: dict[tuple[AgentSessionState, AgentSessionEvent], AgentSessionState] = {
    (AgentSessionState.DISCONNECTED, AgentSessionEvent.JOIN): AgentSessionState.CONNECTED,
    (AgentSessionState.DISCONNECTED, AgentSessionEvent.LOSE): AgentSessionState.LOST,
    (AgentSessionState.LOST, AgentSessionEvent.JOIN): AgentSessionState.CONNECTED,
    (AgentSessionState.CONNECTED, AgentSessionEvent.ARM_ROUND): AgentSessionState.RECONCILING,
    (AgentSessionState.CONNECTED, AgentSessionEvent.DROP): AgentSessionState.DISCONNECTED,
    (AgentSessionState.RECONCILING, AgentSessionEvent.END_ROUND): AgentSessionState.CONNECTED,
}


@dataclass(slots=True)
class AgentSession:
    """Volatile: what the controller knows of an agent's current connection."""

    name: str
    state: AgentSessionState = AgentSessionState.DISCONNECTED
    conn: int | None = None  # the live connection (CONNECTED, RECONCILING); None otherwise
    seq: int = 0  # messages sent on the current connection
    round: ResyncRound | None = None  # the open round (RECONCILING); None otherwise
    last_heard: float = 0.0  # on the silence clock (events' mono, else now): model.transaction.silence_clock
    version: int = M.PROTOCOL_VERSION  # the protocol version of the current connection (its Join's)
    identity: str | None = None  # the identity the current connection's Join claimed (None: an older agent)
    instance: str | None = None  # the agent process of the current connection (its Join's; None: an older agent)
    generation: int | None = None  # the join generation the current connection's Welcome carries (None: none)
    shown_generation: int = 0  # the newest one the agent has shown it stored by sending after its Welcome
    latest_conn: int = 0  # the newest connection that joined as this agent: a Join on an older one is stale
    # (conn, agent's (count, digest), ours) of the last heartbeat disagreement a
    # round was armed for.  The same disagreement again on the same connection
    # is one no round repairs (e.g. a killed orphan still dying): it waits until
    # either side changes instead of arming a round every heartbeat.
    unrepaired: tuple[int, tuple[int, int], tuple[int, int]] | None = None

    def uid_for(self, uid: str | None) -> str | None:
        """What to send as a submission uid: nothing to an agent older than version 3."""
        return uid if self.version >= M.UIDS_SINCE else None

    def owner_for(self, owner: Owner | None) -> Owner | None:
        """What to send as a job's owner: nothing to an agent older than version 6."""
        return owner if self.version >= M.OWNERS_SINCE else None

    @property
    def connected(self) -> bool:
        return self.state in (AgentSessionState.CONNECTED, AgentSessionState.RECONCILING)

    @property
    def reconciling(self) -> bool:
        return self.state is AgentSessionState.RECONCILING

    @property
    def lost(self) -> bool:
        return self.state is AgentSessionState.LOST

    # ---- moves: each looks its transition up first, so a refused one changes nothing ----

    def _next(self, event: AgentSessionEvent) -> AgentSessionState:
        try:
            return AGENT_SESSION_TRANSITIONS[(self.state, event)]
        except KeyError:
            raise LocalProtocolError(f"agent {self.name}: session event {event.value} not allowed when "
                                     f"{self.state.value}") from None

    def join(self, conn: int, heard: float) -> None:
        """A Join accepted on ``conn``: a fresh connection (message count 0), heard from now."""
        self.state = self._next(AgentSessionEvent.JOIN)
        self.conn, self.seq, self.last_heard = conn, 0, heard

    def arm(self, rnd: ResyncRound) -> None:
        self.state = self._next(AgentSessionEvent.ARM_ROUND)
        self.round = rnd

    def end_round(self) -> ResyncRound:
        """The open round is over (the caller resolved it): returns it."""
        self.state = self._next(AgentSessionEvent.END_ROUND)
        rnd, self.round = self.round, None
        assert rnd is not None
        return rnd

    def drop(self) -> None:
        """The connection is gone (any round was ended first)."""
        self.state = self._next(AgentSessionEvent.DROP)
        self.conn = None

    def lose(self) -> None:
        self.state = self._next(AgentSessionEvent.LOSE)

    def consistency(self) -> str | None:
        """What is wrong between the state and the fields it implies; None if nothing."""
        live = self.state in (AgentSessionState.CONNECTED, AgentSessionState.RECONCILING)
        if live != (self.conn is not None):
            return f"agent {self.name}: {self.state.value} with connection {self.conn}"
        if (self.state is AgentSessionState.RECONCILING) != (self.round is not None):
            return f"agent {self.name}: {self.state.value} with round {self.round}"
        return None
