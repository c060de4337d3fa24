"""How the controller counts an agent's silence for ``lost_after`` (issue #9, bugs 4 and 8c)."""

from __future__ import annotations

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobSpec, JobState
from reckon.model.nodes import NodeState

SPEC = JobSpec(name="j", command=("true",), slots=1)


def token(i: int) -> bytes:
    return i.to_bytes(M.TOKEN_BYTES, "big")


def join(ctrl: Controller, conn: int, now: float, **clock: float) -> list[E.Command]:
    msg = M.Join(agent="a", slots=2, version=M.PROTOCOL_VERSION, running=0)
    return ctrl.handle(E.AgentJoined(conn=conn, join=msg, token=token(conn), now=now, **clock))


def two_running_jobs(ctrl: Controller) -> list:
    join(ctrl, 1, now=0.0)
    for _ in range(2):
        ctrl.handle(E.SubmitJob(spec=SPEC, now=0.0))
    for job in ("1", "2"):
        ctrl.handle(E.DispatchProposed(job=job, agent="a", now=0.0))
    jobs = [ctrl.state.jobs["1"], ctrl.state.jobs["2"]]
    assert all(j.state is JobState.RUNNING for j in jobs)
    return jobs


def test_lost_after_counts_from_a_round_deadline_not_from_the_join():
    """Bug 4: the agent rejoins at t=1 and its round times out at t=31.  The
    controller dropped it at t=31, so with ``lost_after=10`` it is not lost
    before t=41 (it was lost, and both jobs requeued, at t=31)."""
    ctrl = Controller(ControllerConfig(lost_after=10.0, round_timeout=30.0))
    jobs = two_running_jobs(ctrl)
    ctrl.handle(E.ConnectionClosed(conn=1, now=1.0))
    cmds = join(ctrl, 2, now=1.0)  # places two jobs here: a round is armed
    timer = next(c for c in cmds if isinstance(c, E.StartRoundTimer))
    ctrl.handle(E.RoundDeadlineExpired(agent="a", token=timer.token, now=31.0))
    assert ctrl.node_state("a") == NodeState.DISCONNECTED
    ctrl.handle(E.Tick(now=31.0))
    ctrl.handle(E.Tick(now=40.5))
    assert [j.state for j in jobs] == [JobState.RUNNING, JobState.RUNNING]
    assert ctrl.node_state("a") == NodeState.DISCONNECTED
    ctrl.handle(E.Tick(now=41.5))  # now it has been silent for lost_after since the drop
    assert ctrl.node_state("a") == NodeState.LOST
    assert [(j.state, j.attempt) for j in jobs] == [(JobState.PENDING, 2), (JobState.PENDING, 2)]


def test_silence_is_measured_on_the_monotonic_clock():
    """Bug 8c: events carry ``mono`` besides the wall clock ``now``; a wall-clock
    step of an hour does not make a disconnected agent silent for an hour."""
    ctrl = Controller(ControllerConfig(lost_after=10.0))
    jobs = two_running_jobs(ctrl)
    ctrl.handle(E.ConnectionClosed(conn=1, now=1000.0, mono=5.0))
    ctrl.handle(E.Tick(now=1000.0 + 3600.0, mono=6.0))  # the wall clock jumped, time did not pass
    assert ctrl.node_state("a") == NodeState.DISCONNECTED
    assert [j.state for j in jobs] == [JobState.RUNNING, JobState.RUNNING]
    ctrl.handle(E.Tick(now=1000.0 + 3600.0, mono=15.5))
    assert ctrl.node_state("a") == NodeState.LOST


def test_a_bad_monotonic_reading_is_refused():
    import pytest

    for bad in (-1.0, float("nan"), "5"):
        with pytest.raises(ValueError, match="mono"):
            E.Tick(now=1.0, mono=bad)
