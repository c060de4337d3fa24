"""Query replies encoded from job objects encoded once (CBOR for the WebSocket, JSON for HTTP).

squeue and sacct poll the ``query`` op many times a second (issue #21), and each reply names the
same job objects again: 200 of them took ~4 ms to encode, nearly all the controller's cost of a
poll, and a job changes far less often than it is polled.  The query index
(daemon/controller/query.py) replaces a job's object when the job changes and never changes one,
so an object's encoding can be kept while it is the same object (``is``), and a reply spliced
from the kept encodings: a CBOR map or array is a head and its items one after the other, so
the splice is byte for byte what encoding the whole reply would give.

Only the query op's objects may be given here: an object changed after it was encoded would
keep its old encoding.  The cache is bounded (oldest encodings dropped first); an entry keeps
its object alive, so an object's identity cannot be reused by another while it is cached.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Callable

import cbor2

MAX_CACHED = 50_000  # job objects whose encoding is kept (~0.5 KB each in CBOR, ~0.8 KB in JSON)


class EncodedObjects:
    """Job objects' encodings by job id, each valid while the object is the same one."""

    def __init__(self, encode: Callable[[dict[str, Any]], bytes], limit: int = MAX_CACHED) -> None:
        self._encode = encode
        self._limit = limit
        self._kept: dict[str, tuple[dict[str, Any], bytes]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def of(self, obj: dict[str, Any]) -> bytes:
        key = obj["id"]
        entry = self._kept.get(key)
        if entry is not None and entry[0] is obj:
            return entry[1]
        data = self._encode(obj)
        self._kept.pop(key, None)  # re-inserted last: the oldest encodings are dropped first
        self._kept[key] = (obj, data)
        while len(self._kept) > self._limit:
            try:
                del self._kept[next(iter(self._kept))]
            except (RuntimeError, StopIteration, KeyError):  # another thread's change meanwhile: next time
                break
        return data


def _cbor_head(major: int, n: int) -> bytes:
    """A CBOR data item's head: its major type and length (RFC 8949 section 3)."""
    if n < 24:
        return bytes((major << 5 | n,))
    for code, fmt, bound in ((24, "!B", 1 << 8), (25, "!H", 1 << 16), (26, "!I", 1 << 32), (27, "!Q", 1 << 64)):
        if n < bound:
            return bytes((major << 5 | code,)) + struct.pack(fmt, n)
    raise ValueError(f"a CBOR length of {n}")


def cbor_objects() -> EncodedObjects:
    return EncodedObjects(cbor2.dumps)


def cbor_reply(reply: dict[str, Any], objects: EncodedObjects) -> bytes:
    """``cbor2.dumps(reply)``, with ``reply["jobs"]`` (query index objects) from ``objects``."""
    parts = [_cbor_head(5, len(reply))]
    for key, value in reply.items():
        parts.append(cbor2.dumps(key))
        if key == "jobs" and isinstance(value, list):
            parts.append(_cbor_head(4, len(value)))
            parts += [objects.of(obj) for obj in value]
        else:
            parts.append(cbor2.dumps(value))
    return b"".join(parts)


def json_objects(default: Callable[[Any], Any]) -> EncodedObjects:
    return EncodedObjects(lambda obj: json.dumps(obj, default=default).encode())


def json_reply(reply: dict[str, Any], objects: EncodedObjects, default: Callable[[Any], Any]) -> bytes:
    """``json.dumps(reply, default=default).encode()``, with ``reply["jobs"]`` from ``objects``."""
    parts = []
    for key, value in reply.items():
        if key == "jobs" and isinstance(value, list):
            items = b"[" + b", ".join(objects.of(obj) for obj in value) + b"]"
        else:
            items = json.dumps(value, default=default).encode()
        parts.append(json.dumps(str(key)).encode() + b": " + items)
    return b"{" + b", ".join(parts) + b"}"


class Selections:
    """The query op's ``fields`` selections (issue #21's polling cost): per (field names, job id),
    the job object's selected keys as a small dict, and that dict's CBOR, kept while the job's
    object is the same (``is``) one.

    squeue ``%i %t`` needs 9 of a job object's 50 keys and Snakemake's sacct about 12; a poll
    names the same jobs again and again.  Building 200 small dicts and encoding them took
    ~0.2 ms a poll (more than splicing the whole objects' kept encodings); from here it is two
    dictionary look-ups a job.  ``of`` is ``EncodedObjects.of``'s interface, so ``cbor_reply``
    splices a selected reply the same way.  Bounded like ``EncodedObjects``: at most ``limit``
    entries over all the selections asked for, oldest dropped first."""

    def __init__(self, limit: int = MAX_CACHED) -> None:
        self._limit = limit
        # (fields, job id) -> [source object, selected dict, its CBOR or None]
        self._kept: dict[tuple[tuple[str, ...], str], list[Any]] = {}
        self._by_dict: dict[int, list[Any]] = {}  # id(selected dict) -> its entry (the entry keeps it alive)

    def __len__(self) -> int:
        return len(self._kept)

    def select(self, objects: list[dict[str, Any]], fields: tuple[str, ...]) -> list[dict[str, Any]]:
        """Each object's ``fields`` (those it has), as a dict that stays the same while the object does."""
        kept, out = self._kept, []
        for obj in objects:
            key = (fields, obj["id"])
            entry = kept.get(key)
            if entry is None or entry[0] is not obj:
                entry = self._put(key, obj, {name: obj[name] for name in fields if name in obj})
            out.append(entry[1])
        return out

    def _put(self, key: tuple[tuple[str, ...], str], obj: dict[str, Any], selected: dict[str, Any]) -> list[Any]:
        old = self._kept.pop(key, None)
        if old is not None:
            self._by_dict.pop(id(old[1]), None)
        entry = [obj, selected, None]
        self._kept[key] = entry
        self._by_dict[id(selected)] = entry
        while len(self._kept) > self._limit:
            try:
                dropped = self._kept.pop(next(iter(self._kept)))
                self._by_dict.pop(id(dropped[1]), None)
            except (RuntimeError, StopIteration, KeyError):  # another thread's change meanwhile: next time
                break
        return entry

    def of(self, selected: dict[str, Any]) -> bytes:
        """``cbor2.dumps(selected)``, kept for a dict ``select`` made (any other dict: encoded now)."""
        entry = self._by_dict.get(id(selected))
        if entry is None or entry[1] is not selected:
            return cbor2.dumps(selected)
        data = entry[2]
        if data is None:
            data = entry[2] = cbor2.dumps(selected)
        return data
