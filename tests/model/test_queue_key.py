"""The scheduler's queue order: higher priority first, equal priorities in submission order."""

from reckon.model.jobs import JobState
from reckon.model.scheduler import AgentNote, JobNote, Scheduler


def _scheduler(*jobs: tuple[str, int]) -> Scheduler:
    s = Scheduler()
    s.notify(AgentNote(agent="a", slots=1, used=0, connected=True, reconciling=False))
    for job, priority in jobs:
        s.notify(JobNote(job=job, order=int(job), state=JobState.PENDING, slots=1, agent=None, priority=priority))
    return s


def test_equal_priorities_go_in_submission_order():
    assert _scheduler(("2", 0), ("1", 0)).place() == [("1", "a")]


def test_a_higher_priority_goes_first():
    s = _scheduler(("1", 0), ("2", 5))
    assert s.view()[0] == ("2", "1")
    assert s.place() == [("2", "a")]


def test_a_new_priority_moves_a_queued_job_and_its_old_entry_is_dropped():
    s = _scheduler(("1", 5), ("2", 0))
    s.notify(JobNote(job="1", order=1, state=JobState.PENDING, slots=1, agent=None, priority=-1))
    assert s.view()[0] == ("2", "1")
    assert s.place() == [("2", "a")]
    s.notify(JobNote(job="2", order=2, state=JobState.RUNNING, slots=1, agent="a"))
    s.notify(AgentNote(agent="a", slots=2, used=1, connected=True, reconciling=False))
    assert s.place() == [("1", "a")]  # once: its stale entry of priority 5 is not a second proposal
