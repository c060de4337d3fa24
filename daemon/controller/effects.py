"""The controller's effects: what the core loop releases once a batch's facts are durable.

Messages to agents, closes, round timers, warnings; a message dropped before it
left goes back to the model (a dropped Dispatch is redone at once).
"""

from __future__ import annotations

import logging
import time

import trio

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.scheduler import DispatchHold

from reckon.daemon import wire
from reckon.daemon.controller import lifecycle
from reckon.daemon.controller.connections import AgentConn
from reckon.daemon.controller.work import WorkItem

log = logging.getLogger("reckon.controller")


class CommandEffects:
    """Part of ``ControllerDaemon`` (daemon/controller/core.py): the release of commands."""

    def _release(self, cmd: E.Command) -> None:
        if isinstance(cmd, E.Notify):
            # Fed to the scheduler when decided (core_loop, _schedule): no outward effect.
            if isinstance(cmd.note, DispatchHold):
                log.info("%s: %s", "holding dispatch" if cmd.note.held else "dispatching", cmd.note.reason)
        elif isinstance(cmd, E.Warn):
            log.warning("%s", cmd.message)  # the model emits each once per condition
        elif isinstance(cmd, E.StartGraceTimer):
            self.grace_timer.arm(cmd.deadline)
        elif isinstance(cmd, E.Send):
            conn = self._conns.get(cmd.conn)
            if conn is not None and not conn.closing:
                self._note_join_outcome(conn, cmd.message)
                try:
                    conn.outgoing.send_nowait(wire.encode(cmd.message))
                    return
                except trio.WouldBlock:
                    log.warning("connection %s is not reading; closing it", cmd.conn)
                    self._close(conn, "send queue full")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    # The writer has ended (the peer is gone) before the reader wound the
                    # connection up: the message is dropped, as the network would drop it.
                    self._close(conn, "the peer is gone")
            self._undelivered(cmd)
        elif isinstance(cmd, E.Close):
            conn = self._conns.get(cmd.conn)
            if conn is not None:
                self._close(conn, cmd.reason)
        elif isinstance(cmd, E.StartRoundTimer):
            session = self.model.sessions.get(cmd.agent)
            queried = len(session.round.queried) if session is not None and session.round is not None else 0
            self._round_started[cmd.token] = (trio.current_time(), queried)
            lifecycle.round_opened(cmd.agent, cmd.token, queried)
            self._start_round_timer(cmd)
        elif isinstance(cmd, E.RoundEnded):
            started, queried = self._round_started.pop(cmd.token, (trio.current_time(), 0))
            now = trio.current_time()
            lifecycle.round_resolved(cmd.agent, cmd.token, now - started, now - self._joined_at.get(cmd.agent, started),
                                     queried)
            self.metrics.round_resolved(now - started, queried)
            for conn in self._conns.values():
                ended = conn.rounds.pop(cmd.token, None)
                if ended is not None:
                    ended.set()
        elif isinstance(cmd, E.Append):
            pass  # already durable
        else:
            raise TypeError(f"controller cannot execute {cmd!r}")

    def _undelivered(self, cmd: E.Send) -> None:
        """A message dropped before it left.  A dropped Dispatch is told to the
        model, which redoes the attempt at once (the agent never saw it)."""
        msg = cmd.message
        if isinstance(msg, M.Dispatch):
            self._work_send.send_nowait(WorkItem(event=E.DispatchUndelivered(
                job=msg.job, attempt=msg.attempt, now=time.time())))

    def _note_join_outcome(self, conn: AgentConn, message: M.Message) -> None:
        """A Welcome makes the Join's details count; a refused Join is logged once per peer and reason."""
        join = conn.join
        if join is None:
            return
        if isinstance(message, M.Welcome):
            self._joined_at[join.agent] = conn.joined_at
            if join.log_dir:
                self.log_dirs[join.agent] = (join.log_dir, join.log_layout)
            if self.refusals.cleared(("join", join.agent, conn.remote)):
                log.info("agent %s from %s is accepted now", join.agent, conn.remote)
            conn.join = None
        elif isinstance(message, M.Error) and message.fatal:  # a refused Join
            self.refusals.refused(("join", join.agent, conn.remote),
                                  f"refused agent {join.agent} from {conn.remote}: {message.reason}")
            conn.join = None

    def _close(self, conn: AgentConn, reason: str) -> None:
        if conn.closing:
            return
        conn.closing = True
        # Closing the outgoing channel lets the writer flush what is queued (the
        # error message) and then close the WebSocket.
        conn.outgoing.close()
        # The model learns of the close now, not once the connection task has
        # wound down: until then it would place work on a connection that drops it.
        self._work_send.send_nowait(WorkItem(event=E.ConnectionClosed(conn=conn.id, now=time.time(),
                                                                   mono=trio.current_time())))

    def _start_round_timer(self, cmd: E.StartRoundTimer) -> None:
        # The agent's connection as the model has it: a refused connection
        # claiming the same name must not get the round's timer.
        session = self.model.sessions.get(cmd.agent)
        conn = self._conns.get(session.conn) if session is not None and session.conn is not None else None
        if conn is None or conn.closing:
            return
        ended = trio.Event()
        conn.rounds[cmd.token] = ended
        conn.nursery.start_soon(self._round_timer, cmd, ended)

    async def _round_timer(self, cmd: E.StartRoundTimer, ended: trio.Event) -> None:
        """The round's own cancel scope: ended by resolution, by the deadline, or by the connection going.

        The deadline runs on trio's clock alone, ``round_timeout`` from now (the query
        goes out with this release).  ``cmd.deadline - time.time()`` mixed the wall
        clock into a trio timeout: a wall-clock step between the join and its commit
        stretched or cut the round by the size of the step."""
        with trio.move_on_after(self.model.config.round_timeout):
            await ended.wait()
            return
        await self.submit(WorkItem(event=E.RoundDeadlineExpired(agent=cmd.agent, token=cmd.token, now=time.time(),
                                                             mono=trio.current_time())))
