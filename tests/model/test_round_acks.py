"""A round's ResyncDone acknowledges the completions its report carried.

Before: after answering a round the agent flushed its whole outbox, so every
completion the report had just delivered went out a second time on its own
(100k extra messages and acks after a 100k-job round, competing with the
round's own commit).  Now the report's FINISHED entries wait for the round's
ResyncDone, which is sent only once the report is applied and durable, and
which acknowledges them as an Ack would.  Nothing is lost if it never comes.
"""

from __future__ import annotations

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import ControllerConfig
from reckon.model.jobs import JobState

from tests.model.harness import Harness, spec


def _finished_while_away(h: Harness, count: int) -> list[str]:
    h.join("a1")
    ids = h.run_jobs(count)
    h.disconnect("a1")
    for i, job in enumerate(ids):
        h.exit("a1", job, exit_code=i % 3, finished_at=5.0 + i)
    assert set(h.agent("a1").outbox) == {(j, 1) for j in ids}
    return ids


def _sent(h: Harness, kind: type) -> list[M.Message]:
    return [m for m in h.agents["a1"].sent if isinstance(m, kind)]


def test_the_round_delivers_and_acknowledges_every_completion_once():
    h = Harness(controller_config=ControllerConfig(page_size=4), page_size=4)  # paged both ways
    ids = _finished_while_away(h, 10)
    finished_before = len(_sent(h, M.Finished))
    log_before = len(h.log)

    h.join("a1")  # connect, round, report, ResyncDone

    assert [h.job(j).exit_code for j in ids] == [i % 3 for i in range(10)]
    assert [h.job(j).finished_at for j in ids] == [5.0 + i for i in range(10)]
    assert len(h.log) == log_before + 10  # one finish fact per job
    assert len(_sent(h, M.Finished)) == finished_before  # no completion sent a second time
    assert [m for m in h.agents["a1"].received if isinstance(m, M.Ack)] == []
    assert h.agent("a1").outbox == {} and h.agents["a1"].durable_outbox == {}
    assert all(h.agent("a1").records[(j, 1)].acked for j in ids)


def test_a_resync_done_of_another_round_acknowledges_nothing():
    h = Harness()
    ids = _finished_while_away(h, 3)
    h.connect("a1")
    h.deliver_to_controller("a1")  # Join: Welcome and the query go out
    h.deliver_to_agent("a1")  # the report goes out
    token = h.agents["a1"].sent[-1].token
    stale = M.ResyncDone(seq=h.agent("a1").seen_seq + 1, token=bytes(16))
    assert stale.token != token
    h.agent_handle("a1", E.MessageFromController(message=stale, now=h.now))
    assert set(h.agent("a1").outbox) == {(j, 1) for j in ids}  # still waiting for the real one
    h.pump()
    assert h.agent("a1").outbox == {} and [h.job(j).state for j in ids] == [JobState.COMPLETED,
                                                                             JobState.FAILED, JobState.FAILED]


def test_a_resync_done_that_never_arrives_costs_one_retry_interval():
    h = Harness(retry_initial=1.0, retry_max=30.0)
    ids = _finished_while_away(h, 3)
    h.connect("a1")
    h.deliver_to_controller("a1")
    h.deliver_to_agent("a1")  # the report goes out
    h.deliver_to_controller("a1")  # applied; ResyncDone is in flight...
    assert all(h.job(j).terminal for j in ids)
    h.agents["a1"].inbox[:] = [m for m in h.agents["a1"].inbox if not isinstance(m, M.ResyncDone)]  # ...and lost
    sent = len(_sent(h, M.Finished))

    h.now += 29.0
    h.tick("a1")
    assert len(_sent(h, M.Finished)) == sent  # not before a full retry interval
    h.now += 1.5
    h.tick("a1")
    assert len(_sent(h, M.Finished)) == sent + 3
    h.pump()
    acks = [m for m in h.agents["a1"].received if isinstance(m, M.Ack)]
    assert {m.outcome for m in acks} == {M.AckOutcome.ALREADY_TERMINAL} and len(acks) == 3
    assert h.agent("a1").outbox == {}


