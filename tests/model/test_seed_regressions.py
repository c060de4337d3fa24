"""One regression test per bug story of seeds 000 and 002.

Each test rebuilds the story's shape and asserts exact numbers (fact deltas,
page counts, application counts), so a duplicate or a drop cannot hide behind
an idempotent end state.
"""

from __future__ import annotations

from dataclasses import replace

from tests.model.harness import Harness, facts_of, notes_of, sends_of, spec

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import AgentConfig, LocalStatus
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.scheduler import AgentNote
from reckon.model.state import replay
from reckon.model.nodes import NodeState

# ---- seed 000: the completion report dropped after 3 tries --------------------------


def _finished_send_times(h: Harness, name: str, until: float, step: float = 0.5) -> list[float]:
    """Tick until ``until``; every message is lost in transit.  When was Finished sent?"""
    times = []
    while h.now < until:
        h.now += step
        if any(isinstance(m, M.Finished) for m in sends_of(h.tick(name))):
            times.append(h.now)
        h.agents[name].outbox_wire.clear()
    return times


def test_seed000_completion_retried_with_capped_backoff_never_dropped() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.now = 100.0
    first = sends_of(h.exit("a1", job, exit_code=0, finished_at=99.5), M.Finished)
    assert len(first) == 1  # sent at once
    h.agents["a1"].outbox_wire.clear()  # ...and lost: the controller is unreachable

    times = _finished_send_times(h, "a1", until=100.0 + 2 * 3600)  # a two-hour outage

    gaps = [b - a for a, b in zip([100.0] + times, times)]
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]  # 1 s doubling...
    assert set(gaps[5:]) == {30.0}  # ...capped at 30 s, for as long as it takes
    assert len(times) > 200
    assert (job, 1) in h.agent("a1").outbox and (job, 1) in h.agents["a1"].durable_outbox

    # The controller hears it at last: one fact, one ack, the outbox is empty.
    log_len = len(h.log)
    h.now += 30.0
    h.tick("a1")
    h.pump()
    assert len(h.log) - log_len == 1
    assert (h.job(job).state, h.job(job).finished_at) == (JobState.COMPLETED, 99.5)
    assert h.agent("a1").outbox == {} and h.agents["a1"].durable_outbox == {}


def test_seed000_backoff_jitter_stays_within_a_quarter_of_the_delay() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.exit("a1", job, exit_code=0)
    entry = h.agent("a1").outbox[(job, 1)]
    h.agents["a1"].outbox_wire.clear()
    delays = []
    for _ in range(8):
        due = entry.next_at
        delay = entry.delay
        h.now = due
        h.tick("a1", jitter=0.99)
        h.agents["a1"].outbox_wire.clear()
        delays.append((entry.next_at - due) / delay)
    assert all(1.0 <= d < 1.25 for d in delays)
    assert entry.delay == 30.0


def test_seed000_completion_survives_a_long_outage_and_an_agent_restart() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    h.crash_controller()  # the controller is down: every connection is gone
    h.now = 50.0
    h.exit("a1", ids[0], exit_code=0, finished_at=50.0)
    h.exit("a1", ids[1], exit_code=4, finished_at=51.0)
    assert h.agents["a1"].sent[-1].TYPE != "finished"  # nothing to send to while disconnected
    h.now = 3_600.0
    h.tick("a1")
    h.restart_agent("a1")  # and the agent restarts in the middle of the outage
    assert set(h.agent("a1").outbox) == {(ids[0], 1), (ids[1], 1)}
    log_len = len(h.log)

    h.join("a1")

    assert [(h.job(j).state, h.job(j).exit_code, h.job(j).finished_at) for j in ids] == [
        (JobState.COMPLETED, 0, 50.0), (JobState.FAILED, 4, 51.0), (JobState.RUNNING, None, None)]
    assert [type(f) for f in h.log[log_len:]] == [F.JobFinished, F.JobFinished]  # exactly two, once each
    assert h.agent("a1").outbox == {} and h.agents["a1"].durable_outbox == {}


