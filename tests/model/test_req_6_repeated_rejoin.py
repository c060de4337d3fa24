"""Requirement 6: Resync Failure and Repeated Rejoin (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, facts_of, sends_of

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.resync import RoundState
from reckon.model.nodes import NodeState


def _paged() -> Harness:
    return Harness(controller_config=ControllerConfig(page_size=2), page_size=2)


def _scenario(h: Harness) -> list[str]:
    """Six jobs on a1; while it is away two finish, one fails and one is forgotten."""
    h.join("a1")
    ids = h.run_jobs(6)
    h.disconnect("a1")
    h.now = 5.0
    h.exit("a1", ids[0], exit_code=0, finished_at=4.0)
    h.exit("a1", ids[1], exit_code=2, finished_at=4.5)
    h.exit("a1", ids[2], exit_code=None, signal=9, finished_at=4.75)
    h.agent("a1").records.pop((ids[3], 1))
    return ids


def _outcomes(h: Harness, ids: list[str]) -> list[tuple]:
    return [(h.job(j).state, h.job(j).attempt, h.job(j).exit_code, h.job(j).signal, h.job(j).finished_at)
            for j in ids]


EXPECTED = [
    (JobState.COMPLETED, 1, 0, None, 4.0),
    (JobState.FAILED, 1, 2, None, 4.5),
    (JobState.FAILED, 1, None, 9, 4.75),
    (JobState.PENDING, 2, None, None, None),
    (JobState.RUNNING, 1, None, None, None),
    (JobState.RUNNING, 1, None, None, None),
]


def test_req_6_1_disconnect_mid_report_discards_the_round() -> None:
    h = _paged()
    ids = _scenario(h)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    rnd = h.controller.sessions["a1"].round
    h.deliver_to_agent("a1")
    kinds = [type(m) for m in h.agents["a1"].outbox_wire]
    # Three report pages; the three completions they carry wait for the round's ResyncDone.
    assert kinds == [M.ResyncReport] * 3
    log_len = len(h.log)
    h.deliver_to_controller("a1", 2)  # two of three pages arrive
    assert rnd.state is RoundState.COLLECTING

    h.disconnect("a1")

    assert rnd.state is RoundState.DISCARDED
    assert (("a1", rnd.token)) in h.rounds_ended
    assert len(h.log) == log_len, "nothing of the incomplete report was applied"
    assert rnd.token not in h.controller.applied_rounds
    assert [h.job(j).state for j in ids] == [JobState.RUNNING] * 6
    h.assert_views_agree()

    # The next rejoin re-initiates reconciliation with a new round and converges.
    h.join("a1")
    assert h.controller.applied_rounds[-1] != rnd.token
    assert _outcomes(h, ids) == EXPECTED


def test_req_6_1_new_join_on_a_new_connection_supersedes_the_open_round() -> None:
    h = _paged()
    ids = _scenario(h)
    first = h.connect("a1")
    h.deliver_to_controller("a1", 1)
    old = h.controller.sessions["a1"].round
    # The agent gives up on that connection without the controller noticing, and joins again.
    h.agents["a1"].inbox.clear()
    h.agent_handle("a1", E.Disconnected(now=h.now))
    h.agents["a1"].conn = None
    second = h.connect("a1")
    commands = h.deliver_to_controller("a1", 1)

    assert any(isinstance(c, E.Close) and c.conn == first for c in commands)
    assert old.state is RoundState.DISCARDED
    new = h.controller.sessions["a1"].round
    assert new is not None and new.token != old.token and h.controller.sessions["a1"].conn == second
    h.pump()
    assert _outcomes(h, ids) == EXPECTED


def test_req_6_2_report_presented_twice_gives_the_same_result() -> None:
    once, twice = _paged(), _paged()
    ids = _scenario(once)
    _scenario(twice)
    once.connect("a1")
    once.pump()

    twice.connect("a1")
    twice.deliver_to_controller("a1", 1)
    twice.deliver_to_agent("a1")
    pages = list(twice.agents["a1"].outbox_wire)
    twice.agents["a1"].outbox_wire[:] = [p for p in pages for _ in range(2)]  # every page delivered twice
    log_before = len(twice.log)
    twice.deliver_to_controller("a1")
    twice.pump()

    assert _outcomes(twice, ids) == _outcomes(once, ids) == EXPECTED
    assert twice.controller.state.digest() == once.controller.state.digest()
    assert len(twice.log) - log_before == len(once.log) - log_before
    assert len(twice.controller.applied_rounds) == len(once.controller.applied_rounds) == 1


def test_req_6_2_whole_report_resent_after_it_was_applied_changes_nothing() -> None:
    h = _paged()
    _scenario(h)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    pages = [m for m in h.agents["a1"].outbox_wire if isinstance(m, M.ResyncReport)]
    h.pump()
    before, log_len, applied = h.controller.state.digest(), len(h.log), list(h.controller.applied_rounds)

    for page in pages:
        commands = h.send_to_controller("a1", page)
        errors = sends_of(commands, M.Error)
        assert len(errors) == 1 and not errors[0].fatal
        assert facts_of(commands) == []

    assert h.controller.state.digest() == before and len(h.log) == log_len
    assert h.controller.applied_rounds == applied
    assert h.controller.node_state("a1") == NodeState.MIXED


def test_req_6_3_report_for_a_discarded_round_is_discarded() -> None:
    h = _paged()
    ids = _scenario(h)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    stale_pages = [m for m in h.agents["a1"].outbox_wire if isinstance(m, M.ResyncReport)]  # then the link dies
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)  # a new round is armed
    current = h.controller.sessions["a1"].round
    before, log_len = h.controller.state.digest(), len(h.log)

    for page in stale_pages:
        commands = h.send_to_controller("a1", page)
        assert [(type(m), m.fatal) for m in sends_of(commands)] == [(M.Error, False)]

    assert h.controller.state.digest() == before and len(h.log) == log_len
    assert h.controller.sessions["a1"].round is current and current.received == {}
    h.pump()  # the current round still completes normally
    assert _outcomes(h, ids) == EXPECTED


def test_req_6_3_report_for_a_timed_out_round_is_discarded() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.exit("a1", job, exit_code=3)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    late = list(h.agents["a1"].outbox_wire)
    h.expire_round("a1")  # times out before the report arrives; the connection is closed
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    before = h.controller.state.digest()

    commands = h.send_to_controller("a1", late[0])

    assert facts_of(commands) == [] and h.controller.state.digest() == before
    assert h.job(job).state is JobState.RUNNING
