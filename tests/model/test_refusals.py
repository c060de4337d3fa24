"""Refusal codes (protocol version 5) and the agent model's refusal policy.

The controller says what kind of refusal an ``Error`` is (``RefusalCode``); the agent model
decides from that code how soon to try again (``model.agent.refusal_retry``), and the daemon
follows.  Older agents get no code (their decoder refuses unknown fields) and read
``permanent`` as before; an agent serves an older controller, which sends no code, from the
error's other fields.
"""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import REFUSAL_RETRY, Retry, from_older_controller, refusal_retry
from reckon.model.errors import RemoteProtocolError

from tests.model.test_identity import FIRST, SECOND, World

C = M.RefusalCode


def error_of(commands: list[E.Command], conn: int) -> M.Error:
    [error] = [c.message for c in commands if isinstance(c, E.Send) and c.conn == conn
               and isinstance(c.message, M.Error)]
    return error


def test_a_code_travels_and_is_left_out_while_unset() -> None:
    error = M.refusal(M.PROTOCOL_VERSION, C.NAME_HELD, "agent name node1 is held by another agent")
    wire = M.to_wire(error)
    assert wire["code"] == "name_held" and wire["permanent"] is True
    assert M.from_wire(wire, to="agent") == error
    assert "code" not in M.to_wire(M.Error(seq=0, reason="x"))  # what an older agent decodes, as before
    assert M.from_wire({"type": "error", "seq": 0, "reason": "x"}, to="agent").code is None  # an older controller


@pytest.mark.parametrize(("wire", "words"), [
    ({"type": "error", "seq": 0, "reason": "x", "code": "gone_fishing"}, "unknown refusal code"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "name_held"}, "is permanent"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "invalid", "permanent": True}, "is not permanent"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "stale_round"}, "is not fatal"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "invalid", "fatal": False}, "is fatal"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "not_leader"}, "names the leader exactly"),
    ({"type": "error", "seq": 0, "reason": "x", "code": "invalid", "leader": ""}, "names the leader exactly"),
])
def test_an_error_whose_code_disagrees_with_its_fields_is_refused(wire: dict, words: str) -> None:
    with pytest.raises(RemoteProtocolError, match=words):
        M.from_wire(wire, to="agent")


@pytest.mark.parametrize(("version", "code", "permanent"), [
    (2, None, False), (3, None, True), (4, None, True), (5, C.VERSION, True)])
def test_each_agent_version_gets_only_the_fields_it_reads(version: int, code: M.RefusalCode | None,
                                                          permanent: bool) -> None:
    error = M.refusal(version, C.VERSION, "protocol version 9 not supported")
    assert (error.code, error.permanent, error.fatal) == (code, permanent, True)
    assert M.from_wire(M.to_wire(error), to="agent") == error


def test_a_standby_names_the_leader_with_its_code() -> None:
    assert M.not_the_leader(5, "wss://c2:8765").code is C.NOT_LEADER
    assert M.not_the_leader(4, "wss://c2:8765") == M.Error(seq=0, reason="not the leader: the leader is "
                                                           "wss://c2:8765", leader="wss://c2:8765")
    assert M.not_the_leader(3, "wss://c2:8765").leader is None


def test_the_policy_answers_every_code_and_never_is_exactly_the_permanent_ones() -> None:
    """An agent of version 3 or 4 acts on ``permanent``, one of version 5 on the code: the same."""
    assert set(REFUSAL_RETRY) == set(C)
    assert {c for c, r in REFUSAL_RETRY.items() if r is Retry.NEVER} == M.PERMANENT_REFUSALS
    assert {c for c, r in REFUSAL_RETRY.items() if r is Retry.CARRY_ON} == M.NOT_FATAL_REFUSALS
    assert {c for c, r in REFUSAL_RETRY.items() if r is Retry.RETRY_NOW} == {C.NOT_LEADER}
    for code in C:
        error = M.refusal(M.PROTOCOL_VERSION, code, "x", leader="" if code is C.NOT_LEADER else None)
        assert refusal_retry(error) is REFUSAL_RETRY[code]
        # The same error as an older controller sends it (no code): the same answer.
        assert refusal_retry(M.Error(seq=0, reason="x", fatal=error.fatal, permanent=error.permanent,
                                     leader=error.leader)) is REFUSAL_RETRY[code], code


def test_the_code_decides_not_the_words() -> None:
    words = "malformed message: join message has unknown fields ['x']"
    assert refusal_retry(M.refusal(5, C.INVALID, words)) is Retry.BACK_OFF
    older = M.Error(seq=0, reason=words)  # an older controller's decoder: only its words say what happened
    assert from_older_controller(older) and refusal_retry(older) is Retry.NEVER
    assert not from_older_controller(M.refusal(5, C.INVALID, words))


def test_the_controller_codes_its_join_refusals() -> None:
    w = World()
    w.join(1, FIRST)
    held = error_of(w.join(2, SECOND), 2)  # another identity while the holder is connected
    assert held.code is C.NAME_HELD and refusal_retry(held) is Retry.NEVER
    assert error_of(w.join(3, SECOND, version=4), 3).code is None  # a version 4 agent reads no code
    unsupported = error_of(w.join(4, FIRST, version=9), 4)
    assert unsupported.code is C.VERSION and refusal_retry(unsupported) is Retry.NEVER
    w.join(6, FIRST)  # the holder again, on a newer connection
    stale = error_of(w.join(5, FIRST), 5)  # a Join accepted before that connection's, arriving late
    assert stale.code is C.STALE_JOIN and refusal_retry(stale) is Retry.BACK_OFF
