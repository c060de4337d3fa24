"""The simulation's network: WebSocket connections over memory streams, with faults.

``Network.open_websocket_url`` replaces ``daemon.agent.daemon.open_websocket_url``.
Each agent daemon gets its own controller URL, ``ws://<host>.sim``, so the
network knows which agent's link a connection runs over.  The server side of
every connection is served by the live ``SimController`` (in its nursery, so
a controller crash takes its connections with it).

Faults are TCP-shaped: a connection never loses one message and delivers the
next.  Per link (one agent host):

* ``latency``: every byte takes that long, each way, in order;
* ``delay(seconds)``: bytes wait in the sender's buffer, then arrive in order
  (``up_only``: only the agent's);
* ``partition``: new connections are refused and the live ones go silent (no
  byte arrives, no FIN); healing the partition resets the silent connections
  (TCP gives up on them) — so message loss is a silent connection followed by
  a reset;
* ``reset()``: every connection of the link is cut at once, both ways.
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from trio_websocket import ConnectionTimeout, wrap_client_stream

from reckon.daemon import wire
from reckon.daemon.controller.bootstrap import ContainedServer


@dataclass(eq=False)
class _Pipe:
    """One direction of one connection: bytes leave the sender's buffer in order, arrive ``latency`` later."""

    link: "Link"
    conn: "Connection"
    upstream: bool  # agent -> controller
    send: trio.testing.MemorySendStream = field(default_factory=trio.testing.MemorySendStream)
    recv: trio.testing.MemoryReceiveStream = field(default_factory=trio.testing.MemoryReceiveStream)
    in_flight: list[tuple[float, bytes]] = field(default_factory=list)  # (arrival time, bytes; b"": EOF)
    carrier: bool = False  # a task is delivering in_flight

    def __post_init__(self) -> None:
        async def on_send() -> None:
            self.pump()

        self.send.send_all_hook = on_send
        self.send.close_hook = self.pump

    def pump(self) -> None:
        if self.conn.broken:
            with contextlib.suppress(trio.WouldBlock):
                self.send.get_data_nowait()
            if self.link.sends_fail_after_reset:
                raise trio.BrokenResourceError("connection reset")
            return  # as after a FIN: the bytes go nowhere, the sender learns of it by reading
        if self.conn.silent:
            with contextlib.suppress(trio.WouldBlock):
                self.send.get_data_nowait()  # into the void
            return
        if self.link.stalled or (self.upstream and self.link.stalled_up):
            return  # stays buffered, in order, until the stall ends
        try:
            data = self.send.get_data_nowait()
        except trio.WouldBlock:
            return
        if not self.link.latency and not self.in_flight:
            self._arrive(data)
            return
        self.in_flight.append((trio.current_time() + self.link.latency, data))
        if not self.carrier:
            self.carrier = True
            self.link.nursery.start_soon(self._carry)

    async def _carry(self) -> None:
        try:
            while self.in_flight:
                await trio.sleep_until(self.in_flight[0][0])
                _, data = self.in_flight.pop(0)
                if not (self.conn.broken or self.conn.silent):
                    self._arrive(data)
        finally:
            self.carrier = False

    def _arrive(self, data: bytes) -> None:
        with contextlib.suppress(trio.ClosedResourceError):
            if data:
                self.recv.put_data(data)
            else:
                self.recv.put_eof()


@dataclass(eq=False)
class Connection:
    link: "Link"
    silent: bool = False
    broken: bool = False
    established: bool = False  # the client's handshake completed (so the controller has accepted it)
    client: trio.StapledStream | None = None
    server: trio.StapledStream | None = None
    pipes: list[_Pipe] = field(default_factory=list)

    async def reset(self) -> None:
        """Both ends see the connection end (EOF) and every later send fails, as after a TCP reset."""
        self.broken = True
        for pipe in self.pipes:
            with contextlib.suppress(trio.ClosedResourceError):
                pipe.recv.put_eof()
        await trio.lowlevel.checkpoint()


@dataclass(eq=False)
class Link:
    """The network between one agent host and the controller."""

    host: str
    nursery: trio.Nursery
    latency: float = 0.0  # fake seconds each byte takes, each way
    stalled: bool = False
    stalled_up: bool = False  # only agent -> controller
    partitioned: bool = False
    sends_fail_after_reset: bool = True  # a reset is an RST: later sends fail (else they vanish)
    connections: list[Connection] = field(default_factory=list)

    def open(self) -> Connection:
        conn = Connection(link=self)
        to_server, to_client = _Pipe(self, conn, upstream=True), _Pipe(self, conn, upstream=False)
        conn.pipes = [to_server, to_client]
        conn.client = trio.StapledStream(to_server.send, to_client.recv)
        conn.server = trio.StapledStream(to_client.send, to_server.recv)
        self.connections.append(conn)
        return conn

    def unstall(self) -> None:
        self.stalled = self.stalled_up = False
        for conn in self.connections:
            for pipe in conn.pipes:
                pipe.pump()

    async def reset(self, *, in_handshake: bool) -> None:
        """Reset every connection; one still in its handshake only if ``in_handshake``."""
        keep = [c for c in self.connections if not (c.established or in_handshake)]
        conns, self.connections = [c for c in self.connections if c not in keep], keep
        for conn in conns:
            await conn.reset()