def test_seed000_duplicate_and_late_reports_are_acked_idempotently() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    report = M.Finished(job=job, attempt=1, exit_code=0, signal=None, finished_at=1.0)
    outcomes, deltas = [], []
    for msg in (report, report, M.Finished(job="404", attempt=1, exit_code=0, signal=None, finished_at=1.0)):
        log_len = len(h.log)
        commands = h.send_to_controller("a1", msg)
        outcomes.append(sends_of(commands, M.Ack)[0].outcome)
        deltas.append(len(h.log) - log_len)
    assert outcomes == [M.AckOutcome.APPLIED, M.AckOutcome.ALREADY_TERMINAL, M.AckOutcome.UNKNOWN_JOB]
    assert deltas == [1, 0, 1]  # the unknown id is reserved (JobIdsReserved), nothing else


# ---- seed 002: a failed job's exit code lost after replay ------------------------------


def test_seed002_failed_exit_code_survives_replay() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    h.exit("a1", ids[0], exit_code=3, finished_at=5.0)
    h.exit("a1", ids[1], exit_code=None, signal=9, finished_at=6.0)
    h.exit("a1", ids[2], exit_code=-2, finished_at=7.0)
    h.pump()
    live = [(h.job(j).state, h.job(j).exit_code, h.job(j).signal) for j in ids]
    assert live == [(JobState.FAILED, 3, None), (JobState.FAILED, None, 9), (JobState.FAILED, -2, None)]
    digest = h.controller.state.digest()

    h.crash_controller()  # replays the log through encode/decode

    assert [(h.job(j).state, h.job(j).exit_code, h.job(j).signal) for j in ids] == live
    assert h.controller.state.digest() == digest


def test_seed002_v1_job_finished_with_negative_exit_code_decodes_to_signal() -> None:
    stored = [
        F.encode(F.JobSubmitted(job="1", spec=spec(), submitted_at=0.0)),
        F.encode(F.JobDispatched(job="1", attempt=1, agent="a1")),
        {"k": "job_finished", "v": 1, "job": "1", "attempt": 1, "exit_code": -9, "finished_at": 8.0},
        F.encode(F.JobSubmitted(job="2", spec=spec(), submitted_at=0.0)),
        F.encode(F.JobDispatched(job="2", attempt=1, agent="a1")),
        {"k": "job_finished", "v": 1, "job": "2", "attempt": 1, "exit_code": 3, "finished_at": 9.0},
    ]
    facts = [F.decode(d) for d in stored]
    assert facts[2] == F.JobFinished(job="1", attempt=1, exit_code=None, signal=9, finished_at=8.0)
    assert facts[5] == F.JobFinished(job="2", attempt=1, exit_code=3, signal=None, finished_at=9.0)

    state = replay(facts)

    assert (state.jobs["1"].state, state.jobs["1"].exit_code, state.jobs["1"].signal) == (JobState.FAILED, None, 9)
    assert (state.jobs["2"].state, state.jobs["2"].exit_code, state.jobs["2"].signal) == (JobState.FAILED, 3, None)
    assert F.encode(facts[2])["v"] == F.JobFinished.VERSION  # re-encoded at the current version


# ---- seed 002: a finish time replaced by processing time -------------------------------


def test_seed002_finish_time_kept_via_completion_report() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.now = 12.5
    h.exit("a1", job, exit_code=0)
    h.agents["a1"].outbox_wire.clear()  # lost; retried much later
    h.now = 1_000.0
    h.tick("a1")
    h.pump()
    assert h.job(job).finished_at == 12.5
    h.crash_controller()
    assert h.job(job).finished_at == 12.5


def test_seed002_finish_time_kept_via_resync() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.now = 12.5
    h.exit("a1", job, exit_code=1)
    h.now = 1_000.0
    h.join("a1")
    assert any(isinstance(m, M.ResyncReport) for m in h.agents["a1"].sent)
    assert (h.job(job).finished_at, h.job(job).exit_code) == (12.5, 1)
    h.crash_controller()
    assert h.job(job).finished_at == 12.5


# ---- seed 002: the scheduler's view stuck in RECONCILING ----------------------------------


def _reconciling_notes(commands: list[E.Command]) -> list[bool]:
    return [n.reconciling for n in notes_of(commands) if isinstance(n, AgentNote) and n.agent == "a1"]


