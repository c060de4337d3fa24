"""The wire: one CBOR map per WebSocket message, checked before the model sees it."""

from __future__ import annotations

from typing import Any

import cbor2

from model import messages as M
from model.errors import RemoteProtocolError

MAX_AGENT_MESSAGE = 16 * 1024 * 1024  # a report page of MAX_PAGE_ENTRIES fits well under this
MAX_CLIENT_MESSAGE = 256 * 1024 * 1024  # `reckon jobs --json` of a million jobs


def dumps(data: Any) -> bytes:
    return cbor2.dumps(data)


def loads(data: bytes | str, *, limit: int) -> Any:
    """Decode one CBOR item; anything else is the peer's protocol error."""
    if isinstance(data, str):
        raise RemoteProtocolError("expected a binary CBOR message, got text")
    if len(data) > limit:
        raise RemoteProtocolError(f"message of {len(data)} bytes exceeds the limit of {limit}")
    try:
        value = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for bad input
        raise RemoteProtocolError(f"undecodable CBOR: {exc}") from None
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"a message must be a CBOR map, got {type(value).__name__}")
    return value


def encode(msg: M.Message) -> bytes:
    return cbor2.dumps(M.to_wire(msg))


def decode(data: bytes | str, *, to: str) -> M.Message:
    return M.from_wire(loads(data, limit=MAX_AGENT_MESSAGE), to=to)
