"""The controller's agent connections: authorization, one nursery per connection,
its reader (frames into model events) and writer (queued messages into frames).

Each resync round runs in its own cancel scope inside the connection's nursery
(daemon/controller/effects.py), so a disconnect ends the round.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import WebSocketConnection, WebSocketRequest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.errors import RemoteProtocolError

from reckon.daemon import wire
from reckon.daemon.controller.work import WorkItem

log = logging.getLogger("reckon.controller")

OUTGOING_QUEUE = 100_000  # messages buffered per connection before it counts as stuck
SILENCE_RECHECK = 1.0  # seconds: the last part of the silence wait, started afresh (see _next_frame)


@dataclass(slots=True)
class AgentConn:
    """A live agent connection as the core loop sees it."""

    id: int
    ws: WebSocketConnection
    nursery: trio.Nursery
    outgoing: trio.MemorySendChannel[bytes]
    flushed: trio.Event = field(default_factory=trio.Event)  # the writer is done
    agent: str | None = None
    rounds: dict[bytes, trio.Event] = field(default_factory=dict)
    closing: bool = False
    version: int = 1  # the protocol version the agent's Join named (frames follow it)
    remote: str = "?"  # the peer's address, for the log
    join: M.Join | None = None  # its Join, whose log directory counts once the controller welcomes it
    joined_at: float = 0.0  # trio time the Join arrived


class AgentConnections:
    """Part of ``ControllerDaemon`` (daemon/controller/core.py): the WebSocket side."""

    def connection(self, conn_id: int | None) -> AgentConn | None:
        return None if conn_id is None else self._conns.get(conn_id)

    async def handle_request(self, request: WebSocketRequest) -> None:
        # A peer may reset its connection at any point, also while we accept or
        # reject it: that ends this connection only, never the server (trio's
        # listener would pass the exception up and stop the controller).
        try:
            # Who is calling (daemon/auth/handshake.py): a MUNGE credential decoded on a worker
            # thread, or token mode's token or loopback check.  Refused: logged once per kind.
            admission = await self.auth.admit(request)
            if admission.refused is not None:
                host = _peer_host(request)
                self.refusals.refused(("handshake", host, request.path, admission.kind),
                                      f"refused connections from {host} to {request.path}: {admission.refused}")
                await request.reject(401, body=admission.refused.encode())
                return
            path = request.path
            ws = await request.accept()
            if path.startswith("/agent"):
                await self._agent_connection(ws, _peer_host(request))
            elif path.startswith("/client"):
                await self._client_connection(ws, admission.caller)
            else:
                await ws.aclose(code=1008, reason=f"unknown path {path!r}")
        except WSClosed:
            pass

    async def _agent_connection(self, ws: WebSocketConnection, remote: str = "?") -> None:
        conn_id = next(self._conn_ids)
        send, recv = trio.open_memory_channel[bytes](OUTGOING_QUEUE)
        try:
            async with trio.open_nursery() as nursery:
                conn = AgentConn(id=conn_id, ws=ws, nursery=nursery, outgoing=send, remote=remote)
                self._conns[conn_id] = conn
                nursery.start_soon(self._writer, conn, recv)
                await self._reader(conn)
                # The reader gave up on the connection (closed, silent, invalid):
                # from now on nothing more is queued for it, and the model knows.
                self._close(conn, "connection ended")
                with trio.move_on_after(2):  # let the writer flush the error that explains the close
                    await conn.flushed.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._conns.pop(conn_id, None)
            self.output.connection_ended(conn_id)
            with trio.CancelScope(shield=True):
                await self.submit(WorkItem(event=E.ConnectionClosed(conn=conn_id, now=time.time(),
                                                                 mono=trio.current_time())))
                with trio.move_on_after(1):
                    await ws.aclose()

    async def _writer(self, conn: AgentConn, recv: trio.MemoryReceiveChannel[bytes]) -> None:
        async with recv:
            async for data in recv:
                queued = [data]  # and whatever else is waiting: as few frames as possible
                while len(queued) < wire.MAX_FRAME_MESSAGES:
                    try:
                        queued.append(recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                try:
                    for frame in wire.frames(queued, version=conn.version):
                        await conn.ws.send_message(frame)
                except WSClosed:
                    break
        # The channel was closed (a Close command): everything queued is flushed; hang up.
        with trio.move_on_after(2):
            await conn.ws.aclose(code=1008, reason="closed by controller")
        conn.flushed.set()
        conn.nursery.cancel_scope.cancel()

    async def _reader(self, conn: AgentConn) -> None:
        while not conn.closing:
            try:
                data = await self._next_frame(conn)
            except WSClosed:
                return
            if data is None:
                log.warning("agent %s silent for %.0fs: disconnecting", conn.agent, self.options.heartbeat_timeout)
                return
            now = time.time()
            try:
                events = self._events(conn, wire.decode_frame(data, to="controller"), now)
            except RemoteProtocolError as exc:  # the whole frame is refused: nothing of it is used
                log.warning("agent connection %s (%s): %s", conn.id, conn.agent, exc)
                if not conn.closing:
                    try:
                        conn.outgoing.send_nowait(wire.encode(M.refusal(conn.version, M.RefusalCode.INVALID, str(exc))))
                    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the writer is gone or stuck: the close below still ends the connection
                    self._close(conn, str(exc))
                return
            for event in events:
                if isinstance(event, E.AgentJoined):  # the frame is good: the model decides on the join
                    join = event.join
                    conn.agent = join.agent
                    conn.version = join.version
                    conn.join, conn.joined_at = join, trio.current_time()
                await self.submit(WorkItem(event=event))

    async def _next_frame(self, conn: AgentConn) -> bytes | str | None:
        """The agent's next frame, or None when it sent nothing for ``heartbeat_timeout``.

        The last part of the wait starts afresh: a controller that was frozen (SIGSTOP, a
        paused VM) wakes with its deadline long past and the agents' heartbeats already
        in its socket buffers, and trio cancels the wait before the connection's reader
        task hands them over: every agent would be called silent.  Found by ``reckon chaos``.
        """
        timeout = self.options.heartbeat_timeout
        recheck = min(SILENCE_RECHECK, timeout / 4)
        for wait in (timeout - recheck, recheck):
            with trio.move_on_after(wait):
                return await conn.ws.get_message()
        return None

    def _events(self, conn: AgentConn, messages: list[M.Message], now: float) -> list[Any]:
        """The model events of one frame's messages; ``RemoteProtocolError`` (and no change) if any is out of place."""
        events: list[Any] = []
        mono = trio.current_time()  # silence is measured on trio's clock, never on the wall clock
        joined = conn.agent is not None
        for msg in messages:
            if not joined:
                if not isinstance(msg, M.Join):
                    raise RemoteProtocolError(f"the first message must be join, got {msg.TYPE}")
                joined = True
                events.append(E.AgentJoined(conn=conn.id, join=msg, token=secrets.token_bytes(M.TOKEN_BYTES), now=now,
                                             mono=mono))
            elif isinstance(msg, M.Join):
                raise RemoteProtocolError("join sent twice on one connection")
            elif isinstance(msg, M.OutputChunk):  # an answer to the relay's read: no state changes
                self.output.deliver(conn.id, msg)
            else:
                events.append(E.MessageFromAgent(conn=conn.id, message=msg, now=now, mono=mono,
                                                 token=secrets.token_bytes(M.TOKEN_BYTES)))
        return events


def _peer_host(request: WebSocketRequest) -> str:
    """The peer's address without its port (a refused peer reconnects from a new port each time)."""
    address = getattr(request.remote, "address", None)
    return "?" if address is None else str(address)
