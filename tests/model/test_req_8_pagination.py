"""Requirement 8: Bounded Job-State Exchange Size (seed 001)."""

from __future__ import annotations

import pytest
from tests.model.harness import Harness, facts_of, sends_of, spec

from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import LocalJob, LocalStatus
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState


def _paged(query: int, report: int, slots: int = 10_000) -> Harness:
    return Harness(controller_config=ControllerConfig(page_size=query), page_size=report, slots=slots)


def test_req_8_1_query_spans_as_many_pages_as_needed() -> None:
    h = _paged(query=4, report=1000)
    h.join("a1")
    ids = h.run_jobs(25)
    h.disconnect("a1")
    h.connect("a1")
    commands = h.deliver_to_controller("a1", 1)

    welcome = sends_of(commands, M.Welcome)[0]
    queries = sends_of(commands, M.ResyncQuery)
    assert welcome.query_pages == 7 == len(queries)
    assert [q.page for q in queries] == list(range(7)) and {q.pages for q in queries} == {7}
    assert [len(q.jobs) for q in queries] == [4] * 6 + [1]
    pairs = [p for q in queries for p in q.jobs]
    assert len(pairs) == len(set(pairs)) == 25 and set(pairs) == {(j, 1) for j in ids}
    assert all(len(q.jobs) <= 4 for q in queries)


@pytest.mark.parametrize("count", [1, 5, 6, 17])
def test_req_8_1_reconciliation_completes_whatever_the_job_count(count: int) -> None:
    h = _paged(query=5, report=3)
    h.join("a1")
    ids = h.run_jobs(count)
    h.disconnect("a1")
    for job in ids[::2]:
        h.exit("a1", job, exit_code=int(job) % 3, finished_at=float(job))
    log_len = len(h.log)

    h.join("a1")

    finished = ids[::2]
    assert len(h.log) - log_len == len(finished)
    for job in ids:
        rec = h.job(job)
        if job in finished:
            assert rec.terminal and rec.exit_code == int(job) % 3 and rec.finished_at == float(job)
        else:
            assert rec.state is JobState.RUNNING
    assert h.controller.node_state("a1") in (NodeState.MIXED, NodeState.BUSY, NodeState.IDLE)
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_req_8_2_report_spans_pages_including_unqueried_extras() -> None:
    h = _paged(query=1000, report=3)
    h.join("a1")
    ids = h.run_jobs(10)
    extras = h.submit(4)  # pending at the controller, but the agent runs them (placement lost)
    h.disconnect("a1")
    for job in extras:
        h.agent("a1").records[(job, 1)] = LocalJob(job=job, attempt=1, spec=spec(), status=LocalStatus.RUNNING)
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    commands = h.deliver_to_agent("a1")

    reports = sends_of(commands, M.ResyncReport)
    assert [r.page for r in reports] == list(range(5)) and {r.pages for r in reports} == {5}
    assert [len(r.entries) for r in reports] == [3, 3, 3, 3, 2]
    keys = [(e.job, e.attempt) for r in reports for e in r.entries]
    assert len(keys) == len(set(keys)) == 14 and set(keys) == {(j, 1) for j in ids + extras}

    h.pump()
    assert all(h.job(j).state is JobState.RUNNING and h.job(j).agent == "a1" for j in ids + extras)
    assert sum(isinstance(f, F.JobAdopted) for f in h.log) == 4


def test_req_8_3_report_pages_out_of_order_assemble_exactly_once() -> None:
    h = _paged(query=2, report=2)
    h.join("a1")
    ids = h.run_jobs(7)
    h.disconnect("a1")
    for job in ids:
        h.exit("a1", job, exit_code=1, finished_at=10.0 + int(job))
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    wire = h.agents["a1"].outbox_wire
    reports = [m for m in wire if isinstance(m, M.ResyncReport)]
    assert len(reports) == 4
    wire[:len(reports)] = reversed(reports)
    log_len = len(h.log)

    applied = [facts_of(h.deliver_to_controller("a1", 1)) for _ in reports]

    assert [len(a) for a in applied] == [0, 0, 0, 7]  # nothing before the whole report is in
    assert len(h.log) - log_len == 7
    assert [h.job(j).finished_at for j in ids] == [10.0 + int(j) for j in ids]
    assert len(h.controller.applied_rounds) == 1


def test_req_8_3_page_count_disagreement_is_refused_without_change() -> None:
    h = _paged(query=2, report=2)
    h.join("a1")
    ids = h.run_jobs(4)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    tok = h.controller.sessions["a1"].round.token
    running = [M.ReportEntry(job=j, attempt=1, status=M.EntryStatus.RUNNING) for j in ids]
    h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=3, entries=tuple(running[:2])))
    before, log_len = h.controller.state.digest(), len(h.log)

    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=1, pages=2, entries=tuple(running[2:])))

    errors = sends_of(commands, M.Error)
    assert errors and errors[0].fatal and "pages" in errors[0].reason
    assert h.controller.state.digest() == before and len(h.log) == log_len
    assert tok not in h.controller.applied_rounds


def test_req_8_3_query_pages_are_collected_before_the_agent_answers() -> None:
    h = _paged(query=3, report=1000)
    h.join("a1")
    ids = h.run_jobs(9)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    welcome, *queries = h.agents["a1"].inbox
    h.agents["a1"].inbox[:] = [welcome, queries[2], queries[0], queries[1]]

    sent = [sends_of(h.deliver_to_agent("a1", 1)) for _ in range(4)]

    assert sent[:3] == [[], [], []]
    reports = [m for m in sent[3] if isinstance(m, M.ResyncReport)]
    assert [(e.job, e.attempt) for e in reports[0].entries] == [(j, 1) for j in ids]