def test_seed002_scheduler_not_stuck_reconciling_after_round_resolved() -> None:
    h = Harness(slots=4)
    h.join("a1")
    ids = h.run_jobs(4)
    h.disconnect("a1")
    for job in ids:
        h.exit("a1", job, exit_code=0)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    assert h.scheduler.view()[1]["a1"] == (4, 4, False)
    h.deliver_to_agent("a1")

    commands = h.deliver_to_controller("a1", 1)  # the report: the round resolves

    assert _reconciling_notes(commands)[-1] is False
    assert h.scheduler.view()[1]["a1"] == (4, 0, True)  # not frozen at used=4
    h.assert_views_agree()
    new = h.submit(4)
    assert [a for _, a in h.schedule()] == ["a1"] * 4 and all(h.job(j).agent == "a1" for j in new)


def test_seed002_reconciling_cleared_for_every_way_a_round_ends() -> None:
    for ending in ("deadline", "disconnect", "superseded"):
        h = Harness()
        h.join("a1")
        h.run_jobs(1)
        h.disconnect("a1")
        h.connect("a1")
        h.deliver_to_controller("a1", 1)
        assert h.controller.node_state("a1") == NodeState.RECONCILING
        if ending == "deadline":
            commands = h.expire_round("a1")
        elif ending == "disconnect":
            conn = h.agents["a1"].conn
            h._cut("a1")
            commands = h.controller_handle(E.ConnectionClosed(conn=conn, now=h.now))
        else:
            h._cut("a1")
            h.connect("a1")
            commands = h.deliver_to_controller("a1", 1)  # a new round replaces the old one
        assert False in _reconciling_notes(commands), ending
        h.assert_views_agree()


# ---- seed 002: the query that never paginated ---------------------------------------------


def test_seed002_query_and_report_both_paginate() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=100), page_size=100, slots=5_000)
    h.join("a1")
    ids = h.run_jobs(1042)
    h.disconnect("a1")
    finished = ids[::2]
    for job in finished:
        h.exit("a1", job, exit_code=int(job) % 2, finished_at=float(job))
    h.connect("a1")

    joined = h.deliver_to_controller("a1", 1)
    queries = sends_of(joined, M.ResyncQuery)
    answered = h.deliver_to_agent("a1")
    reports = sends_of(answered, M.ResyncReport)
    log_len = len(h.log)
    applied = h.deliver_to_controller("a1", len(reports))

    for pages in (queries, reports):
        assert len(pages) == 11
        assert [p.page for p in pages] == list(range(11)) and {p.pages for p in pages} == {11}
    assert [len(q.jobs) for q in queries] == [100] * 10 + [42]
    assert [len(r.entries) for r in reports] == [100] * 10 + [42]
    asked = [p for q in queries for p in q.jobs]
    told = [(e.job, e.attempt) for r in reports for e in r.entries]
    assert len(set(asked)) == len(asked) == 1042 and set(asked) == {(j, 1) for j in ids}
    assert len(set(told)) == len(told) == 1042 and set(told) == set(asked)
    assert len(h.log) - log_len == len(finished) == 521  # exactly one fact per finished job
    job_notes = [n for n in notes_of(applied) if getattr(n, "job", None) in set(finished)]
    assert len(job_notes) == 521
    assert all(h.job(j).finished_at == float(j) for j in finished)
    assert h.controller.state.agents["a1"].used == 521


# ---- seed 002: a stale allocation carried into the next dispatch ------------------------------


def test_seed002_requeue_releases_the_allocation_before_the_next_dispatch() -> None:
    h = Harness(["a1", "a2"], slots=4)
    h.join("a1")
    job = h.run_jobs(1, "a1", slots=3)[0]
    assert h.controller.state.agents["a1"].used == 3
    h.disconnect("a1")
    h.agent("a1").records.clear()  # the agent lost the attempt
    h.join("a1")  # unrecognized: requeued
    assert h.job(job).state is JobState.PENDING and h.job(job).agent is None
    assert (h.controller.state.agents["a1"].used, h.controller.state.agents["a1"].running) == (0, set())

    h.join("a2")
    h.dispatch(job, "a2")
    h.pump()
    a1, a2 = h.controller.state.agents["a1"], h.controller.state.agents["a2"]
    assert (a1.used, a1.running, a2.used, a2.running) == (0, set(), 3, {job})
    assert h.job(job).attempt == 2 and h.agent("a2").records[(job, 2)].status is LocalStatus.RUNNING
    h.assert_views_agree()
    big = h.submit(1, slots=4)[0]
    assert h.schedule() == [(big, "a1")]  # a1's full capacity is free again