def test_a_disconnect_before_resync_done_reports_them_again_in_the_next_round():
    h = Harness()
    ids = _finished_while_away(h, 3)
    h.connect("a1")
    h.deliver_to_controller("a1")
    h.deliver_to_agent("a1")  # the report goes out, and is lost with the connection
    h.disconnect("a1")
    assert set(h.agent("a1").outbox) == {(j, 1) for j in ids}
    h.join("a1")
    assert [h.job(j).exit_code for j in ids] == [0, 1, 2] and h.agent("a1").outbox == {}


def test_a_late_copy_of_an_answered_query_page_changes_nothing():
    """Found in review: a duplicated query page made the agent answer the same round
    again; the second report carried a completion the first did not (its own Finished
    lost in flight), and the first report's ResyncDone then acknowledged it: the
    outbox entry deleted, the outcome never applied, and after the record expired
    the job was requeued as unrecognized.  A page of an answered round is ignored."""
    h = Harness()
    h.join("a1")
    x, y = h.run_jobs(2)
    h.start("a1", x)
    h.start("a1", y)
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1")  # Join: Welcome and one query page
    world = h.agents["a1"]
    (page,) = [m for m in world.inbox if isinstance(m, M.ResyncQuery)]
    world.inbox.append(page)  # the page is duplicated in flight
    h.deliver_to_agent("a1", 2)  # Welcome and the page: the report (x, y running)
    reports = len(_sent(h, M.ResyncReport))
    h.now = 10.0
    h.exit("a1", y, exit_code=7, finished_at=10.0)
    world.outbox_wire[:] = [m for m in world.outbox_wire if not isinstance(m, M.Finished)]  # lost in flight
    h.deliver_to_agent("a1", 1)  # the late copy

    assert len(_sent(h, M.ResyncReport)) == reports  # not answered twice
    assert h.agent("a1").session.value == "operating"  # and not waiting for pages that never come
    h.pump()
    assert (y, 1) in h.agent("a1").outbox  # the round's ResyncDone did not acknowledge y
    h.now = 45.0
    h.tick("a1")  # the outbox retries y
    h.pump()
    assert h.job(y).state is JobState.FAILED and h.job(y).exit_code == 7 and h.agent("a1").outbox == {}


def test_a_late_copy_of_an_older_rounds_query_is_not_a_new_round():
    """Found by the swarm machine (issue #13): after rounds R1 and R2 on one connection, a late
    copy of R1's query was answered as a new round (only the last answered token was
    remembered); that stale report carried a completion R2's report also carried, and a late
    copy of R1's ResyncDone then acknowledged it before any report reached the controller.
    Every round answered on the connection is remembered: the copy changes nothing."""
    from reckon.model.agent import Agent, AgentConfig

    agent = Agent(AgentConfig(name="a1", slots=2))
    r1, r2 = (bytes([k]) * 16 for k in (1, 2))

    def to_agent(msg, now=1.0):
        return agent.handle(E.MessageFromController(message=msg, now=now))

    agent.handle(E.Connected(now=0.0))
    to_agent(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None))
    to_agent(M.Dispatch(seq=2, job="1", attempt=1, spec=spec()))
    query_r1 = M.ResyncQuery(seq=3, token=r1, page=0, pages=1, jobs=(("1", 1),))
    to_agent(query_r1)
    done_r1 = M.ResyncDone(seq=4, token=r1)
    to_agent(done_r1)
    agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=5.0, now=5.0))
    to_agent(M.ResyncQuery(seq=5, token=r2, page=0, pages=1, jobs=(("1", 1),)), now=6.0)  # R2 carries it

    late = to_agent(query_r1, now=7.0)  # a late copy of R1's query, then of its ResyncDone
    assert [c for c in late if isinstance(c, E.Send)] == []
    to_agent(done_r1, now=7.0)
    assert ("1", 1) in agent.outbox  # only R2's ResyncDone (or an Ack) may acknowledge it
