"""The wire: CBOR over WebSocket, checked before the model sees it.

A WebSocket message (a frame here) carries one protocol message, a CBOR map,
or several in order, a CBOR array of maps.  Under load most of a daemon's
time per protocol message went to the WebSocket layer (framing, a task
switch, a send call), so a writer puts everything queued for a peer into as
few frames as it can (``frames``), and a reader takes a frame apart
(``decode_frame``).  A frame is decoded whole before any of it is used: one
bad message refuses the frame, and nothing of it is applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import cbor2

from reckon.daemon.cborlite import MAX_CLIENT_MESSAGE  # noqa: F401  (one limit: the clients' codec holds it)
from reckon.model.errors import RemoteProtocolError

if TYPE_CHECKING:
    from reckon.model import messages as M

MAX_AGENT_MESSAGE = 16 * 1024 * 1024  # a report page of MAX_PAGE_ENTRIES fits well under this


def dumps(data: Any) -> bytes:
    return cbor2.dumps(data)


MAX_FRAME_MESSAGES = 10_000  # protocol messages in one frame
FRAME_BYTES = 256 * 1024  # a writer starts a new frame once this much is in one (keeps long reports pipelined)


def loads(data: bytes | str, *, limit: int) -> Any:
    """Decode one CBOR map; anything else is the peer's protocol error."""
    value = _loads(data, limit=limit)
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"a message must be a CBOR map, got {type(value).__name__}")
    return value


def _loads(data: bytes | str, *, limit: int) -> Any:
    if isinstance(data, str):
        raise RemoteProtocolError("expected a binary CBOR message, got text")
    if len(data) > limit:
        raise RemoteProtocolError(f"message of {len(data)} bytes exceeds the limit of {limit}")
    try:
        value = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for bad input
        raise RemoteProtocolError(f"undecodable CBOR: {exc}") from None
    return value


# The protocol messages (model.messages) are imported where they are used, not
# at the top: the command line's client needs only ``dumps`` and ``loads``, and
# importing every message class cost it about a third of its start-up.


def encode(msg: M.Message) -> bytes:
    from reckon.model import messages as M

    return cbor2.dumps(M.to_wire(msg))


def decode(data: bytes | str, *, to: str) -> M.Message:
    """A frame that must hold exactly one protocol message."""
    from reckon.model import messages as M

    return M.from_wire(loads(data, limit=MAX_AGENT_MESSAGE), to=to)


def decode_frame(data: bytes | str, *, to: str) -> list[M.Message]:
    """Every protocol message of one frame, in order; ``RemoteProtocolError`` for any bad one."""
    from reckon.model import messages as M

    value = _loads(data, limit=MAX_AGENT_MESSAGE)
    if isinstance(value, dict):
        return [M.from_wire(value, to=to)]
    if not isinstance(value, list):
        raise RemoteProtocolError(f"a frame must be a CBOR map or an array of maps, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_FRAME_MESSAGES:
        raise RemoteProtocolError(f"a frame holds 1 to {MAX_FRAME_MESSAGES} messages, got {len(value)}")
    return [M.from_wire(item, to=to) for item in value]


def frames(encoded: list[bytes], *, version: int) -> list[bytes]:
    """Already-encoded messages in frames for a peer of protocol ``version``, in order.

    A peer older than ``M.BATCHED_FRAMES_SINCE`` gets one message a frame.
    Otherwise they are joined into as few frames as the limits allow: a lone
    message stays a plain map; several become a CBOR array, whose encoding is
    a header followed by the items' own encodings, so nothing is encoded twice.
    """
    from reckon.model import messages as M

    if version < M.BATCHED_FRAMES_SINCE:
        return encoded
    out: list[bytes] = []
    i = 0
    while i < len(encoded):
        j, size = i, 0
        while j < len(encoded) and j - i < MAX_FRAME_MESSAGES and (j == i or size + len(encoded[j]) <= FRAME_BYTES):
            size += len(encoded[j])
            j += 1
        out.append(encoded[i] if j == i + 1 else _array_header(j - i) + b"".join(encoded[i:j]))
        i = j
    return out


def _array_header(n: int) -> bytes:
    """The CBOR head of an array of ``n`` items (major type 4)."""
    if n < 24:
        return bytes([0x80 | n])
    if n < 1 << 8:
        return bytes([0x98, n])
    if n < 1 << 16:
        return b"\x99" + n.to_bytes(2, "big")
    return b"\x9a" + n.to_bytes(4, "big")