def test_seed002_lost_agent_requeue_releases_the_allocation() -> None:
    h = Harness(controller_config=ControllerConfig(lost_after=60.0), slots=4)
    h.join("a1")
    job = h.run_jobs(1, slots=4)[0]
    h.disconnect("a1")
    h.now = 61.0
    h.tick_controller()
    assert h.controller.node_state("a1") == NodeState.LOST
    assert h.job(job).state is JobState.PENDING and h.controller.state.agents["a1"].used == 0
    h.assert_replay_agrees()
    h.assert_views_agree()


# ---- seed 002: the extra-job guard that regressed a terminal job ------------------------------


def test_seed002_terminal_job_reported_as_extra_stays_exactly_unchanged() -> None:
    h = Harness()
    h.join("a1")
    done, running = h.run_jobs(2)
    h.exit("a1", done, exit_code=0, finished_at=5.0)
    h.pump()
    before = h.job(done).snapshot_key()
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    rnd = h.controller.sessions["a1"].round
    assert set(rnd.queried) == {running}  # the finished job is an unqueried extra
    log_len = len(h.log)

    commands = h.send_to_controller("a1", M.ResyncReport(token=rnd.token, page=0, pages=1, entries=(
        M.ReportEntry(job=running, attempt=1, status=M.EntryStatus.RUNNING),
        M.ReportEntry(job=done, attempt=1, status=M.EntryStatus.FINISHED, exit_code=1, finished_at=999.0),
    )))

    assert h.job(done).snapshot_key() == before
    assert h.job(done).state is JobState.COMPLETED and h.job(done).finished_at == 5.0
    assert facts_of(commands) == [] and len(h.log) == log_len
    assert h.controller.placed_on("a1") == {running: 1}


def test_seed002_terminal_job_reported_running_is_not_regressed_to_running() -> None:
    h = Harness()
    h.join("a1")
    done, running = h.run_jobs(2)
    h.send_to_controller("a1", M.Finished(job=done, attempt=1, exit_code=2, signal=None, finished_at=5.0))
    before = h.job(done).snapshot_key()
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    tok = h.controller.sessions["a1"].round.token
    log_len = len(h.log)

    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=(
        M.ReportEntry(job=running, attempt=1, status=M.EntryStatus.RUNNING),
        M.ReportEntry(job=done, attempt=1, status=M.EntryStatus.RUNNING, started_at=1.0),
    )))

    assert h.job(done).snapshot_key() == before and len(h.log) == log_len
    assert [(k.job, k.attempt) for k in sends_of(commands, M.Kill)] == [(done, 1)]


# ---- seed 002: a reassembled report applied twice --------------------------------------------


def test_seed002_reassembled_report_is_applied_exactly_once() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=3), page_size=3)
    h.join("a1")
    ids = h.run_jobs(8)
    h.disconnect("a1")
    for job in ids[:5]:
        h.exit("a1", job, exit_code=0, finished_at=1.0)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    pages = [m for m in h.agents["a1"].outbox_wire if isinstance(m, M.ResyncReport)]
    assert len(pages) == 3
    tok = pages[0].token
    log_len = len(h.log)

    # Every page twice, the last one three times, and the whole report again afterwards.
    for page in pages[:2] + pages[:2] + [pages[2]] * 3 + pages:
        h.send_to_controller("a1", page)

    assert h.controller.applied_rounds.count(tok) == 1
    assert len(h.log) - log_len == 5
    assert [h.job(j).state for j in ids] == [JobState.COMPLETED] * 5 + [JobState.RUNNING] * 3


# ---- seed 002: 6 of 7 finish reports lost in a burst (bug-1741) --------------------------------


