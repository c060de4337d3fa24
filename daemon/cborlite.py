"""CBOR (RFC 8949) for the short-lived clients, in plain Python: no import at all.

The command line, the Slurm-style commands and ``import reckon`` send one small request and
read one reply per call, and importing cbor2 (with ``typing``, which cbor2 imports) cost a
call several milliseconds: more than coding a few hundred bytes here.  This covers what the
controller's client replies hold (maps, arrays, text, bytes, integers, floats, booleans,
null) and what the clients send; a tag, or anything else, is refused.  A large reply (``reckon
jobs`` of thousands of jobs) is faster through cbor2's C decoder, so ``loads`` hands anything
over ``LARGE`` to it.  The daemons keep ``daemon/wire.py`` (cbor2).  tests/daemon/test_cborlite.py
checks both agree.
"""

from __future__ import annotations

MAX_CLIENT_MESSAGE = 256 * 1024 * 1024  # a client's reply: `reckon jobs --json` of a million jobs
LARGE = 64 * 1024  # bytes: from here on cbor2's decoder is worth its import


_INF = float("inf")


class CBORError(ValueError):
    """Undecodable or unencodable data (one line)."""


def dumps(value: object) -> bytes:
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _head(major: int, n: int, out: bytearray) -> None:
    if n < 24:
        out.append(major << 5 | n)
    elif n < 1 << 8:
        out += bytes((major << 5 | 24, n))
    elif n < 1 << 16:
        out.append(major << 5 | 25)
        out += n.to_bytes(2, "big")
    elif n < 1 << 32:
        out.append(major << 5 | 26)
        out += n.to_bytes(4, "big")
    elif n < 1 << 64:
        out.append(major << 5 | 27)
        out += n.to_bytes(8, "big")
    else:
        raise CBORError(f"integer out of CBOR's 64-bit range: {n}")


def _encode(value: object, out: bytearray) -> None:
    if isinstance(value, str):
        data = value.encode("utf-8")
        _head(3, len(data), out)
        out += data
    elif value is None:
        out.append(0xF6)
    elif isinstance(value, bool):  # before int: bool is one
        out.append(0xF5 if value else 0xF4)
    elif isinstance(value, int):
        if value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif isinstance(value, float):
        if value != value or value in (_INF, -_INF):  # as cbor2 writes them: half floats
            out += b"\xf9\x7e\x00" if value != value else b"\xf9\x7c\x00" if value > 0 else b"\xf9\xfc\x00"
        else:
            import struct  # as cbor2 does by default: every other float a double

            out.append(0xFB)
            out += struct.pack(">d", value)
    elif isinstance(value, dict):
        _head(5, len(value), out)
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)
    elif isinstance(value, (list, tuple)):
        _head(4, len(value), out)
        for item in value:
            _encode(item, out)
    elif isinstance(value, (bytes, bytearray)):
        _head(2, len(value), out)
        out += value
    else:
        raise CBORError(f"cannot encode a {type(value).__name__} as CBOR")


def loads(data: bytes) -> object:
    """The one CBOR item ``data`` holds; ``CBORError`` for anything else (trailing bytes included)."""
    if len(data) > LARGE:
        import cbor2

        try:
            return cbor2.loads(data)
        except Exception as exc:  # cbor2 raises several types for bad input
            raise CBORError(f"undecodable CBOR: {exc}") from None
    try:
        value, end = _decode(data, 0)
    except (IndexError, RecursionError, UnicodeDecodeError) as exc:
        raise CBORError(f"undecodable CBOR: {type(exc).__name__}: {exc}") from None
    if value is _BREAK:
        raise CBORError("undecodable CBOR: a break outside an indefinite-length item")
    if end != len(data):
        raise CBORError(f"undecodable CBOR: {len(data) - end} bytes after the item")
    return value


_BREAK = object()  # the end of an indefinite-length item


def _length(info: int, data: bytes, at: int) -> tuple[int, int]:
    if info < 24:
        return info, at
    if info <= 27:
        size = 1 << (info - 24)
        if at + size > len(data):
            raise IndexError("truncated")
        return int.from_bytes(data[at:at + size], "big"), at + size
    raise CBORError(f"undecodable CBOR: reserved additional information {info}")


def _decode(data: bytes, at: int) -> tuple[object, int]:
    initial = data[at]
    major, info = initial >> 5, initial & 0x1F
    at += 1
    if major == 7:
        return _simple(info, data, at)
    if info == 31:  # indefinite length (cbor2 does not send it; accepted all the same)
        return _indefinite(major, data, at)
    n, at = _length(info, data, at)
    if major == 0:
        return n, at
    if major == 1:
        return -1 - n, at
    if major == 2 or major == 3:
        end = at + n
        if end > len(data):
            raise IndexError("truncated string")
        chunk = data[at:end]
        return (bytes(chunk) if major == 2 else chunk.decode("utf-8")), end
    if major == 4:
        items = []
        for _ in range(n):
            item, at = _decode(data, at)
            if item is _BREAK:
                raise CBORError("undecodable CBOR: a break inside a definite-length array")
            items.append(item)
        return items, at
    if major == 5:
        out = {}
        for _ in range(n):
            key, at = _decode(data, at)
            if key is _BREAK or isinstance(key, (list, dict)):
                raise CBORError("undecodable CBOR: a map key that is an array or a map")
            value, at = _decode(data, at)
            if value is _BREAK:
                raise CBORError("undecodable CBOR: a break inside a map")
            out[key] = value
        return out, at
    raise CBORError(f"undecodable CBOR: tag {n} (no tags are used on the client protocol)")


def _simple(info: int, data: bytes, at: int) -> tuple[object, int]:
    if info == 20:
        return False, at
    if info == 21:
        return True, at
    if info == 22 or info == 23:  # null, undefined
        return None, at
    if info in (25, 26, 27):
        import struct

        size = {25: 2, 26: 4, 27: 8}[info]
        if at + size > len(data):
            raise IndexError("truncated float")
        return struct.unpack({25: ">e", 26: ">f", 27: ">d"}[info], data[at:at + size])[0], at + size
    if info == 31:
        return _BREAK, at
    raise CBORError(f"undecodable CBOR: simple value {info}")


def _indefinite(major: int, data: bytes, at: int) -> tuple[object, int]:
    if major in (2, 3):
        parts: list[bytes | str] = []
        while True:
            part, at = _decode(data, at)
            if part is _BREAK:
                return (b"".join(parts) if major == 2 else "".join(parts)), at  # type: ignore[arg-type]
            if type(part) is not (bytes if major == 2 else str):
                raise CBORError("undecodable CBOR: a chunk of another type in an indefinite string")
            parts.append(part)
    if major == 4:
        items: list[object] = []
        while True:
            item, at = _decode(data, at)
            if item is _BREAK:
                return items, at
            items.append(item)
    if major == 5:
        out: dict[object, object] = {}
        while True:
            key, at = _decode(data, at)
            if key is _BREAK:
                return out, at
            if isinstance(key, (list, dict)):
                raise CBORError("undecodable CBOR: a map key that is an array or a map")
            out[key], at = _decode(data, at)  # type: ignore[index]
    raise CBORError(f"undecodable CBOR: major type {major} cannot have an indefinite length")
