"""A dispatch the daemon dropped before it left is redone at once (issue #9, 8b)."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.jobs import JobSpec, JobState

SPEC = JobSpec(name="j", command=("true",), slots=1)


def facts(cmds):
    return [f for c in cmds if isinstance(c, E.Append) for f in c.facts]


def dispatched() -> Controller:
    ctrl = Controller()
    join = M.Join(agent="a", slots=1, version=M.PROTOCOL_VERSION, running=0)
    ctrl.handle(E.AgentJoined(conn=1, join=join, token=b"t" * M.TOKEN_BYTES, now=0.0))
    ctrl.handle(E.SubmitJob(spec=SPEC, now=0.0))
    ctrl.handle(E.DispatchProposed(job="1", agent="a", now=0.0))
    ctrl.handle(E.ConnectionClosed(conn=1, now=1.0))
    return ctrl


def test_an_undelivered_dispatch_is_requeued():
    ctrl = dispatched()
    cmds = ctrl.handle(E.DispatchUndelivered(job="1", attempt=1, now=1.0))
    assert facts(cmds) == [F.JobRequeued(job="1", attempt=1, reason="dispatch not delivered", requeued_at=1.0)]
    job = ctrl.state.jobs["1"]
    assert (job.state, job.attempt, job.agent) == (JobState.PENDING, 2, None)
    assert ctrl.state.agents["a"].used == 0


def test_an_undelivered_dispatch_of_a_cancelled_job_confirms_the_cancel():
    ctrl = dispatched()
    ctrl.handle(E.CancelJob(job="1", now=1.0))
    cmds = ctrl.handle(E.DispatchUndelivered(job="1", attempt=1, now=1.0))
    assert facts(cmds) == [F.JobCancelConfirmed(job="1", attempt=1, confirmed_at=1.0)]
    assert ctrl.state.jobs["1"].state is JobState.CANCELLED


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_settled_or_other_attempt_is_left_alone(attempt):
    ctrl = dispatched()
    ctrl.handle(E.DispatchUndelivered(job="1", attempt=1, now=1.0))  # requeued: attempt 2 is PENDING
    before = ctrl.state.digest()
    assert ctrl.handle(E.DispatchUndelivered(job="1", attempt=attempt, now=2.0)) == []
    assert ctrl.handle(E.DispatchUndelivered(job="99", attempt=1, now=2.0)) == []
    assert ctrl.state.digest() == before
