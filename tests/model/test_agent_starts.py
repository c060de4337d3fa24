"""Start times reach the controller without a message per short job."""

from __future__ import annotations

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig
from reckon.model.jobs import JobSpec

SPEC = JobSpec(name="x", command=("true",))


def _operating_agent() -> Agent:
    agent = Agent(AgentConfig(name="a", slots=2))
    agent.handle(E.Connected(now=0.0))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=1, token=None), now=0.0))
    for job in ("1", "2"):
        agent.handle(E.MessageFromController(message=M.Dispatch(seq=1 + int(job), job=job, attempt=1, spec=SPEC),
                                             now=0.0))
        agent.handle(E.ProcessStarted(job=job, attempt=1, started_at=1.0))
    return agent


def _sent(commands: list[E.Command], kind: type) -> list:
    return [c.message for c in commands if isinstance(c, E.Send) and isinstance(c.message, kind)]


def test_a_job_that_ends_before_the_next_tick_costs_no_started_message():
    agent = _operating_agent()
    exited = agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.2, now=1.2))
    assert _sent(exited, M.Finished)[0].started_at == 1.0  # the start time travels with the outcome
    started = _sent(agent.handle(E.Tick(now=1.5)), M.Started)
    assert [(m.job, m.started_at) for m in started] == [("2", 1.0)]  # only the job still running


def test_unreported_starts_go_out_once():
    agent = _operating_agent()
    assert len(_sent(agent.handle(E.Tick(now=1.5)), M.Started)) == 2
    assert _sent(agent.handle(E.Tick(now=5.0)), M.Started) == []


def test_a_disconnected_agent_with_overdue_retries_does_not_ask_to_be_woken():
    """A retry time in the past while disconnected used to make the daemon tick in a busy loop."""
    agent = _operating_agent()
    agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=3, signal=None, finished_at=1.2, now=1.2))
    assert agent.next_wakeup() is not None  # operating: the retry is scheduled
    agent.handle(E.Disconnected(now=2.0))
    assert agent.outbox and agent.next_wakeup() is None
    agent.handle(E.Tick(now=100.0))  # nothing to do, and it stays so
    assert agent.next_wakeup() is None


# ---- issue #9 bug 6: the start time of a job whose exit is read before its start ----------------------------


def _dispatched_agent() -> Agent:
    """An operating agent given job 1, whose start has not been reported to it yet."""
    agent = Agent(AgentConfig(name="a", slots=2))
    agent.handle(E.Connected(now=0.0))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=1, token=None), now=0.0))
    agent.handle(E.MessageFromController(message=M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC), now=0.0))
    return agent


def test_the_exit_carries_the_start_time_the_supervisor_recorded():
    agent = _dispatched_agent()
    exited = agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, started_at=1.0,
                                          finished_at=1.01, now=1.02))
    assert _sent(exited, M.Finished)[0].started_at == 1.0
    assert agent.records[("1", 1)].started_at == 1.0
    puts = [c.report for c in exited if isinstance(c, E.OutboxPut)]
    assert [p.started_at for p in puts] == [1.0]  # durable with the outcome
    # The launch's answer arriving after the exit changes nothing (it is the same start).
    assert agent.handle(E.ProcessStarted(job="1", attempt=1, started_at=1.0)) == []


def test_a_start_that_arrives_after_the_exit_joins_the_outcome():
    """The exit said nothing of the start (an older supervisor): the late
    ProcessStarted fills it in, in the record and in the report not yet acked."""
    agent = _dispatched_agent()
    exited = agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.01, now=1.02))
    assert _sent(exited, M.Finished)[0].started_at is None
    started = agent.handle(E.ProcessStarted(job="1", attempt=1, started_at=1.0))
    assert agent.records[("1", 1)].started_at == 1.0
    assert [c.report.started_at for c in started if isinstance(c, E.OutboxPut)] == [1.0]
    assert agent.outbox[("1", 1)].report.started_at == 1.0
    retry = _sent(agent.handle(E.Tick(now=100.0)), M.Finished)
    assert [m.started_at for m in retry] == [1.0]


def test_a_started_at_that_is_not_a_time_is_refused():
    import pytest

    with pytest.raises(ValueError):
        E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, started_at=-1.0, finished_at=1.0, now=1.0)
