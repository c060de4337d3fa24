"""Start times reach the controller without a message per short job."""

from __future__ import annotations

from model import events as E
from model import messages as M
from model.agent import Agent, AgentConfig
from model.jobs import JobSpec

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


def test_an_exit_handled_before_its_start_keeps_the_supervisors_start_time():
    """Issue #9 item 6, found by `reckon chaos` (4 of 3,600 jobs): the agent daemon feeds the
    exit and the start from two tasks, so a short job's exit can come first, and the start
    is then ignored (the record is FINISHED); after an agent restart the start was never
    handled at all.  The exit carries the supervisor's start time."""
    agent = Agent(AgentConfig(name="a", slots=2))
    agent.handle(E.Connected(now=0.0))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=1, token=None), now=0.0))
    agent.handle(E.MessageFromController(message=M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC), now=0.0))
    exited = agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.2,
                                          started_at=1.0, now=1.2))
    assert _sent(exited, M.Finished)[0].started_at == 1.0
    assert agent.records[("1", 1)].started_at == 1.0
    agent.handle(E.ProcessStarted(job="1", attempt=1, started_at=1.0))  # late: changes nothing
    assert agent.records[("1", 1)].started_at == 1.0

