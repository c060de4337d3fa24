"""Agents never mix two controller histories (job ids restart with a new one)."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, LocalStatus
from reckon.model.controller import Controller
from reckon.model.errors import PermanentRefusal
from reckon.model.jobs import JobSpec

SPEC = JobSpec(name="x", command=("true",))


def _joined(agent: Agent, cluster: str | None) -> list[E.Command]:
    agent.handle(E.Connected(now=1.0))
    return agent.handle(E.MessageFromController(
        message=M.Welcome(seq=1, version=1, token=None, cluster=cluster), now=1.0))


def test_a_new_agent_takes_the_controllers_cluster():
    agent = Agent(AgentConfig(name="a", slots=1))
    commands = _joined(agent, "c1")
    assert E.StoreCluster(cluster="c1", previous=None) in commands
    assert agent.cluster == "c1"


def test_old_history_records_that_no_longer_matter_are_let_go():
    old = LocalJob(job="1", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, exit_code=5,
                   finished_at=10.0, acked=True)
    agent = Agent(AgentConfig(name="a", slots=1), records=[old], cluster="c1")
    commands = _joined(agent, "c2")
    assert E.DeleteRecord(job="1", attempt=1) in commands
    assert E.StoreCluster(cluster="c2", previous="c1") in commands
    # The new history's job 1 is a new job: it runs, it is not a "duplicate dispatch".
    out = agent.handle(E.MessageFromController(
        message=M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC), now=20.0))
    assert E.StartProcess(job="1", attempt=1, spec=SPEC) in out


@pytest.mark.parametrize("record,outbox", [
    (LocalJob(job="1", attempt=1, spec=SPEC), []),
    (LocalJob(job="1", attempt=1, spec=SPEC, status=LocalStatus.FINISHED, exit_code=5, finished_at=10.0), [
        M.Finished(job="1", attempt=1, exit_code=5, signal=None, finished_at=10.0)]),
])
def test_records_that_still_matter_make_the_agent_refuse_another_history(record, outbox):
    agent = Agent(AgentConfig(name="a", slots=1), records=[record], outbox=outbox, cluster="c1")
    agent.handle(E.Connected(now=1.0))
    before = (dict(agent.records), dict(agent.outbox), agent.session, agent.cluster, agent.seen_seq)
    with pytest.raises(PermanentRefusal, match="refusing to mix"):  # retried at the refusal pace
        agent.handle(E.MessageFromController(
            message=M.Welcome(seq=1, version=1, token=None, cluster="c2"), now=2.0))
    assert (dict(agent.records), dict(agent.outbox), agent.session, agent.cluster, agent.seen_seq) == before


def test_the_controller_names_its_history_in_every_welcome_and_replays_it():
    log = [F.ClusterCreated(cluster="c9")]
    controller = Controller.from_log(log)
    out = controller.handle(E.AgentJoined(conn=1, join=M.Join(agent="a", slots=1, version=1),
                                          token=bytes(16), now=1.0))
    welcome = next(c.message for c in out if isinstance(c, E.Send))
    assert welcome.cluster == "c9"
    from reckon.model.state import apply, replay
    with pytest.raises(Exception, match="already is cluster c9"):
        apply(replay(log), F.ClusterCreated(cluster="other"))
