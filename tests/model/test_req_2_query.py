"""Requirement 2: Controller-Initiated Job-State Query (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, sends_of

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState


def _query_on_rejoin(h: Harness, name: str) -> list[tuple[str, int]]:
    h.disconnect(name)
    h.connect(name)
    commands = h.deliver_to_controller(name, 1)
    return [pair for q in sends_of(commands, M.ResyncQuery) for pair in q.jobs]


def test_req_2_1_query_lists_exactly_nonterminal_jobs_on_that_agent() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    on_a1 = h.run_jobs(4, "a1")  # 1..4
    on_a2 = h.run_jobs(2, "a2")  # 5, 6
    pending = h.submit(1)  # 7 stays pending: nobody is asked about it
    h.exit("a1", on_a1[0], exit_code=0)  # 1 COMPLETED
    h.exit("a1", on_a1[1], exit_code=2)  # 2 FAILED
    h.pump()
    h.cancel(pending[0])  # 7 CANCELLED

    queried = _query_on_rejoin(h, "a1")

    assert sorted(queried) == [(on_a1[2], 1), (on_a1[3], 1)]
    assert set(queried) == set(h.controller.placed_on("a1").items())
    assert not {j for j, _ in queried} & set(on_a2)


def test_req_2_1_query_excludes_requeued_jobs_and_follows_new_placement() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    job = h.run_jobs(1, "a1")[0]
    h.disconnect("a1")
    # a1 comes back without the attempt: unrecognized, requeued to attempt 2.
    h.agents["a1"].model.records.clear()
    h.connect("a1")
    h.pump()
    assert h.job(job).state is JobState.PENDING and h.job(job).attempt == 2
    h.join("a2")
    h.dispatch(job, "a2")
    h.pump()

    assert _query_on_rejoin(h, "a1") == []
    assert _query_on_rejoin(h, "a2") == [(job, 2)]


def test_req_2_1_anti_entropy_query_lists_the_controllers_placement() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(3)
    h.agent("a1").records.pop((ids[1], 1))  # the agent forgot one attempt
    h.now = 10.0
    h.tick("a1")  # a heartbeat at a quiet moment disagrees
    commands = h.deliver_to_controller("a1")

    queries = sends_of(commands, M.ResyncQuery)
    assert sends_of(commands, M.Welcome) == []
    assert sorted(p for q in queries for p in q.jobs) == sorted(h.controller.placed_on("a1").items())
    assert len(queries[0].jobs) == 3


def test_req_2_2_query_identifies_jobs_by_id_and_current_attempt() -> None:
    h = Harness(controller_config=ControllerConfig(page_size=1000))
    h.join("a1")
    ids = h.run_jobs(3)
    h.disconnect("a1")
    h.agent("a1").records.pop((ids[0], 1))
    h.join("a1")  # job 1 unrecognized -> attempt 2
    h.dispatch(ids[0], "a1")
    h.pump()

    queried = _query_on_rejoin(h, "a1")

    assert sorted(queried) == sorted([(ids[0], 2), (ids[1], 1), (ids[2], 1)])
    ids_only = [j for j, _ in queried]
    assert len(ids_only) == len(set(ids_only)), "every job appears exactly once"
    # The agent matches them to its own records by (job, attempt).
    assert all(pair in h.agent("a1").records for pair in queried)


def test_req_2_2_agent_matches_query_entries_to_its_records() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.exit("a1", ids[0], exit_code=5)  # outcome held while disconnected
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    commands = h.deliver_to_agent("a1")

    reports = sends_of(commands, M.ResyncReport)
    entries = {(e.job, e.attempt): e for r in reports for e in r.entries}
    assert entries[(ids[0], 1)].status is M.EntryStatus.FINISHED and entries[(ids[0], 1)].exit_code == 5
    assert entries[(ids[1], 1)].status is M.EntryStatus.RUNNING


def test_req_2_2_query_is_sent_only_to_the_joining_agent() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    h.run_jobs(1, "a1")
    h.disconnect("a1")
    h.connect("a1")
    commands = h.deliver_to_controller("a1", 1)
    a1_conn = h.agents["a1"].conn
    assert all(c.conn == a1_conn for c in commands if isinstance(c, E.Send))
    assert h.agents["a2"].inbox == []


def test_req_2_1_anti_entropy_compares_only_at_a_quiet_moment() -> None:
    h = Harness()
    h.join("a1")
    ids = h.run_jobs(2)
    h.agent("a1").records.pop((ids[0], 1))
    session = h.controller.sessions["a1"]
    held = h.agent("a1").held()
    stale = M.Heartbeat(running=len(held), digest=M.running_digest(held), seen_seq=session.seq - 1)
    quiet = M.Heartbeat(running=len(held), digest=M.running_digest(held), seen_seq=session.seq)
    agreeing = M.Heartbeat(running=2, digest=M.running_digest(h.controller.placed_on("a1").items()),
                           seen_seq=session.seq)

    assert h.send_to_controller("a1", stale) == []  # something we sent is still unseen: no verdict
    assert h.send_to_controller("a1", agreeing) == []  # same set: nothing to do
    commands = h.send_to_controller("a1", quiet)
    assert len(sends_of(commands, M.ResyncQuery)) == 1
    assert h.controller.node_state("a1") == NodeState.RECONCILING
    assert h.send_to_controller("a1", quiet) == []  # a round is open already
