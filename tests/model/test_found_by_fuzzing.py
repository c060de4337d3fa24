"""Scenarios the stateful machine (test_stateful.py) ran into, pinned as plain tests.

Each one first showed up as a failing invariant in a long ``fuzz`` run.  Both
turned out to be checks that were stricter than the protocol promises, not
model bugs: the model stayed safe, the harness was corrected, and these tests
pin the safety properties that matter so the scenarios stay covered without
the fuzzer.  They assert only safety (nothing lost, invented or regressed),
not the exact reply, so a later refinement of the protocol does not break them.
"""

from __future__ import annotations

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobSpec, JobState

TOKENS = iter(range(1, 1 << 20))


def token() -> bytes:
    return next(TOKENS).to_bytes(16, "big")


def sends(cmds, kind):
    return [c.message for c in cmds if isinstance(c, E.Send) and isinstance(c.message, kind)]


def facts(cmds):
    return [f for c in cmds if isinstance(c, E.Append) for f in c.facts]


def join(ctrl, conn, *, slots=1, running=0, now=0.0):
    msg = M.Join(agent="a", slots=slots, version=M.PROTOCOL_VERSION, running=running)
    return ctrl.handle(E.AgentJoined(conn=conn, join=msg, token=token(), now=now))


def from_agent(ctrl, conn, msg, now):
    return ctrl.handle(E.MessageFromAgent(conn=conn, message=msg, now=now, token=token()))


def answer_round(ctrl, conn, cmds, entries, now):
    """Answer the round the commands armed, with ``entries``, in one page."""
    welcome = sends(cmds, M.Welcome)[0]
    assert welcome.token is not None
    page = M.ResyncReport(token=welcome.token, page=0, pages=1, entries=tuple(entries))
    return from_agent(ctrl, conn, page, now)


def running_job(ctrl):
    """A controller with agent "a" joined on conn 1 and job 1 dispatched to it."""
    join(ctrl, 1, slots=1)
    ctrl.handle(E.SubmitJob(spec=JobSpec(name="j", command=("true",), slots=1), now=1.0))
    cmds = ctrl.handle(E.DispatchProposed(job="1", agent="a", now=2.0))
    assert sends(cmds, M.Dispatch)
    return ctrl.state.jobs["1"]


def test_late_join_of_an_older_connection_loses_nothing():
    """Found as an INV-CAPACITY alarm: a Join sent on connection 2 (whose agent
    process then died) reached the controller after the Join of the agent's
    newer connection 3.  The controller took connection 2 for the newest one:
    it closed the live connection 3 and registered connection 2's stale slot
    count.  That costs a reconnect, but must lose or invent nothing."""
    ctrl = Controller()
    job = running_job(ctrl)
    ctrl.handle(E.ConnectionClosed(conn=1, now=3.0))
    # Connection 3 (the agent restarted with 3 slots) is handled first.
    cmds = join(ctrl, 3, slots=3, running=1, now=4.0)
    running = M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING, started_at=2.5)
    answer_round(ctrl, 3, cmds, [running], now=5.0)
    assert ctrl.state.agents["a"].slots == 3
    # The stale Join of connection 2 (the old process, 1 slot) arrives late.
    cmds = join(ctrl, 2, slots=1, running=1, now=6.0)
    assert job.state is JobState.RUNNING and job.agent == "a" and job.attempt == 1
    assert ctrl.state.agents["a"].used == 1 and ctrl.state.agents["a"].running == {"1"}
    assert all(isinstance(f, F.AgentRegistered) for f in facts(cmds)), facts(cmds)  # no job fact
    # Connection 2 is dead: its close arrives; the agent comes back on connection 4.
    ctrl.handle(E.ConnectionClosed(conn=2, now=7.0))
    ctrl.handle(E.ConnectionClosed(conn=3, now=7.0))
    cmds = join(ctrl, 4, slots=3, running=1, now=8.0)
    answer_round(ctrl, 4, cmds, [running], now=9.0)
    assert job.state is JobState.RUNNING and job.attempt == 1 and ctrl.state.agents["a"].slots == 3
    # The job's true end is recorded as the agent saw it.
    done = M.Finished(job="1", attempt=1, exit_code=3, signal=None, finished_at=9.5, started_at=2.5)
    cmds = from_agent(ctrl, 4, done, now=20.0)
    assert sends(cmds, M.Ack)[0].outcome is M.AckOutcome.APPLIED
    assert (job.state, job.exit_code, job.signal, job.finished_at) == (JobState.FAILED, 3, None, 9.5)
    assert ctrl.state.agents["a"].used == 0


def test_late_report_of_a_superseded_attempt_changes_nothing():
    """Found as an INV-COMMIT-BEFORE-EFFECT alarm: attempt 1 of a job was
    requeued (its agent was lost), attempt 2 ran and was cancelled, and only
    then did attempt 1's completion report arrive.  It is acknowledged (so the
    agent's outbox lets go: ALREADY_TERMINAL, the job is finished) and changes
    nothing."""
    ctrl = Controller(ControllerConfig(lost_after=10.0))
    job = running_job(ctrl)
    ctrl.handle(E.ConnectionClosed(conn=1, now=3.0))
    ctrl.handle(E.Tick(now=20.0))  # lost: attempt 1 is requeued
    assert job.state is JobState.PENDING and job.attempt == 2
    join(ctrl, 5, slots=1, now=21.0)  # the agent is back, no longer holding attempt 1
    ctrl.handle(E.DispatchProposed(job="1", agent="a", now=22.0))
    ctrl.handle(E.CancelJob(job="1", now=23.0))
    killed = M.Finished(job="1", attempt=2, exit_code=None, signal=9, finished_at=23.5)
    from_agent(ctrl, 5, killed, now=24.0)
    final = (job.state, job.attempt, job.exit_code, job.signal, job.finished_at)
    assert final == (JobState.CANCELLED, 2, None, 9, 23.5)
    late = M.Finished(job="1", attempt=1, exit_code=0, signal=None, finished_at=2.9)
    cmds = from_agent(ctrl, 5, late, now=25.0)
    assert not facts(cmds)
    assert sends(cmds, M.Ack)[0].outcome in (M.AckOutcome.ALREADY_TERMINAL, M.AckOutcome.STALE_ATTEMPT)
    assert (job.state, job.attempt, job.exit_code, job.signal, job.finished_at) == final
