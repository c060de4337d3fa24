"""A TCP proxy on loopback between one agent and the controller, that a chaos run can cut.

The agent dials the proxy; each connection it makes is relayed, byte for
byte, to the controller's port.  Two faults:

* ``cut()``: every relayed connection is closed at once (both sides see the
  connection end) and new ones are accepted and closed straight away, until
  ``restore()``: an agent that loses its network, or a reset by a firewall.
* ``stall()``: the connections stay open but no byte moves either way until
  ``restore()``: a partition that TCP does not notice (a vanished host).
  Bytes already read are held and delivered in order afterwards.
"""

from __future__ import annotations

import trio

CHUNK = 65536


class CuttableProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.cut_now = False
        self.connections = 0  # relayed connections so far (for the report)
        self._scopes: set[trio.CancelScope] = set()
        self._flowing = trio.Event()
        self._flowing.set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._relay, listeners)
            task_status.started(self.port)

    def cut(self) -> None:
        self.cut_now = True
        for scope in list(self._scopes):
            scope.cancel()

    def stall(self) -> None:
        if self._flowing.is_set():
            self._flowing = trio.Event()

    def restore(self) -> None:
        self.cut_now = False
        self._flowing.set()

    async def _relay(self, downstream: trio.SocketStream) -> None:
        try:
            if self.cut_now:
                return
            try:
                upstream = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
            except OSError:
                return  # the controller is down: the agent sees its connection end, as it would
            self.connections += 1
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, downstream, upstream, scope)
                        nursery.start_soon(self._pump, upstream, downstream, scope)
                finally:
                    self._scopes.discard(scope)
                    with trio.CancelScope(shield=True):
                        await trio.aclose_forcefully(upstream)
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(downstream)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(CHUNK):
                await self._flowing.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        # One side ended: end the other too (the WebSocket above has no use for a half-open connection).
        await self._flowing.wait()
        scope.cancel()
