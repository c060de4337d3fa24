"""The controller's side of an agent connection, below the handlers: refuse it, drop it, arm and end
its resync rounds.  The handler modules (model.connections, model.reports) share these; none of
them is a handler (model.controller's dispatch table holds the handlers).
"""

from __future__ import annotations

from . import events as E
from . import messages as M
from .resync import ResyncRound
from .session import AgentSession
from .transaction import Transaction


def refuse(tx: Transaction, conn: int, reason: str, code: M.RefusalCode = M.RefusalCode.INVALID) -> None:
    """A fatal error: tell the peer why, close, and forget the connection."""
    name = tx.conns.get(conn)
    session = tx.sessions.get(name) if name else None
    seq = session.seq + 1 if session and session.conn == conn else 0
    version = session.version if session and session.conn == conn else 0
    tx.emit(E.Send(conn=conn, message=M.refusal(version, code, reason, seq=seq)))
    tx.emit(E.Close(conn=conn, reason=reason))
    drop_connection(tx, conn)


def drop_connection(tx: Transaction, conn: int) -> None:
    name = tx.conns.pop(conn, None)
    if name is None:
        return
    session = tx.sessions[name]
    if session.conn != conn:
        return
    end_round(tx, session, discard=True)
    session.drop()
    tx.note_agent(name)


def end_round(tx: Transaction, session: AgentSession, *, discard: bool = False, expire: bool = False) -> None:
    rnd = session.round
    if rnd is None:
        return
    if discard:
        rnd.discard()
    elif expire:
        rnd.expire()
    session.end_round()
    # The RECONCILING flag is visible to the scheduler: clearing it must reach it too.
    tx.note_agent(session.name)
    tx.flush_notes()
    tx.emit(E.RoundEnded(agent=session.name, token=rnd.token))


def arm_round(tx: Transaction, session: AgentSession, token: bytes, placed: dict[str, int], now: float,
              *, welcome: bool) -> None:
    rnd = ResyncRound(agent=session.name, token=token, queried=placed, deadline=now + tx.config.round_timeout)
    session.arm(rnd)
    chunks = M.pages(sorted(placed.items(), key=lambda p: (len(p[0]), p[0])), tx.config.page_size)
    if welcome:
        tx.send(session, lambda seq: M.Welcome(seq=seq, version=session.version, token=token, cluster=tx.state.cluster,
                                               query_pages=len(chunks), generation=session.generation))
    for i, chunk in enumerate(chunks):
        tx.send(session, lambda seq, i=i, chunk=chunk: M.ResyncQuery(
            seq=seq, token=token, page=i, pages=len(chunks), jobs=tuple(chunk)))
    tx.emit(E.StartRoundTimer(agent=session.name, token=token, deadline=rnd.deadline))
    tx.note_agent(session.name)


# ---- joins ------------------------------------------------------------------------------


def refuse_join(tx: Transaction, conn: int, reason: str, version: int, code: M.RefusalCode) -> None:
    """Refuse a Join: the connection never counts as joined, nothing else changes."""
    tx.emit(E.Send(conn=conn, message=M.refusal(version, code, reason)))
    tx.emit(E.Close(conn=conn, reason=reason))