def test_seed002_burst_six_of_seven_lost_recovered_by_one_round() -> None:
    h = Harness(slots=8)
    h.join("a1")
    ids = h.run_jobs(7)
    h.now = 20.0
    # The burst: the 7th report gets through, the other six are lost with the connection.
    h.exit("a1", ids[6], exit_code=0, finished_at=10.6)
    h.pump()
    assert h.job(ids[6]).state is JobState.COMPLETED
    h.exit("a1", ids[0], exit_code=0, finished_at=10.0)
    h.exit("a1", ids[1], exit_code=0, finished_at=10.1)
    h.exit("a1", ids[2], exit_code=0, finished_at=10.2)
    h.exit("a1", ids[3], exit_code=0, finished_at=10.3)
    h.exit("a1", ids[4], exit_code=0, finished_at=10.4)
    h.exit("a1", ids[5], exit_code=137, finished_at=10.5)
    lost, _ = h.disconnect("a1")
    assert sum(isinstance(m, M.Finished) for m in lost) == 6
    assert all(h.job(j).state is JobState.RUNNING for j in ids[:6])
    # The already-done job's local record carries a deliberately wrong finish time.
    record = h.agent("a1").records[(ids[6], 1)]
    h.agent("a1").records[(ids[6], 1)] = replace(record, finished_at=19.0, exit_code=1)
    done_before = h.job(ids[6]).snapshot_key()
    log_len = len(h.log)
    h.now = 30.0

    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    reports = [m for m in h.agents["a1"].outbox_wire if isinstance(m, M.ResyncReport)]
    assert len(reports) == 1 and len(reports[0].entries) == 7  # 6 queried + the done job as an extra
    round_commands = h.deliver_to_controller("a1", 1)

    assert len(facts_of(round_commands)) == 6  # exactly +6, not >= 6
    assert len(h.log) - log_len == 6
    h.pump()  # the outbox flush that follows adds nothing
    assert len(h.log) - log_len == 6
    assert [(h.job(j).state, h.job(j).exit_code, h.job(j).finished_at) for j in ids[:6]] == [
        (JobState.COMPLETED, 0, 10.0), (JobState.COMPLETED, 0, 10.1), (JobState.COMPLETED, 0, 10.2),
        (JobState.COMPLETED, 0, 10.3), (JobState.COMPLETED, 0, 10.4), (JobState.FAILED, 137, 10.5)]
    assert h.job(ids[6]).snapshot_key() == done_before
    assert len(h.controller.applied_rounds) == 1
    assert h.agent("a1").outbox == {}
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_seed002_lost_finish_recovered_after_controller_failover() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.now = 5.0
    h.exit("a1", job, exit_code=2, finished_at=5.0)
    h.agents["a1"].outbox_wire.clear()  # the fire-and-forget notify is lost
    h.crash_controller()  # and the controller fails over before any retry
    h.agent("a1").outbox.clear()  # even with no outbox at all, the round recovers it
    h.now = 60.0
    log_len = len(h.log)

    h.join("a1")

    assert (h.job(job).state, h.job(job).exit_code, h.job(job).finished_at) == (JobState.FAILED, 2, 5.0)
    assert [type(f) for f in h.log[log_len:]] == [F.JobFinished]
    assert h.controller.applied_rounds != []


def test_seed002_agent_config_window_is_the_extra_report_bound() -> None:
    """The recently-finished window is a configuration knob, not a constant."""
    assert AgentConfig(name="a", slots=1).recent_window == 300.0
    assert AgentConfig(name="a", slots=1, recent_window=5.0).recent_window == 5.0


def test_lost_after_covers_agents_known_only_from_the_log():
    """After a controller restart, an agent that never comes back is still declared lost."""
    from reckon.model import events as E
    from reckon.model import facts as F
    from reckon.model.controller import Controller, ControllerConfig
    from reckon.model.jobs import JobSpec, JobState

    log = [
        F.AgentRegistered(agent="gone", slots=2),
        F.JobSubmitted(job="1", spec=JobSpec(name="x", command=("true",)), submitted_at=1.0),
        F.JobDispatched(job="1", attempt=1, agent="gone"),
    ]
    controller = Controller.from_log(log, ControllerConfig(lost_after=10.0))
    assert controller.handle(E.Tick(now=100.0)) == []  # the silence starts counting here
    controller.handle(E.Tick(now=105.0))
    assert controller.state.jobs["1"].state is JobState.RUNNING
    commands = controller.handle(E.Tick(now=111.0))
    job = controller.state.jobs["1"]
    assert job.state is JobState.PENDING and job.attempt == 2
    assert any(isinstance(c, E.Append) for c in commands)
    assert controller.node_state("gone") == NodeState.LOST