class Network:
    def __init__(self, nursery: trio.Nursery, *, reset_in_handshake: bool = True, sends_fail_after_reset: bool = True,
                 latency: float = 0.0) -> None:
        self.nursery = nursery
        # False: resets spare connections still in their handshake (an open bug of the
        # controller dies of those: see test_sim.py KNOWN_OPEN["reset_in_handshake"]).
        self.reset_in_handshake = reset_in_handshake
        self.sends_fail_after_reset = sends_fail_after_reset  # False spares another open bug: KNOWN_OPEN
        self.latency = latency
        self.links: dict[str, Link] = {}
        self.controller: Any = None  # the live SimController, or None while it is down

    def link(self, host: str) -> Link:
        if host not in self.links:
            self.links[host] = Link(host=host, nursery=self.nursery, latency=self.latency,
                                    sends_fail_after_reset=self.sends_fail_after_reset)
        return self.links[host]

    # ---- faults ----------------------------------------------------------------------

    async def delay(self, host: str, seconds: float, *, up_only: bool = False) -> None:
        """Hold the link's bytes (only the agent's, with ``up_only``) for ``seconds``."""
        link = self.link(host)
        if up_only:
            link.stalled_up = True
        else:
            link.stalled = True
        self.nursery.start_soon(self._unstall_after, link, seconds)

    @staticmethod
    async def _unstall_after(link: Link, seconds: float) -> None:
        await trio.sleep(seconds)
        link.unstall()

    def partition(self, host: str) -> None:
        link = self.link(host)
        link.partitioned = True
        for conn in link.connections:
            conn.silent = True

    async def heal(self, host: str) -> None:
        """End a partition (resetting the connections it silenced) and any stall."""
        link = self.link(host)
        link.partitioned = False
        link.unstall()
        silent = [c for c in link.connections if c.silent and (c.established or self.reset_in_handshake)]
        link.connections = [c for c in link.connections if c not in silent]
        for conn in link.connections:
            conn.silent = False  # spared a reset: it carries bytes again
        for conn in silent:
            await conn.reset()

    async def reset(self, host: str) -> None:
        await self.link(host).reset(in_handshake=self.reset_in_handshake)

    async def reset_all(self) -> None:
        """The controller's host is gone: every connection breaks (it has no handshake left to die of)."""
        for link in self.links.values():
            await link.reset(in_handshake=True)

    # ---- what the agents call ---------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_websocket_url(self, url: str, *, extra_headers=None, max_message_size: int = 1 << 20,
                                 connect_timeout: float = 60, disconnect_timeout: float = 60):
        host = url.split("//", 1)[1].split(".sim", 1)[0]
        link = self.link(host)
        await trio.lowlevel.checkpoint()
        controller = self.controller
        if link.partitioned or controller is None:
            raise OSError(errno.ECONNREFUSED, f"connection refused ({host}: partitioned or no controller)")
        conn = link.open()
        controller.serve(conn.server)
        async with trio.open_nursery() as nursery:
            ws = None
            with trio.move_on_after(connect_timeout):
                ws = await wrap_client_stream(nursery, conn.client, "controller.sim", "/agent",
                                              extra_headers=extra_headers, max_message_size=max_message_size)
            if ws is None:
                nursery.cancel_scope.cancel()
            else:
                conn.established = True
                try:
                    yield ws
                finally:
                    with trio.move_on_after(disconnect_timeout):
                        await ws.aclose()
                    nursery.cancel_scope.cancel()
                    if conn in link.connections:
                        link.connections.remove(conn)
                        with trio.CancelScope(shield=True):
                            await conn.reset()
        if ws is None:
            raise ConnectionTimeout  # as trio_websocket's own open_websocket_url says it


async def serve_connection(nursery: trio.Nursery, daemon: Any, stream: trio.abc.Stream) -> None:
    """The controller's side of one connection: what the production server (``ContainedServer``) does
    per accepted socket, its containment included (a failure in the WebSocket layer, such as a ping
    answered while the connection closes, ends that connection alone)."""
    server = ContainedServer(daemon.handle_request, [_NO_LISTENER], handler_nursery=nursery,
                             max_message_size=wire.MAX_AGENT_MESSAGE)
    server.refusals = daemon.refusals
    await server._handle_connection(stream)


# The server is built per connection here and never listens: it needs a listener only to exist.
_NO_LISTENER: Any = object()
