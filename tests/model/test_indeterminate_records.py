"""Indeterminate records have a defined end (issue #9, bug 7).

An attempt the agent cannot account for (its supervisor vanished, its launch
failed) becomes INDETERMINATE: reported unrecognized if a round asks.  It used
to be deleted only inside a round's answer, so with no round it stayed for
ever, and later made the agent refuse a new controller history as if it held a
live job.  Now it expires after the recent window like an acknowledged outcome,
and it never counts as live.
"""

from __future__ import annotations

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, LocalStatus
from reckon.model.jobs import JobSpec

SPEC = JobSpec(name="x", command=("true",))
WINDOW = 300.0


def _operating(agent: Agent, cluster: str | None = "c1", now: float = 1.0) -> list[E.Command]:
    agent.handle(E.Connected(now=now))
    return agent.handle(E.MessageFromController(
        message=M.Welcome(seq=1, version=1, token=None, cluster=cluster), now=now))


def _lost_job_agent() -> Agent:
    """An operating agent of cluster c1 whose job 1 was lost at t=10."""
    agent = Agent(AgentConfig(name="a", slots=1, recent_window=WINDOW))
    _operating(agent)
    agent.handle(E.MessageFromController(message=M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC), now=2.0))
    agent.handle(E.ProcessLost(job="1", attempt=1, now=10.0))
    assert agent.records[("1", 1)].status is LocalStatus.INDETERMINATE
    return agent


def test_an_indeterminate_record_expires_after_the_recent_window_without_a_round():
    agent = _lost_job_agent()
    assert E.DeleteRecord(job="1", attempt=1) not in agent.handle(E.Tick(now=10.0 + WINDOW - 1))
    assert ("1", 1) in agent.records
    out = agent.handle(E.Tick(now=10.0 + WINDOW + 1))
    assert E.DeleteRecord(job="1", attempt=1) in out
    assert ("1", 1) not in agent.records
    # Asked about later, it is answered as before: unrecognized.
    query = M.ResyncQuery(seq=3, token=b"t" * M.TOKEN_BYTES, page=0, pages=1, jobs=(("1", 1),))
    out = agent.handle(E.MessageFromController(message=query, now=10.0 + WINDOW + 2))
    [report] = [c.message for c in out if isinstance(c, E.Send) and isinstance(c.message, M.ResyncReport)]
    assert [(e.job, e.status) for e in report.entries] == [("1", M.EntryStatus.UNRECOGNIZED)]


def test_an_indeterminate_record_from_disk_expires_too():
    """Stored before this fix: no time of its own, so it goes at the first tick."""
    old = LocalJob(job="1", attempt=1, spec=SPEC, status=LocalStatus.INDETERMINATE)
    agent = Agent(AgentConfig(name="a", slots=1, recent_window=WINDOW), records=[old], cluster="c1")
    assert E.DeleteRecord(job="1", attempt=1) in agent.handle(E.Tick(now=WINDOW + 1))


def test_an_indeterminate_record_does_not_make_the_agent_refuse_a_new_history():
    agent = _lost_job_agent()
    agent.handle(E.Disconnected(now=20.0))
    out = _operating(agent, cluster="c2", now=21.0)  # the controller's state was wiped: a new history
    assert agent.cluster == "c2" and agent.session.value == "operating"
    assert E.StoreCluster(cluster="c2", previous="c1") in out
    assert E.DeleteRecord(job="1", attempt=1) in out and not agent.records
