"""The trio client of the controller's `/client` endpoint (dev mode, the demo, the benchmarks, chaos).

The command line uses the blocking twin, ``daemon/cli/client.py``, which
holds the configuration and error texts both share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected, HandshakeError

from daemon import wire
from daemon.cli.client import (DEFAULT_CONTROLLER, ClientError, auth_headers, client_ssl_context, closed, refused,
                               reply_of, request_bytes, resolve_controller, resolve_token, unreachable)
from daemon.wsconnect import TLSFailure, open_websocket

__all__ = ["DEFAULT_CONTROLLER", "Client", "ClientError", "auth_headers", "call", "resolve_controller",
           "resolve_token"]


class Client:
    """One connection, many requests: `async with Client(url, token) as c: await c.call(...)`."""

    def __init__(self, url: str, token: str | None, *, ca: str | Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.ca = ca  # wss://: the CA file to trust (None: the system's store)
        self._cm: Any = None
        self._ws: Any = None

    async def __aenter__(self) -> "Client":
        tls = {"ssl_context": client_ssl_context(self.ca)} if self.url.startswith("wss:") else {}
        self._cm = open_websocket(self.url + "/client", extra_headers=auth_headers(self.token),
                                  max_message_size=wire.MAX_CLIENT_MESSAGE, connect_timeout=5, disconnect_timeout=2,
                                  **tls)
        try:
            self._ws = await self._cm.__aenter__()
        except ConnectionRejected as exc:
            raise refused(self.url, exc.status_code, exc.body or b"") from None
        except TLSFailure as exc:
            raise ClientError(f"cannot connect to {self.url}: {exc}") from None
        except (OSError, HandshakeError, trio.TooSlowError) as exc:
            # HandshakeError carries its reason in __cause__ (e.g. "all attempts to connect ... failed").
            raise unreachable(self.url, str(exc) or str(exc.__cause__ or "") or type(exc).__name__) from None
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self._cm.__aexit__(*exc_info)
        except (WSClosed, OSError, HandshakeError):
            # HandshakeError: trio-websocket's DisconnectionTimeout, a peer frozen while we close
            # (a SIGSTOPped controller in the chaos run): the answer, if any, is already ours.
            pass

    async def call(self, op: str, **fields: Any) -> dict:
        try:
            await self._ws.send_message(request_bytes(op, fields))
            data = await self._ws.get_message()
        except WSClosed as exc:
            raise closed(self.url, str(exc.reason)) from None
        return reply_of(data, self.url)


async def call(url: str, token: str | None, op: str, **fields: Any) -> dict:
    async with Client(url, token) as client:
        return await client.call(op, **fields)
