"""Requirement 5: Dispatch Gating During Resync (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, facts_of, notes_of, sends_of

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.scheduler import AgentNote, JobNote
from reckon.model.nodes import NodeState


def _rejoin_until_round_open(h: Harness, name: str = "a1") -> None:
    h.disconnect(name)
    h.connect(name)
    h.deliver_to_controller(name, 1)
    assert h.controller.sessions[name].round is not None


def test_req_5_1_no_dispatch_while_round_outstanding() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    _rejoin_until_round_open(h)
    waiting = h.submit(1)[0]

    assert h.scheduler.place() == []  # the scheduler does not even propose it
    before, log_len = h.controller.state.digest(), len(h.log)
    commands = h.dispatch(waiting, "a1")  # and the controller refuses a proposal anyway

    assert facts_of(commands) == [] and sends_of(commands, M.Dispatch) == []
    assert h.controller.state.digest() == before and len(h.log) == log_len
    assert h.job(waiting).state is JobState.PENDING
    h.assert_views_agree()


def test_req_5_1_partial_report_keeps_the_agent_gated() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=2), page_size=2)
    h.join("a1")
    h.run_jobs(6)
    _rejoin_until_round_open(h)
    h.deliver_to_agent("a1")  # the agent answers with 3 report pages
    assert len(h.agents["a1"].outbox_wire) == 3
    h.deliver_to_controller("a1", 2)
    waiting = h.submit(1)[0]

    assert h.controller.node_state("a1") == NodeState.RECONCILING
    assert h.scheduler.place() == []
    assert sends_of(h.dispatch(waiting, "a1"), M.Dispatch) == []

    h.deliver_to_controller("a1", 1)
    assert h.controller.node_state("a1") == NodeState.MIXED
    assert h.schedule() == [(waiting, "a1")]


def test_req_5_2_completed_round_makes_the_agent_eligible_again() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.disconnect("a1")
    h.exit("a1", ids[0], exit_code=0)
    h.connect("a1")
    h.pump()

    assert h.controller.sessions["a1"].round is None
    assert h.scheduler.view()[1]["a1"][2] is True
    waiting = h.submit(1)[0]
    assert h.schedule() == [(waiting, "a1")]
    assert h.job(waiting).state is JobState.RUNNING
    assert sends_of(h.controller_commands[-5:], M.Dispatch)[-1].job == waiting


def test_req_5_2_round_completes_only_when_every_queried_job_is_reconciled() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    _rejoin_until_round_open(h)
    h.agents["a1"].inbox.clear()
    tok = h.controller.sessions["a1"].round.token
    partial = (M.ReportEntry(job=ids[0], attempt=1, status=M.EntryStatus.RUNNING),)

    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=partial))

    assert tok not in h.controller.applied_rounds and facts_of(commands) == []
    assert h.scheduler.view()[1]["a1"][2] is False  # never made eligible by an incomplete report
    # A report that covers every queried job completes the (next) round.
    h.join("a1")
    assert h.controller.applied_rounds[-1] != tok and h.scheduler.view()[1]["a1"][2] is True


def test_req_5_3_round_timer_has_a_bounded_deadline() -> None:
    h = Harness(controller_config=ControllerConfig(round_timeout=12.5))
    h.join("a1")
    h.run_jobs(1)
    h.now = 100.0
    _rejoin_until_round_open(h)
    tok, deadline = h.timers["a1"]
    assert tok == h.controller.sessions["a1"].round.token
    assert deadline == 112.5


def test_req_5_3_round_deadline_resolves_the_round() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    _rejoin_until_round_open(h)
    h.agents["a1"].inbox.clear()  # the agent never answers
    old_token = h.timers["a1"][0]
    before, log_len = h.controller.state.digest(), len(h.log)
    h.now = 40.0

    commands = h.expire_round("a1")

    assert any(isinstance(c, E.RoundEnded) and c.token == old_token for c in commands)
    assert any(isinstance(c, E.Close) for c in commands)
    assert any(isinstance(m, M.Error) and m.fatal for m in sends_of(commands))
    agent_notes = [n for n in notes_of(commands) if isinstance(n, AgentNote)]
    assert agent_notes and not agent_notes[-1].reconciling
    assert h.controller.sessions["a1"].round is None
    assert h.controller.state.digest() == before and len(h.log) == log_len  # nothing was guessed
    h.assert_views_agree()

    # Reattempted on the next rejoin, with a fresh token; this time it completes.
    h.join("a1")
    assert h.controller.node_state("a1") == NodeState.MIXED
    assert h.rounds_ended[-1][1] != old_token
    assert h.job(job).state is JobState.RUNNING
    h.assert_views_agree()


def test_req_5_3_deadline_of_a_finished_round_is_ignored() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    _rejoin_until_round_open(h)
    tok = h.timers["a1"][0]
    h.pump()
    assert h.controller.sessions["a1"].round is None
    before = h.controller.state.digest()

    commands = h.controller_handle(E.RoundDeadlineExpired(agent="a1", token=tok, now=99.0))

    assert commands == []
    assert h.controller.node_state("a1") == NodeState.MIXED and h.controller.state.digest() == before


def test_req_5_4_dispatch_to_disconnected_agent_fails_at_once() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    job = h.submit(1)[0]
    h.disconnect("a1")
    log_len = len(h.log)

    commands = h.dispatch(job, "a1")

    assert facts_of(commands) == [] and sends_of(commands) == [] and len(h.log) == log_len
    assert h.job(job).state is JobState.PENDING and h.job(job).agent is None
    job_notes = [n for n in notes_of(commands) if isinstance(n, JobNote)]
    assert job_notes and job_notes[-1].state is JobState.PENDING  # the scheduler is told the truth again
    h.assert_views_agree()
    assert h.schedule() == [(job, "a2")]  # eligible for the normal scheduling path


def test_req_5_4_dispatch_is_not_held_for_the_reconnect() -> None:
    h = Harness()
    h.join("a1")
    job = h.submit(1)[0]
    h.disconnect("a1")
    h.dispatch(job, "a1")
    h.join("a1")
    assert not any(isinstance(m, M.Dispatch) for m in h.agents["a1"].received)
    assert h.job(job).state is JobState.PENDING
    assert h.schedule() == [(job, "a1")]


def test_req_5_4_dispatch_to_unknown_agent_fails_and_views_agree() -> None:
    h = Harness()
    h.join("a1")
    job = h.submit(1)[0]
    commands = h.dispatch(job, "ghost")
    assert facts_of(commands) == [] and h.job(job).state is JobState.PENDING
    h.assert_views_agree()


def test_req_5_4_dispatch_that_does_not_fit_fails_at_once() -> None:
    h = Harness(slots=2)
    h.join("a1")
    job = h.submit(1, slots=3)[0]
    commands = h.dispatch(job, "a1")
    assert facts_of(commands) == [] and h.job(job).state is JobState.PENDING
    h.assert_views_agree()


def test_req_5_2_round_end_repeats_kills_for_cancels_requested_while_away() -> None:
    h = Harness()
    h.join("a1")
    job, other = h.run_jobs(2)
    h.disconnect("a1")
    commands = h.cancel(job)  # nobody to tell right now
    assert sends_of(commands) == [] and h.job(job).cancel_requested
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    applied = h.deliver_to_controller("a1")

    kinds = [type(m) for m in sends_of(applied)]
    assert kinds.index(M.ResyncDone) < kinds.index(M.Kill)
    assert [(k.job, k.attempt) for k in sends_of(applied, M.Kill)] == [(job, 1)]
    h.pump()
    assert h.agents["a1"].kills == [(job, 1)]
    h.exit("a1", job, exit_code=None, signal=15)
    h.pump()
    assert h.job(job).state is JobState.CANCELLED and h.job(job).signal == 15
    assert h.job(other).state is JobState.RUNNING


def test_req_5_1_cancel_during_a_round_waits_for_the_round() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    _rejoin_until_round_open(h)
    commands = h.cancel(job)
    assert sends_of(commands, M.Kill) == []  # nothing goes to an agent mid-round
    h.pump()
    assert h.agents["a1"].kills == [(job, 1)]
