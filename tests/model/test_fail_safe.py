"""The controller model fails safe (issue #19): every input is checked before the first fact is
applied, and an exception after one is ``ModelCorrupted``, chained from its cause.

A protocol error raised before any fact changes nothing and stays what it is (the daemon refuses
the request or the peer).  After a fact, nothing can be refused any more: the state has moved past
what the log will hold, and the daemon stops (a supervisor restarts it from the log).
"""

from __future__ import annotations

import pytest

from reckon.model import controller as C
from reckon.model import connections
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model import names
from reckon.model import nodes
from reckon.model import reports as R
from reckon.model.errors import LocalProtocolError, ModelCorrupted, RemoteProtocolError
from reckon.model.state import ControllerState

from tests.model.harness import Harness, spec
from tests.model.test_identity import World, refusal
from tests.model.test_join_generation import heartbeat, join, session, welcome

SPENT = "is the last the protocol allows"


# ---- a Join at the largest generation the wire allows (the reproduced crash) ---------------------


def test_a_first_join_at_the_largest_generation_is_refused_for_good_before_any_fact() -> None:
    w = World()
    error = refusal(join(w, 1, M.MAX_GENERATION), 1)
    assert error.permanent and SPENT in error.reason
    assert w.log == [] and w.controller.state.digest() == ControllerState().digest()
    assert "node1" not in w.controller.sessions and w.controller.conns == {}
    assert welcome(join(w, 2, 0), 2).generation == 1  # the controller runs on


def test_the_holder_presenting_the_largest_generation_is_refused_and_keeps_its_name_and_jobs() -> None:
    w = World()
    join(w, 1, 0)
    [placed] = w.submit_and_place(1)
    w.handle(E.ConnectionClosed(conn=1, now=70.0))
    before_log, before_digest = list(w.log), w.controller.state.digest()
    error = refusal(join(w, 3, M.MAX_GENERATION), 3)
    assert error.permanent and SPENT in error.reason
    assert w.log == before_log and w.controller.state.digest() == before_digest
    assert not w.controller.sessions["node1"].connected
    assert w.controller.placed_on("node1") == {placed: 1}


def test_the_last_generation_is_issued_and_only_the_join_after_it_is_refused() -> None:
    w = World()
    assert welcome(join(w, 1, M.MAX_GENERATION - 1), 1).generation == M.MAX_GENERATION
    heartbeat(w, 1)
    w.handle(E.ConnectionClosed(conn=1, now=60.0))
    assert SPENT in refusal(join(w, 2, M.MAX_GENERATION), 2).reason


def test_the_generation_fact_is_built_before_the_joins_first_fact(monkeypatch) -> None:
    """Without the refusal the bad value still fails before anything was applied: the fact is
    built from the state before the join, not after ``AgentRegistered`` (the reproduced crash)."""
    monkeypatch.setattr(names, "generation_spent", lambda join, session, info: None)
    w = World()
    with pytest.raises(ValueError, match="generation must be <=") as caught:
        join(w, 1, M.MAX_GENERATION)
    assert not isinstance(caught.value, ModelCorrupted)
    assert w.controller.state.digest() == ControllerState().digest() and "node1" not in w.controller.sessions


def test_a_join_that_fails_after_its_registration_is_model_corrupted(monkeypatch) -> None:
    """The net under the checks: had the generation been built after ``AgentRegistered`` (as it
    was), the ValueError comes after a fact, and is ModelCorrupted, one line, chained."""
    monkeypatch.setattr(names, "generation_spent", lambda join, session, info: None)
    monkeypatch.setattr(names, "next_generation", lambda join, session, info: None)
    issue = F.JoinGenerationIssued

    def after_registration(tx, ev) -> None:
        connections.on_join(tx, ev)
        issue(agent=ev.join.agent, generation=ev.join.generation + 1, confirmed=ev.join.generation)

    monkeypatch.setitem(C.HANDLERS, E.AgentJoined, after_registration)
    w = World()
    with pytest.raises(ModelCorrupted, match="AgentJoined after applying 1 fact") as caught:
        join(w, 1, M.MAX_GENERATION)
    assert isinstance(caught.value.__cause__, ValueError)
    assert "\n" not in str(caught.value)  # one line for the daemon to print


# ---- the net: anything escaping after a fact ---------------------------------------------------------


@pytest.mark.parametrize("cause", [RuntimeError("boom"), LocalProtocolError("refused too late")],
                         ids=["any exception", "a protocol error too"])
def test_an_exception_after_a_fact_is_model_corrupted_chained_from_it(monkeypatch, cause) -> None:
    h = Harness()
    h.join("a1")

    def drain_then_fail(tx, ev) -> None:
        nodes.on_drain(tx, ev)
        raise cause

    monkeypatch.setitem(C.HANDLERS, E.DrainAgent, drain_then_fail)
    with pytest.raises(ModelCorrupted) as caught:
        h.controller.handle(E.DrainAgent(agent="a1", now=h.now))
    assert caught.value.__cause__ is cause


def test_a_post_handle_hook_failing_after_a_fact_is_model_corrupted(monkeypatch) -> None:
    h = Harness()

    def failing_hook(tx, ev) -> None:
        raise KeyError("hook")

    monkeypatch.setattr(C, "POST_HANDLE", (*C.POST_HANDLE, failing_hook))
    with pytest.raises(ModelCorrupted):
        h.controller.handle(E.SubmitJob(spec=spec(), now=h.now))


def test_an_agents_protocol_error_after_a_fact_is_not_answered_as_a_refusal(monkeypatch) -> None:
    """A message that breaks after its fact cannot be refused (the fact would stay): corrupted."""
    h = Harness()
    h.join("a1")
    [job] = h.submit()
    h.dispatch(job, "a1")
    h.pump()
    on_finished = R.on_finished

    def finish_then_complain(tx, session, msg) -> None:
        on_finished(tx, session, msg)
        raise RemoteProtocolError("complaint after the fact")

    monkeypatch.setattr(R, "on_finished", finish_then_complain)
    h.start("a1", job)
    with pytest.raises(ModelCorrupted):
        h.exit("a1", job)
        h.pump()


# ---- before any fact: as it was ------------------------------------------------------------------------


def test_a_protocol_error_before_any_fact_stays_as_it_is() -> None:
    h = Harness()
    h.join("a1")
    before = h.controller.state.digest()
    with pytest.raises(LocalProtocolError, match="unknown job") as caught:
        h.controller.handle(E.CancelJob(job="99", now=h.now))
    assert not isinstance(caught.value, ModelCorrupted) and h.controller.state.digest() == before


def test_an_exception_before_any_fact_is_not_called_corruption(monkeypatch) -> None:
    h = Harness()

    def fail_at_once(tx, ev) -> None:
        raise RuntimeError("before anything")

    monkeypatch.setitem(C.HANDLERS, E.DrainAgent, fail_at_once)
    with pytest.raises(RuntimeError, match="before anything"):
        h.controller.handle(E.DrainAgent(agent="a1", now=h.now))


def test_an_agents_protocol_error_before_any_fact_is_still_a_refusal() -> None:
    h = Harness()
    h.join("a1")
    conn = h.agents["a1"].conn
    before = h.controller.state.digest()
    # A page of a report that contradicts itself: refused, the connection closed, nothing applied.
    commands = h.controller.handle(E.MessageFromAgent(conn=conn, now=h.now, message=M.Kill(
        seq=1, job="1", attempt=1)))
    assert not [c for c in commands if isinstance(c, E.Append)] and h.controller.state.digest() == before
    assert any(isinstance(c, E.Close) and c.conn == conn for c in commands)
