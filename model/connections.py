"""Controller handlers for agents' connections: joins, resync rounds, closes, silence.

Functions of ``(tx, event)`` (a ``model.transaction.Transaction``), registered
in the controller's dispatch table.  Each session moves through its table
(model.session); who may join under a name is model.names' rule; refusing,
dropping and the rounds themselves are model.agent_links'.
"""

from __future__ import annotations

from . import events as E
from . import messages as M
from . import facts as F
from . import names
from .agent_links import arm_round, drop_connection, end_round, refuse, refuse_join
from .errors import RemoteProtocolError
from .session import AgentSession
from .transaction import Transaction, silence_clock


def on_join(tx: Transaction, ev: E.AgentJoined) -> None:
    join = ev.join
    if ev.conn in tx.conns:
        raise RemoteProtocolError("this connection already joined")
    if join.version not in M.SUPPORTED_VERSIONS:
        refuse_join(tx, ev.conn, f"protocol version {join.version} not supported (supported: "
                    f"{sorted(M.SUPPORTED_VERSIONS)})", join.version, M.RefusalCode.VERSION)
        return
    if join.version < tx.config.min_agent_version:
        refuse_join(tx, ev.conn, f"protocol version {join.version} cannot run jobs as their owners: this cluster "
                    f"authenticates users and needs agents of version {tx.config.min_agent_version} or newer "
                    f"(upgrade reckon on {join.agent})", join.version, M.RefusalCode.VERSION)
        return
    session = tx.sessions.get(join.agent)
    info = tx.state.agents.get(join.agent)
    refusal = names.name_refusal(tx, join, session, info)
    if refusal is not None:
        refusal = refusal[0], M.RefusalCode.NAME_HELD if refusal[1] else M.RefusalCode.NAME_HELD_FOR_NOW
    elif (stale := names.generation_refusal(join, session, info)) is not None:
        refusal = stale, M.RefusalCode.STALE_COPY
    elif (spent := names.generation_spent(join, session, info)) is not None:
        refusal = spent, M.RefusalCode.GENERATIONS_SPENT
    if refusal is not None:
        # Nothing changes: no fact, the holder's connection and jobs untouched.
        reason, code = refusal
        refuse_join(tx, ev.conn, reason, join.version, code)
        return
    if session is not None and ev.conn < session.latest_conn:
        # This connection was accepted before the one the agent joined on last:
        # its Join is late, and must not drop the newer connection.
        refuse_join(tx, ev.conn, "stale join: a newer connection of this agent has joined", join.version,
                    M.RefusalCode.STALE_JOIN)
        return
    if session is not None and session.connected:
        # The same agent again on a new connection: the old one is dead to us.
        old = session.conn
        assert old is not None
        tx.emit(E.Close(conn=old, reason="superseded by a new connection"))
        drop_connection(tx, old)
    # Decided on the state before the join's first fact (and checked above), so it cannot fail after it.
    issued = names.next_generation(join, session, info)
    if session is None:
        session = tx.sessions[join.agent] = AgentSession(name=join.agent)
    # An agent without an identity (versions 1, 2) leaves the name's binding as it is.
    identity = join.identity if join.identity is not None else (info.identity if info else None)
    if (info is None or not info.registered or info.slots != join.slots or info.identity != identity
            or info.resources != join.resources):
        tx.apply(F.AgentRegistered(agent=join.agent, slots=join.slots, identity=identity, resources=join.resources))
    tx.conns[ev.conn] = join.agent
    session.join(ev.conn, silence_clock(ev))
    if session.identity != join.identity:
        session.shown_generation = 0  # another holder's (or none): generations are per identity
    session.version, session.identity, session.latest_conn = join.version, join.identity, ev.conn
    session.instance, session.generation = join.instance, None
    if issued is not None:
        tx.apply(issued)
        session.generation = issued.generation
    placed = tx.placed_on(join.agent)
    # Req 1: a round whenever we place non-terminal jobs here, whatever kind of
    # join this is; also when the agent runs jobs we do not place here, and while
    # the start gate is closed (its recent outcomes may be of jobs this state,
    # perhaps a restored copy, calls PENDING: model.startup).
    if placed or join.running or tx.start_gate is not None:
        arm_round(tx, session, ev.token, placed, ev.now, welcome=True)
    else:
        tx.send(session, lambda seq: M.Welcome(seq=seq, version=session.version, token=None,
                                               cluster=tx.state.cluster, generation=session.generation))
    tx.note_agent(join.agent)


# ---- closes, deadlines, silence ------------------------------------------------------------


def on_closed(tx: Transaction, ev: E.ConnectionClosed) -> None:
    name = tx.conns.get(ev.conn)
    if name is not None:
        tx.sessions[name].last_heard = silence_clock(ev)
    drop_connection(tx, ev.conn)


def on_deadline(tx: Transaction, ev: E.RoundDeadlineExpired) -> None:
    session = tx.sessions.get(ev.agent)
    if session is None or session.round is None or session.round.token != ev.token:
        return  # a timer of a round that already ended: nothing to do
    conn = session.conn
    assert conn is not None
    # Silence counts from when we last heard from the agent or dropped it,
    # whichever is later: a round that timed out is not silence since the join.
    session.last_heard = max(session.last_heard, silence_clock(ev))
    end_round(tx, session, expire=True)
    # Withholding the agent forever is not allowed (Req 5.3); trusting a
    # silent agent is not either.  Close: its next join arms a fresh round.
    refuse(tx, conn, "resync round timed out", M.RefusalCode.ROUND_TIMEOUT)


def on_tick(tx: Transaction, ev: E.Tick) -> None:
    lost_after = tx.config.lost_after
    if lost_after is None:
        return
    for name in tx.state.agents:
        if name not in tx.sessions:
            # An agent known only from the log (we restarted and it has not come
            # back yet): its silence counts from the first tick we see.
            tx.sessions[name] = AgentSession(name=name, last_heard=silence_clock(ev))
    now = silence_clock(ev)
    for session in tx.sessions.values():
        if session.connected or session.lost or now - session.last_heard <= lost_after:
            continue
        session.lose()
        for job_id in tx.placed_on(session.name):
            tx.attempt_lost(tx.state.jobs[job_id], "agent lost")
        tx.note_agent(session.name)
