"""daemon/cborlite.py, the light clients' CBOR, agrees with cbor2 (what the controller speaks) both ways."""

from __future__ import annotations

import math

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reckon.daemon import cborlite

ints = st.integers(min_value=-(1 << 64), max_value=(1 << 64) - 1)
scalars = (st.none() | st.booleans() | ints
           | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6)
                      | st.dictionaries(st.text(max_size=10) | ints, inner, max_size=6), max_leaves=20)


@settings(max_examples=80, deadline=None)
@given(values)
def test_what_cborlite_writes_cbor2_reads_and_the_other_way(value):
    assert cbor2.loads(cborlite.dumps(value)) == value
    assert cborlite.loads(cbor2.dumps(value)) == value
    assert cborlite.dumps(value) == cbor2.dumps(value)  # the same bytes, too


@pytest.mark.parametrize("encoded, value", [
    (bytes.fromhex("f93c00"), 1.0), (bytes.fromhex("fa47c35000"), 100000.0),  # half and single floats
    (bytes.fromhex("9f0102ff"), [1, 2]), (bytes.fromhex("bf6161f5ff"), {"a": True}),  # indefinite lengths
    (bytes.fromhex("7f61616162ff"), "ab"), (bytes.fromhex("f7"), None),  # undefined reads as null
])
def test_the_other_encodings_of_rfc_8949_decode(encoded, value):
    assert cborlite.loads(encoded) == value


def test_nan_and_infinities_round_trip():
    assert math.isnan(cborlite.loads(cbor2.dumps(float("nan"))))
    assert cborlite.loads(cborlite.dumps(float("-inf"))) == float("-inf")


@pytest.mark.parametrize("encoded", [b"", b"\x18", b"\x82\x01", b"\x01\x02", b"\xc1\x01", b"\xff", b"\x81\xff",
                                     b"\xa1\x80\x01", b"\x1c", b"\x62\xff\xfe", b"\x5f\x61\x61\xff"])
def test_bad_input_is_one_error(encoded):
    with pytest.raises(cborlite.CBORError):
        cborlite.loads(encoded)


def test_what_it_cannot_encode_is_refused():
    with pytest.raises(cborlite.CBORError, match="set"):
        cborlite.dumps({"a": {1, 2}})
    with pytest.raises(cborlite.CBORError, match="64-bit"):
        cborlite.dumps(1 << 64)


def test_a_large_reply_goes_to_cbor2_and_reads_the_same():
    reply = {"ok": True, "jobs": [{"id": str(i), "state": "PENDING", "at": i / 3} for i in range(5000)]}
    data = cbor2.dumps(reply)
    assert len(data) > cborlite.LARGE and cborlite.loads(data) == reply
    with pytest.raises(cborlite.CBORError):
        cborlite.loads(data[:-1])
