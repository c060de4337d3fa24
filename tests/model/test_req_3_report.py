"""Requirement 3: Worker Job-Status Report (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, sends_of, spec, token

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, LocalStatus, SessionState
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState


def _report_on_rejoin(h: Harness, name: str = "a1") -> list[M.ReportEntry]:
    """Rejoin and return the whole report the agent sends (not yet delivered)."""
    if h.agents[name].conn is not None:
        h.disconnect(name)
    h.connect(name)
    h.deliver_to_controller(name, 1)
    commands = h.deliver_to_agent(name)
    return [e for r in sends_of(commands, M.ResyncReport) for e in r.entries]


def _by_key(entries: list[M.ReportEntry]) -> dict[tuple[str, int], M.ReportEntry]:
    out = {(e.job, e.attempt): e for e in entries}
    assert len(out) == len(entries), "no (job, attempt) is reported twice"
    return out


def _answer(agent: Agent, jobs: list[tuple[str, int]], now: float, tok: bytes = token(7)) -> list[M.ReportEntry]:
    """Drive a bare agent through a join-armed round with one query page."""
    agent.handle(E.Connected(now=now))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=1, token=tok, query_pages=1), now=now))
    commands = agent.handle(E.MessageFromController(
        message=M.ResyncQuery(seq=2, token=tok, page=0, pages=1, jobs=tuple(jobs)), now=now))
    return [e for r in sends_of(commands, M.ResyncReport) for e in r.entries]


def test_req_3_1_report_gives_one_of_the_four_statuses() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(5)
    h.disconnect("a1")
    h.exit("a1", ids[1], exit_code=0, finished_at=3.0)
    h.exit("a1", ids[2], exit_code=7, finished_at=4.0)
    h.exit("a1", ids[3], exit_code=None, signal=9, finished_at=5.0)
    h.agent("a1").records.pop((ids[4], 1))  # never heard of it

    entries = _by_key(_report_on_rejoin(h))

    assert entries[(ids[0], 1)].status is M.EntryStatus.RUNNING
    ok, failed, killed = entries[(ids[1], 1)], entries[(ids[2], 1)], entries[(ids[3], 1)]
    assert (ok.status, ok.exit_code, ok.signal) == (M.EntryStatus.FINISHED, 0, None)
    assert (failed.status, failed.exit_code, failed.signal) == (M.EntryStatus.FINISHED, 7, None)
    assert (killed.status, killed.exit_code, killed.signal) == (M.EntryStatus.FINISHED, None, 9)
    assert entries[(ids[4], 1)].status is M.EntryStatus.UNRECOGNIZED


def test_req_3_1_unrecognized_entry_carries_no_outcome() -> None:
    entries = _answer(Agent(AgentConfig(name="a1", slots=1)), [("9", 3)], now=1.0)
    assert entries == [M.ReportEntry(job="9", attempt=3, status=M.EntryStatus.UNRECOGNIZED)]


def test_req_3_2_report_covers_every_queried_job_across_query_pages() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=3), slots=100, page_size=4)
    h.join("a1")
    ids = h.run_jobs(20)
    for job in ids[::3]:
        h.exit("a1", job, exit_code=1)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    queries = [m for m in h.agents["a1"].inbox if isinstance(m, M.ResyncQuery)]
    assert len(queries) == 7  # 20 jobs, 3 per page

    commands = h.deliver_to_agent("a1")
    entries = _by_key([e for r in sends_of(commands, M.ResyncReport) for e in r.entries])

    queried = {p for q in queries for p in q.jobs}
    assert queried == {(j, 1) for j in ids}
    assert queried <= set(entries)


def test_req_3_2_controller_refuses_report_that_omits_a_queried_job() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    tok = h.controller.sessions["a1"].round.token
    before, log_len = h.controller.state.digest(), len(h.log)

    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=(
        M.ReportEntry(job=ids[0], attempt=1, status=M.EntryStatus.FINISHED, exit_code=0, finished_at=1.0),)))

    errors = sends_of(commands, M.Error)
    assert len(errors) == 1 and errors[0].fatal and "no entry for queried job" in errors[0].reason
    assert any(isinstance(c, E.Close) for c in commands)
    assert h.controller.state.digest() == before and len(h.log) == log_len
    assert h.controller.node_state("a1") == NodeState.DISCONNECTED


def test_req_3_3_indeterminate_process_is_reported_unrecognized() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.disconnect("a1")
    h.lose("a1", ids[0])
    assert h.agent("a1").records[(ids[0], 1)].status is LocalStatus.INDETERMINATE

    entries = _by_key(_report_on_rejoin(h))

    e = entries[(ids[0], 1)]
    assert e.status is M.EntryStatus.UNRECOGNIZED
    assert (e.exit_code, e.signal, e.finished_at) == (None, None, None)
    assert (ids[0], 1) not in h.agent("a1").records  # told once, then forgotten


def test_req_3_3_indeterminate_after_agent_restart_is_reported_unrecognized() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.restart_agent("a1")
    h.lose("a1", job)  # the restarted agent finds no supervisor status
    h.now = 5.0
    h.join("a1")
    assert h.job(job).state is JobState.PENDING and h.job(job).exit_code is None


def test_req_3_3_process_lost_while_operating_reaches_the_controller() -> None:
    """An indeterminate attempt must not sit RUNNING forever behind matching heartbeats."""
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.lose("a1", job)
    for t in range(1, 10):
        h.now = float(t)
        h.tick("a1")
        h.pump()
    assert h.job(job).state is JobState.PENDING
    assert h.job(job).attempt == 2 and h.job(job).exit_code is None
    assert h.controller.node_state("a1") == NodeState.IDLE


def test_req_3_4_report_outcome_equals_the_completion_report() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.disconnect("a1")
    h.start("a1", ids[0], started_at=1.5)
    h.exit("a1", ids[0], exit_code=42, finished_at=8.25)
    h.exit("a1", ids[1], exit_code=None, signal=15, finished_at=9.5)
    outbox = h.agents["a1"].durable_outbox

    entries = _by_key(_report_on_rejoin(h))

    for job in ids:
        report, entry = outbox[(job, 1)], entries[(job, 1)]
        assert (entry.exit_code, entry.signal, entry.finished_at, entry.started_at) == (
            report.exit_code, report.signal, report.finished_at, report.started_at)
    assert entries[(ids[0], 1)].started_at == 1.5


def test_req_3_5_report_carries_the_actual_finish_time() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.now = 12.0
    h.exit("a1", job, exit_code=0)  # finished_at defaults to now = 12.0
    h.now = 500.0

    entry = _by_key(_report_on_rejoin(h))[(job, 1)]

    assert entry.finished_at == 12.0


def test_req_3_6_report_includes_unqueried_running_and_recently_finished_jobs() -> None:
    agent = Agent(AgentConfig(name="a1", slots=4), records=[
        LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.RUNNING, started_at=1.0),
        LocalJob(job="2", attempt=1, spec=spec(), status=LocalStatus.FINISHED, exit_code=0, finished_at=90.0,
                 acked=True),
        LocalJob(job="3", attempt=2, spec=spec(), status=LocalStatus.RUNNING),
    ])

    entries = _by_key(_answer(agent, [("3", 2)], now=100.0))

    assert set(entries) == {("1", 1), ("2", 1), ("3", 2)}
    assert entries[("1", 1)].status is M.EntryStatus.RUNNING and entries[("1", 1)].started_at == 1.0
    assert entries[("2", 1)].status is M.EntryStatus.FINISHED and entries[("2", 1)].finished_at == 90.0


def test_req_3_6_indeterminate_unqueried_record_is_not_reported_as_extra() -> None:
    agent = Agent(AgentConfig(name="a1", slots=4), records=[
        LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.INDETERMINATE)])
    assert _answer(agent, [], now=1.0) == []


def test_req_3_7_recent_window_is_configurable_and_bounds_extras() -> None:
    def records() -> list[LocalJob]:
        return [LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.FINISHED, exit_code=0,
                         finished_at=10.0, acked=True)]

    inside = _answer(Agent(AgentConfig(name="a1", slots=1, recent_window=60.0), records=records()), [], now=69.0)
    outside = _answer(Agent(AgentConfig(name="a1", slots=1, recent_window=60.0), records=records()), [], now=71.0)
    wider = _answer(Agent(AgentConfig(name="a1", slots=1, recent_window=600.0), records=records()), [], now=71.0)

    assert [(e.job, e.attempt) for e in inside] == [("1", 1)]
    assert outside == []
    assert [(e.job, e.attempt) for e in wider] == [("1", 1)]


def test_req_3_7_unacked_outcome_is_reported_even_outside_the_window() -> None:
    agent = Agent(AgentConfig(name="a1", slots=1, recent_window=5.0), records=[
        LocalJob(job="1", attempt=1, spec=spec(), status=LocalStatus.FINISHED, exit_code=3, finished_at=1.0)])
    entries = _answer(agent, [], now=10_000.0)
    assert [(e.job, e.exit_code) for e in entries] == [("1", 3)]


def test_req_3_7_acked_records_older_than_the_window_are_pruned() -> None:
    h = Harness(recent_window=60.0)
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.exit("a1", job, finished_at=0.0)
    h.pump()
    assert h.agent("a1").records[(job, 1)].acked
    h.now = 59.0
    h.tick("a1")
    assert (job, 1) in h.agent("a1").records
    h.now = 61.0
    h.tick("a1")
    assert (job, 1) not in h.agent("a1").records and (job, 1) not in h.agents["a1"].durable_records


def test_req_3_8_normal_work_waits_until_the_report_is_sent() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=2), page_size=2)
    h.join("a1")
    ids = h.run_jobs(5)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)  # Welcome + 3 query pages in flight
    h.deliver_to_agent("a1", 2)  # Welcome and the first query page only
    agent = h.agent("a1")
    assert agent.session is SessionState.RESYNCING
    sent_before = len(h.agents["a1"].sent)

    h.now = 50.0
    h.tick("a1")  # a heartbeat would be due
    h.start("a1", ids[0], started_at=49.0)
    h.exit("a1", ids[1], exit_code=1)

    assert len(h.agents["a1"].sent) == sent_before, "nothing is sent while the report is incomplete"
    assert (ids[1], 1) in h.agents["a1"].durable_outbox  # but the outcome is durable already

    h.deliver_to_agent("a1")  # the remaining query pages: the report goes out
    sent = h.agents["a1"].sent[sent_before:]
    kinds = [type(m).__name__ for m in sent]
    assert kinds[:3] == ["ResyncReport"] * 3
    # The report carries the completion made meanwhile; it is not sent again on its own.
    assert "ResyncReport" not in kinds[3:] and "Finished" not in kinds[3:]
    assert agent.session is SessionState.OPERATING
    h.tick("a1")
    assert isinstance(h.agents["a1"].sent[-1], M.Heartbeat)
    h.pump()  # the round resolves: its ResyncDone acknowledges the reported completion
    assert h.job(ids[1]).exit_code == 1 and agent.outbox == {} and h.agents["a1"].durable_outbox == {}
    assert not any(isinstance(m, M.Finished) for m in h.agents["a1"].sent[sent_before:])


def test_req_3_8_heartbeat_armed_round_also_holds_work_back() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.agent("a1").records.pop((ids[0], 1))
    h.now = 5.0
    h.tick("a1")
    h.deliver_to_controller("a1")  # heartbeat disagrees: a round is armed, the query is in flight
    assert h.controller.node_state("a1") == NodeState.RECONCILING
    # Deliver nothing yet; the agent is still operating and may report.
    h.exit("a1", ids[1], exit_code=0)
    assert isinstance(h.agents["a1"].sent[-1], M.Finished)
    # Once the query page arrives, the report precedes any further work.
    commands = h.deliver_to_agent("a1")
    sends = sends_of(commands)
    assert isinstance(sends[0], M.ResyncReport)
    h.pump()
    assert h.job(ids[0]).state is JobState.PENDING
    assert h.job(ids[1]).state is JobState.COMPLETED
    assert h.controller.node_state("a1") == NodeState.IDLE
