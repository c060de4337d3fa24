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


def test_repeated_reprioritizing_keeps_the_queue_near_the_backlog_and_the_order_right():
    """A sweep that renotes every pending job pushes a new entry for each: the queue is rebuilt
    once stale entries outnumber live ones, keeping a job parked at its user's limit parked."""
    from reckon.model.scheduler import UserLimits

    s = Scheduler(UserLimits(max_running=1))
    s.notify(AgentNote(agent="a", slots=4, used=1, connected=True, reconciling=False))
    s.notify(JobNote(job="0", order=0, state=JobState.RUNNING, slots=1, agent="a", user="u"))
    s.notify(JobNote(job="1", order=1, state=JobState.PENDING, slots=1, agent=None, user="u"))
    assert s.place() == []  # u runs one job already: job 1 is parked
    for sweep in range(50):
        for job in range(2, 102):
            s.notify(JobNote(job=str(job), order=job, state=JobState.PENDING, slots=1, agent=None,
                             priority=sweep * 1000 + job, user=f"v{job}"))
        queued = {job for _, job in s._queue} | {job for heap in s._parked.values() for _, job in heap}
        assert queued >= set(s._pending)  # every pending job is queued or parked
    assert len(s._queue) <= 2 * len(s._pending) + 64
    assert s.place() == [("101", "a"), ("100", "a"), ("99", "a")]  # the latest priorities
    s.notify(JobNote(job="0", order=0, state=JobState.COMPLETED, slots=1, agent=None, user="u"))
    s.notify(AgentNote(agent="a", slots=200, used=0, connected=True, reconciling=False))
    assert sorted(job for job, _ in s.place()) == sorted(str(job) for job in range(1, 102))  # out of the parked heap once u is under its limit
