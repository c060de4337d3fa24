"""Query replies spliced from job objects encoded once (daemon/encoded.py) are the whole reply's
encoding byte for byte, and a replaced object is encoded anew."""

from __future__ import annotations

import json

import cbor2
import pytest

from reckon.daemon.encoded import EncodedObjects, _cbor_head, cbor_objects, cbor_reply, json_objects, json_reply


def _job(i: int, state: str = "PENDING") -> dict:
    return {"id": str(i), "name": f"poll-{i % 3}", "state": state, "exit_code": None, "submitted_at": 1.5 + i,
            "labels": {"comment": "é"}, "command": ["true", str(i)], "held": False}


@pytest.mark.parametrize("count", [0, 1, 23, 24, 255, 256, 70_000])
def test_cbor_heads_are_cbor2s(count):
    assert cbor2.dumps([None] * count) == _cbor_head(4, count) + b"\xf6" * count


def test_a_spliced_reply_is_the_whole_replys_encoding():
    jobs = [_job(i) for i in range(30)]
    reply = {"ok": True, "jobs": jobs, "now": 1234.5, "unknown": ["99"]}
    cbor, js = cbor_objects(), json_objects(lambda v: list(v))
    for _ in range(2):  # encoded, then from the kept encodings
        assert cbor_reply(reply, cbor) == cbor2.dumps(reply)
        assert json_reply(reply, js, lambda v: list(v)) == json.dumps(reply).encode()
    assert len(cbor) == len(js) == 30


def test_an_object_is_encoded_once_while_it_is_the_same_object():
    calls: list[str] = []

    def encode(obj: dict) -> bytes:
        calls.append(obj["id"])
        return cbor2.dumps(obj)

    objects = EncodedObjects(encode)
    job = _job(1)
    assert objects.of(job) == objects.of(job) == cbor2.dumps(job) and calls == ["1"]
    replaced = _job(1, state="RUNNING")  # the index replaces a changed job's object
    assert cbor2.loads(objects.of(replaced))["state"] == "RUNNING" and calls == ["1", "1"]


def test_the_cache_is_bounded_oldest_first():
    objects = EncodedObjects(cbor2.dumps, limit=3)
    jobs = [_job(i) for i in range(5)]
    for job in jobs:
        objects.of(job)
    assert len(objects) == 3 and set(objects._kept) == {"2", "3", "4"}
