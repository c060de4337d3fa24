"""A peer that accepts the TCP connection but never answers the WebSocket handshake.

That is what a SIGSTOPped controller looks like (its kernel still accepts
connections) and what `reckon chaos` ran into: trio-websocket 0.12's
``open_websocket_url`` overran its ``connect_timeout`` forever, so an agent
never retried and a client call never returned.  ``daemon.wsconnect``
bounds the attempt.  Real sockets on loopback, under the autojump clock
(the waits are fake seconds).
"""

from __future__ import annotations

import dataclasses

import trio
import trio_websocket

from reckon.daemon.agent import daemon as agent_daemon
from reckon.daemon.agent.daemon import run_agent
from reckon.daemon.client import Client, ClientError
from tests.daemon.test_agent_daemon import install, options
from tests.daemon.trio_harness import FakeNet

GUARD = 1_000  # fake seconds


class SilentListener:
    """Accepts TCP connections on loopback, holds them, never says a word."""

    def __init__(self) -> None:
        self.accepted: list[float] = []
        self.port = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._hold, listeners, task_status=task_status)

    async def _hold(self, stream: trio.SocketStream) -> None:
        self.accepted.append(trio.current_time())
        async with stream:
            await trio.sleep_forever()


async def test_agent_retries_a_controller_that_never_answers_the_handshake(tmp_path, autojump_clock, monkeypatch):
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            install(monkeypatch, FakeNet(nursery))
            monkeypatch.setattr(agent_daemon, "open_websocket_url", trio_websocket.open_websocket_url)  # real sockets
            silent = SilentListener()
            await nursery.start(silent.serve)
            opts = dataclasses.replace(options(tmp_path / "agent"), controller=f"ws://127.0.0.1:{silent.port}")
            await nursery.start(run_agent, opts)
            while len(silent.accepted) < 3:
                await trio.sleep(1)
            # Each attempt gives up about connect_timeout (5 s) plus a grace of 1 s after it began.
            gaps = [b - a for a, b in zip(silent.accepted, silent.accepted[1:])]
            assert all(5 <= gap <= 5 + 1 + 2 + 1e-6 for gap in gaps), gaps  # + the reconnect backoff (cap 2 s)
            nursery.cancel_scope.cancel()


async def test_client_call_to_a_controller_that_never_answers_fails_with_a_reason(autojump_clock):
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            silent = SilentListener()
            await nursery.start(silent.serve)
            t0 = trio.current_time()
            try:
                async with Client(f"ws://127.0.0.1:{silent.port}", None):
                    raise AssertionError("connected to a peer that never answered")
            except ClientError as exc:
                assert "unreachable" in str(exc) and "handshake" in str(exc), exc
            assert trio.current_time() - t0 <= 5 + 1 + 1e-6
            nursery.cancel_scope.cancel()
