"""Requirement 4: Controller Reconciliation (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, facts_of, sends_of, spec

from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import LocalJob, LocalStatus
from reckon.model.controller import Controller
from reckon.model.jobs import JobState
from reckon.model.state import replay
from reckon.model.nodes import NodeState


def _open_round(h: Harness, name: str = "a1") -> bytes:
    """Rejoin and stop right after the controller armed the round; return its token."""
    if h.agents[name].conn is not None:
        h.disconnect(name)
    h.connect(name)
    h.deliver_to_controller(name, 1)
    h.agents[name].inbox.clear()  # the test answers by hand
    rnd = h.controller.sessions[name].round
    assert rnd is not None
    return rnd.token


def _report(h: Harness, tok: bytes, *entries: M.ReportEntry, name: str = "a1") -> list:
    return h.send_to_controller(name, M.ResyncReport(token=tok, page=0, pages=1, entries=tuple(entries)))


def _finished(job: str, attempt: int = 1, *, code: int | None = 0, sig: int | None = None,
              at: float = 1.0, started: float | None = None) -> M.ReportEntry:
    return M.ReportEntry(job=job, attempt=attempt, status=M.EntryStatus.FINISHED, exit_code=code, signal=sig,
                         finished_at=at, started_at=started)


def _running(job: str, attempt: int = 1, started: float | None = None) -> M.ReportEntry:
    return M.ReportEntry(job=job, attempt=attempt, status=M.EntryStatus.RUNNING, started_at=started)


def _unrecognized(job: str, attempt: int = 1) -> M.ReportEntry:
    return M.ReportEntry(job=job, attempt=attempt, status=M.EntryStatus.UNRECOGNIZED)


def test_req_4_1_report_outcomes_are_applied_as_ordinary_facts() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(4)
    tok = _open_round(h)

    commands = _report(h, tok, _running(ids[0], started=0.5), _finished(ids[1], code=0, at=2.0),
                       _finished(ids[2], code=3, at=3.0), _unrecognized(ids[3]))

    facts = facts_of(commands)
    assert [type(f) for f in facts] == [F.JobStarted, F.JobFinished, F.JobFinished, F.JobRequeued]
    assert h.log[-len(facts):] == facts
    h.assert_replay_agrees()  # the same apply seam: replay == live


def test_req_4_1_round_and_completion_report_produce_the_same_fact() -> None:
    via_round, via_report = Harness(), Harness()
    for h in (via_round, via_report):
        h.join("a1")
        h.run_jobs(1)
    tok = _open_round(via_round)
    round_facts = facts_of(_report(via_round, tok, _finished("1", code=4, at=7.0, started=1.0)))
    report_facts = facts_of(via_report.send_to_controller("a1", M.Finished(
        job="1", attempt=1, exit_code=4, signal=None, finished_at=7.0, started_at=1.0)))
    assert round_facts == report_facts == [F.JobFinished(job="1", attempt=1, exit_code=4, signal=None,
                                                         finished_at=7.0, started_at=1.0)]
    assert via_round.controller.state.digest() == via_report.controller.state.digest()


def test_req_4_2_finish_time_is_the_agent_reported_time() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    tok = _open_round(h)
    h.now = 1_000.0

    _report(h, tok, _finished(job, code=0, at=17.5))

    assert h.job(job).finished_at == 17.5
    assert replay(h.log).jobs[job].finished_at == 17.5


def test_req_4_3_duplicate_outcome_in_a_round_is_a_noop() -> None:
    h = Harness()
    h.join("a1")
    job, other = h.run_jobs(2)
    h.exit("a1", job, exit_code=0, finished_at=2.0)
    h.deliver_to_controller("a1")  # applied...
    assert h.job(job).state is JobState.COMPLETED
    _, lost = h.disconnect("a1")  # ...but the ack is lost with the connection
    assert [type(m) for m in lost] == [M.Ack]
    before, log_len = h.controller.state.digest(), len(h.log)

    h.connect("a1")
    h.pump()

    # The round carried the outcome again (as an unqueried extra); its ResyncDone
    # acknowledged it, so the outbox did not send it a second time.
    reports = [m for m in h.agents["a1"].sent if isinstance(m, M.ResyncReport)]
    assert (job, 1) in {(e.job, e.attempt) for r in reports for e in r.entries}
    assert h.controller.state.digest() == before
    assert len(h.log) == log_len
    finished = [m for m in h.agents["a1"].sent if isinstance(m, M.Finished) and m.job == job]
    assert len(finished) == 1  # the first report only
    assert any(isinstance(m, M.ResyncDone) for m in h.agents["a1"].received)
    assert h.agent("a1").outbox == {} and h.job(other).state is JobState.RUNNING
    assert h.agent("a1").records[(job, 1)].acked


def test_req_4_3_duplicate_completion_report_is_acked_without_a_fact() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    report = M.Finished(job=job, attempt=1, exit_code=1, signal=None, finished_at=2.0)
    first = h.send_to_controller("a1", report)
    second = h.send_to_controller("a1", report)
    assert len(facts_of(first)) == 1 and facts_of(second) == []
    assert [a.outcome for a in sends_of(first + second, M.Ack)] == [M.AckOutcome.APPLIED,
                                                                     M.AckOutcome.ALREADY_TERMINAL]


def test_req_4_4_terminal_state_not_overwritten() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    h.send_to_controller("a1", M.Finished(job=ids[0], attempt=1, exit_code=0, signal=None, finished_at=5.0))
    h.cancel(ids[1])
    h.send_to_controller("a1", M.Finished(job=ids[1], attempt=1, exit_code=None, signal=15, finished_at=6.0))
    assert h.job(ids[0]).state is JobState.COMPLETED and h.job(ids[1]).state is JobState.CANCELLED
    keys = {j: h.job(j).snapshot_key() for j in ids[:2]}
    tok = _open_round(h)
    log_len = len(h.log)

    commands = _report(h, tok, _running(ids[2]), _finished(ids[0], code=9, at=99.0), _running(ids[1]))

    assert {j: h.job(j).snapshot_key() for j in ids[:2]} == keys
    assert len(h.log) == log_len
    # A process still running for a finished job is an orphan: it is told to stop.
    assert [(k.job, k.attempt) for k in sends_of(commands, M.Kill)] == [(ids[1], 1)]


def test_req_4_4_report_of_an_older_attempt_does_not_overwrite_the_newer_one() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    job = h.run_jobs(1, "a1")[0]
    tok = _open_round(h)
    _report(h, tok, _unrecognized(job))  # attempt 1 is lost: requeued as attempt 2
    h.join("a2")
    h.dispatch(job, "a2")
    h.pump()
    before = h.job(job).snapshot_key()

    commands = h.send_to_controller("a1", M.Finished(job=job, attempt=1, exit_code=0, signal=None,
                                                     finished_at=3.0))

    assert sends_of(commands, M.Ack)[0].outcome is M.AckOutcome.STALE_ATTEMPT
    assert facts_of(commands) == [] and h.job(job).snapshot_key() == before
    assert h.job(job).state is JobState.RUNNING and h.job(job).agent == "a2"


def test_req_4_5_unrecognized_job_gets_no_invented_outcome() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    tok = _open_round(h)

    commands = _report(h, tok, _unrecognized(job))

    assert not any(isinstance(f, (F.JobFinished, F.JobCancelConfirmed)) for f in facts_of(commands))
    rec = h.job(job)
    assert (rec.exit_code, rec.signal, rec.finished_at) == (None, None, None)
    assert not rec.terminal


def test_req_4_6_unrecognized_job_returns_to_pending() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1, slots=3)[0]
    tok = _open_round(h)

    commands = _report(h, tok, _unrecognized(job))

    assert facts_of(commands) == [F.JobRequeued(job=job, attempt=1, reason="unrecognized by agent", requeued_at=h.now)]
    rec = h.job(job)
    assert (rec.state, rec.attempt, rec.agent, rec.requeues, rec.started_at) == (JobState.PENDING, 2, None, 1, None)
    assert h.controller.state.agents["a1"].used == 0
    assert h.scheduler.view()[0] == (job,)
    assert h.schedule() == [(job, "a1")]
    assert h.job(job).state is JobState.RUNNING and h.job(job).attempt == 2


def test_req_4_6_unrecognized_job_with_a_cancel_request_ends_cancelled() -> None:
    """A job the user cancelled is not run again: its attempt is gone, so it is CANCELLED."""
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.cancel(job)
    tok = _open_round(h)

    commands = _report(h, tok, _unrecognized(job))

    assert facts_of(commands) == [F.JobCancelConfirmed(job=job, attempt=1, confirmed_at=h.now)]
    assert h.job(job).state is JobState.CANCELLED and h.job(job).exit_code is None


def _lost_dispatch_controller(h: Harness) -> None:
    """A controller that knows job 1 (attempt 1) as PENDING: its placement never became durable."""
    facts = [F.JobSubmitted(job="1", spec=spec(), submitted_at=0.0),
             F.JobSubmitted(job="2", spec=spec(), submitted_at=0.0)]
    h.controller = Controller.from_log(facts, h.config)
    h.log = list(facts)
    for cmd in h.controller.initial_notes():
        h.scheduler.notify(cmd.note)


def test_req_4_7_unqueried_extra_is_reconciled_not_discarded() -> None:
    h = Harness(records=[
        LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.FINISHED, exit_code=6, finished_at=4.0,
                 started_at=1.0),
        LocalJob(job="2", attempt=1, spec=spec(), status=LocalStatus.RUNNING),
    ])
    _lost_dispatch_controller(h)
    assert h.agent("a1").outbox == {}  # only the round can tell job 1's outcome
    h.now = 10.0
    h.connect("a1")
    h.deliver_to_controller("a1")
    assert h.controller.sessions["a1"].round is not None  # armed: the agent runs jobs we do not place there
    h.pump()

    rec = h.job("1")
    assert (rec.state, rec.exit_code, rec.finished_at, rec.started_at) == (JobState.FAILED, 6, 4.0, 1.0)
    assert [type(f) for f in h.log[2:]] == [F.AgentRegistered, F.JobAdopted, F.JobFinished, F.JobAdopted]
    assert h.controller.placed_on("a1") == {"2": 1}
    assert h.controller.state.agents["a1"].used == 1
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_req_4_7_unqueried_extras_follow_the_same_precedence_rules() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    done = h.run_jobs(1, "a1")[0]
    h.send_to_controller("a1", M.Finished(job=done, attempt=1, exit_code=0, signal=None, finished_at=1.0))
    elsewhere = h.run_jobs(1, "a2")[0]
    queried = h.run_jobs(1, "a1")[0]
    tok = _open_round(h)
    before, log_len = h.controller.state.digest(), len(h.log)

    commands = _report(h, tok, _running(queried),
                       _finished(done, code=1, at=50.0),  # terminal already: no-op
                       _finished(elsewhere, code=0, at=2.0),  # current attempt placed on a2: stale
                       _running("999"))  # never existed: nothing invented (its id is reserved, its process killed)

    assert h.controller.state.digest()[2:] == before[2:] and h.log[log_len:] == [F.JobIdsReserved(upto=999)]
    assert ("999", 1) in [(m.job, m.attempt) for m in sends_of(commands, M.Kill)]
    assert h.job(elsewhere).state is JobState.RUNNING and h.job(elsewhere).agent == "a2"
    assert "999" not in h.controller.state.jobs
    assert h.controller.node_state("a1") == NodeState.MIXED  # the round resolved


def test_req_4_8_unqueried_running_extra_is_assigned_to_the_reporter() -> None:
    h = Harness(records=[LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.RUNNING, started_at=3.0)])
    _lost_dispatch_controller(h)
    h.now = 10.0
    h.join("a1")

    rec = h.job("1")
    assert (rec.state, rec.agent, rec.attempt, rec.started_at) == (JobState.RUNNING, "a1", 1, 3.0)
    assert h.controller.placed_on("a1") == {"1": 1}
    assert h.controller.state.agents["a1"].used == 1
    assert h.scheduler.view()[0] == ("2",)  # no longer pending for the scheduler
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_req_4_8_extra_running_elsewhere_is_not_reassigned() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    job = h.run_jobs(1, "a2")[0]
    h.run_jobs(1, "a1")
    tok = _open_round(h)
    before = h.controller.state.digest()

    commands = _report(h, tok, _running("2"), _running(job))

    assert h.controller.state.digest() == before
    assert h.job(job).agent == "a2"
    assert [(k.job, k.attempt) for k in sends_of(commands, M.Kill)] == [(job, 1)]
