"""The controller's listening sockets, bound before anything is written.

A busy port is an operator's mistake: it must end in one line naming the
address (not a traceback), and before the fact store is created, so a failed
start leaves no new database behind (issue #10).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio


class CannotListen(Exception):
    """The address is taken, or not this machine's: a one-line reason for the operator."""


@asynccontextmanager
async def listening(host: str, port: int) -> AsyncIterator[list[trio.SocketListener]]:
    """TCP listeners on ``host:port`` for the duration; ``CannotListen`` if they cannot be had."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except (OSError, OverflowError) as exc:  # EADDRINUSE, EADDRNOTAVAIL, an unknown host; a port > 65535
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CannotListen(f"cannot listen on {host}:{port}: {reason}") from None
    try:
        yield listeners
    finally:
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()
