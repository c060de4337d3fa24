"""Opening a WebSocket whose connect timeout really bounds the opening handshake.

trio-websocket 0.12's ``open_websocket_url`` starts its reader task before
the handshake; when ``connect_timeout`` fires it raises only once that
reader ends, which it never does while the peer holds the TCP connection
open without answering (a stopped controller, whose kernel still accepts
connections; a stalled network path).  The attempt then hangs forever: an
agent never retries, a CLI call never returns.  Found by ``reckon chaos``
(SIGSTOP of the controller for longer than the connect timeout).
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio
from trio_websocket import ConnectionTimeout, WebSocketConnection, open_websocket_url

HANDSHAKE_GRACE = 1.0  # seconds past connect_timeout before the attempt is cancelled from outside


@asynccontextmanager
async def open_websocket(url: str, *, connect_timeout: float, opener: Any = open_websocket_url,
                         **kwargs: Any) -> AsyncIterator[WebSocketConnection]:
    """``opener`` (``open_websocket_url``), raising ``ConnectionTimeout`` (a ``HandshakeError``)
    when the handshake overruns ``connect_timeout``."""
    with trio.CancelScope(deadline=trio.current_time() + connect_timeout + HANDSHAKE_GRACE) as attempt:
        async with opener(url, connect_timeout=connect_timeout, **kwargs) as ws:
            attempt.deadline = math.inf  # connected: the connection itself is not bounded
            yield ws
            return
    raise ConnectionTimeout(f"no WebSocket handshake from {url} within {connect_timeout:g}s")
