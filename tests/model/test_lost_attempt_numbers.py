"""A restored controller state must not issue again an attempt number that a lost history used.

Found by the swarm machine (issue #20's run): the teardown failed with
``INV-ACK-MEANS-RECORDED: a2 holds 4/2 as acknowledged, but the controller still
runs that attempt there``.  The story, pinned here as a short rule sequence on
the stateful machine (every invariant is checked after each step):

1. job 1 runs as attempt 1 on a1; a1 is drained, so a1 takes nothing new;
2. a1 loses the process's supervisor, an anti-entropy round requeues attempt 1
   and the scheduler dispatches attempt 2 to a2, which starts it;
3. the operator restores the controller's state from before that requeue: the
   controller again believes attempt 1 runs on a1;
4. attempt 2 ends on a2; a2 rejoins and reports it (an extra the controller
   never placed, beyond the job's current attempt): the controller answers it
   as a stale attempt, so a2 takes it as acknowledged;
5. a1 rejoins: attempt 1 is unrecognized and requeued, and the restored history
   dispatches *attempt 2* to a2 again.  a2 holds that (job, attempt, uid)
   finished and acknowledged, takes the dispatch for a duplicate, and the
   controller runs an attempt whose outcome it acknowledged without recording.
"""

from __future__ import annotations

import pytest

from reckon.model import facts as F
from reckon.model import state as S
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec, JobState
from reckon.model.records import LocalStatus
from tests.model.test_stateful import ReckonMachine


def machine() -> ReckonMachine:
    m = ReckonMachine()
    m.setup(n_agents=2, slots=[1, 1], ctrl_page=5, agent_page=5, round_timeout=30.0, lost_after=None,
            recent_window=300.0, retry_max=4.0, initial_jobs=[], start_grace=0.0)
    return m


def step(m: ReckonMachine, rule, **kwargs) -> None:
    rule(m, **kwargs)
    m._check_all_invariants()


@pytest.mark.parametrize("ends_first", [True, False], ids=["finished", "running"])
def test_a_lost_history_s_attempt_number_is_not_dispatched_again(ends_first: bool) -> None:
    """``ends_first``: attempt 2 has ended when a2 rejoins (its outcome is answered as stale);
    else it still runs (it is killed as an orphan, and its outcome answered as stale after)."""
    m = machine()
    step(m, ReckonMachine.submit, slots=[1], command=["true"], retries=0)
    step(m, ReckonMachine.work)
    job = m.controller.state.jobs["1"]
    assert (job.state, job.attempt, job.agent) == (JobState.RUNNING, 1, "a1")
    step(m, ReckonMachine.drain_or_resume, i=0)  # a1 takes no new work: attempt 2 goes to a2
    keep = len(m.log) - 1  # the state the operator restores (its log up to here): attempt 1 runs on a1
    step(m, ReckonMachine.supervisor_lost, i=0)
    for _ in range(4):  # heartbeats: the digests disagree, a round requeues attempt 1
        step(m, ReckonMachine.advance_time, dt=2.5, jitter=0.0, fire=True)
        step(m, ReckonMachine.work)
    assert any(isinstance(f, F.JobDispatched) and (f.job, f.attempt, f.agent) == ("1", 2, "a2") for f in m.log)
    step(m, ReckonMachine.controller_rollback, keep=keep)
    job = m.controller.state.jobs["1"]
    assert (job.state, job.attempt, job.agent) == (JobState.RUNNING, 1, "a1")
    if ends_first:
        step(m, ReckonMachine.process_ends, i=0, outcome=(0, None))  # attempt 2 ends on a2
    a2 = m.sides["a2"]
    step(m, ReckonMachine.settle)  # both connections end with the restart
    assert a2.conn is None and m.sides["a1"].conn is None
    step(m, ReckonMachine.rejoin, i=1, deliver_join=True, then_schedule=False)  # a2
    step(m, ReckonMachine.settle)
    step(m, ReckonMachine.rejoin, i=0, deliver_join=True, then_schedule=False)  # a1
    step(m, ReckonMachine.work)
    job = m.controller.state.jobs["1"]
    record = a2.agent.records.get(("1", 2))
    assert record is not None and record.status is LocalStatus.FINISHED
    # The restored history moved on, but never under attempt 2 again.
    assert job.attempt >= 3 or job.terminal, (job.state, job.attempt, job.agent)
    assert F.JobAttemptsReserved(job="1", upto=2) in m.log
    m.teardown()
    job = m.controller.state.jobs["1"]  # attempt 3 really runs where the controller placed it
    assert (job.state, job.attempt) == (JobState.RUNNING, 3)
    assert [p.agent for p in m.procs if p.alive and (p.job, p.attempt) == ("1", 3)] == [job.agent]


def _replay(*facts):
    head = [F.ClusterCreated(cluster="c1"), F.AgentRegistered(agent="a1", slots=1),
            F.JobSubmitted(job="1", spec=JobSpec(name="j", command=("true",)), submitted_at=1.0, uid="u1")]
    return S.replay(head + list(facts))


def test_reserved_attempts_are_skipped_by_every_next_attempt() -> None:
    # PENDING: the next dispatch carries the attempt above the reserved one.
    state = _replay(F.JobAttemptsReserved(job="1", upto=2))
    assert (state.jobs["1"].state, state.jobs["1"].attempt) == (JobState.PENDING, 3)
    # RUNNING: the running attempt keeps its number; the requeue skips past the reserved one.
    state = _replay(F.JobDispatched(job="1", attempt=1, agent="a1"), F.JobAttemptsReserved(job="1", upto=3),
                    F.JobRequeued(job="1", attempt=1, reason="unrecognized by agent"))
    assert (state.jobs["1"].state, state.jobs["1"].attempt) == (JobState.PENDING, 4)


@pytest.mark.parametrize("facts", [
    [F.JobAttemptsReserved(job="1", upto=2), F.JobAttemptsReserved(job="1", upto=2)],  # not above the last
    [F.JobDispatched(job="1", attempt=1, agent="a1"), F.JobAttemptsReserved(job="1", upto=1)],  # issued already
    [F.JobDispatched(job="1", attempt=1, agent="a1"),
     F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=2.0),
     F.JobAttemptsReserved(job="1", upto=2)],  # terminal: nothing left to issue
], ids=["twice", "issued", "terminal"])
def test_a_reservation_that_reserves_nothing_is_refused(facts) -> None:
    with pytest.raises(LocalProtocolError):
        _replay(*facts)
