"""The client side of the controller's `/client` endpoint (used by the CLI, dev mode, demo, bench)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected, HandshakeError

from daemon import wire
from daemon.wsconnect import CAFileError, TLSFailure, client_ssl_context, open_websocket

DEFAULT_CONTROLLER = "ws://127.0.0.1:7420"


class ClientError(Exception):
    """A one-line reason for the user: unreachable, refused, unknown job, ..."""


def resolve_controller(url: str | None) -> str:
    return url or os.environ.get("RECKON_CONTROLLER") or DEFAULT_CONTROLLER


def resolve_token(token_file: str | None) -> str | None:
    """--token-file, else $RECKON_TOKEN_FILE, else $RECKON_TOKEN, else none."""
    path = token_file or os.environ.get("RECKON_TOKEN_FILE")
    if path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise ClientError(f"cannot read token file {path}: {exc.strerror}") from None
        if not token:
            raise ClientError(f"token file {path} is empty")
        return token
    return os.environ.get("RECKON_TOKEN") or None


def resolve_ca(ca: str | Path | None) -> Path | None:
    """--ca, else $RECKON_CA, else none (the system's trust store)."""
    value = ca or os.environ.get("RECKON_CA")
    return Path(value) if value else None


def auth_headers(token: str | None) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())] if token else []


class Client:
    """One connection, many requests: `async with Client(url, token) as c: await c.call(...)`."""

    def __init__(self, url: str, token: str | None, *, ca: str | Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.ca = ca  # wss://: the CA file to trust (None: the system's store)
        self._cm: Any = None
        self._ws: Any = None

    async def __aenter__(self) -> "Client":
        tls = {}
        if self.url.startswith("wss:"):
            try:
                tls["ssl_context"] = client_ssl_context(self.ca)
            except CAFileError as exc:
                raise ClientError(str(exc)) from None
        self._cm = open_websocket(self.url + "/client", extra_headers=auth_headers(self.token),
                                  max_message_size=wire.MAX_CLIENT_MESSAGE, connect_timeout=5, disconnect_timeout=2,
                                  **tls)
        try:
            self._ws = await self._cm.__aenter__()
        except ConnectionRejected as exc:
            body = (exc.body or b"").decode(errors="replace").strip()
            raise ClientError(f"controller at {self.url} refused the connection: {body or exc.status_code}") from None
        except TLSFailure as exc:
            raise ClientError(f"cannot connect to {self.url}: {exc}") from None
        except (OSError, HandshakeError, trio.TooSlowError) as exc:
            # HandshakeError carries its reason in __cause__ (e.g. "all attempts to connect ... failed").
            reason = str(exc) or str(exc.__cause__ or "") or type(exc).__name__
            raise ClientError(f"controller unreachable at {self.url}: {reason}") from None
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self._cm.__aexit__(*exc_info)
        except (WSClosed, OSError):
            pass

    async def call(self, op: str, **fields: Any) -> dict:
        try:
            await self._ws.send_message(wire.dumps({"op": op, **fields}))
            data = await self._ws.get_message()
        except WSClosed as exc:
            raise ClientError(f"controller at {self.url} closed the connection: {exc.reason}") from None
        reply = wire.loads(data, limit=wire.MAX_CLIENT_MESSAGE)
        if not reply.get("ok"):
            raise ClientError(str(reply.get("error", "request failed")))
        return reply


async def call(url: str, token: str | None, op: str, *, ca: str | Path | None = None, **fields: Any) -> dict:
    async with Client(url, token, ca=ca) as client:
        return await client.call(op, **fields)
