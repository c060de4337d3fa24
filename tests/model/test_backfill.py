"""EASY backfill (model/backfill.py, ``Scheduler(policy="backfill")``) and INV-BACKFILL-PROMISE."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings, strategies as st

from reckon.model.jobs import JobState
from reckon.model.scheduler import AgentNote, JobNote, Scheduler

from .backfill_check import soonest

G = 1 << 30


def agent(s: Scheduler, name: str, slots: int, used: int = 0, mem: int | None = None, partitions=()) -> None:
    s.notify(AgentNote(agent=name, slots=slots, used=used, connected=True, reconciling=False,
                       free_mem=mem, partitions=partitions))


def running(s: Scheduler, job: str, on: str, slots: int, started: float, limit: float | None,
            mem: int | None = None) -> None:
    s.notify(JobNote(job=job, order=int(job), state=JobState.RUNNING, slots=slots, agent=on,
                     started=started, time_limit=limit, mem=mem))


def pending(s: Scheduler, job: str, slots: int, limit: float | None = None, priority: int = 0,
            mem: int | None = None, partition: str | None = None, queued_at: float | None = None) -> None:
    s.notify(JobNote(job=job, order=int(job), state=JobState.PENDING, slots=slots, agent=None,
                     time_limit=limit, priority=priority, mem=mem, partition=partition, queued_at=queued_at))


def cluster(policy: str, reserve_after: float = 0.0) -> Scheduler:
    """One agent of 4 slots, 2 of them held until t=100 by job 1; job 2 (4 slots) waits."""
    s = Scheduler(policy=policy, reserve_after=reserve_after)
    agent(s, "a", 4, used=2)
    running(s, "1", "a", 2, started=0.0, limit=100.0)
    pending(s, "2", 4, limit=50.0, queued_at=5.0)
    return s


def test_a_short_job_backfills_around_a_large_one():
    s = cluster("backfill")
    pending(s, "3", 1, limit=50.0)  # ends at 60, before job 2's start at 100
    assert s.place(now=10.0) == [("3", "a")]
    assert s.expected_start("2") == (100.0, "a")


def test_a_blocked_job_younger_than_reserve_after_holds_nothing_back():
    """reserve_after (Slurm's bf_min_age_reserve): job 2, queued at 5, gets no reservation before
    it has waited 30 s, so a long job starts around it as under FIFO; from then on it is promised
    its start and the same long job waits."""
    s = cluster("backfill", reserve_after=30.0)
    pending(s, "3", 1, limit=500.0, queued_at=6.0)  # would hold a slot past 100, when job 2 needs all 4
    assert s.place(now=10.0) == [("3", "a")]
    assert s.expected_start("2") is None and s.leads("2")  # it waits for resources, promised nothing yet
    s = cluster("backfill", reserve_after=30.0)
    pending(s, "3", 1, limit=500.0, queued_at=6.0)
    assert s.place(now=35.0) == []
    assert s.expected_start("2") == (100.0, "a")


def test_reserve_after_reserves_for_the_first_blocked_job_old_enough():
    """The first blocked job is young; the next blocked one has waited long enough: it is the one
    promised a start (and both wait for resources)."""
    s = Scheduler(policy="backfill", reserve_after=30.0)
    agent(s, "a", 4, used=2)
    running(s, "1", "a", 2, started=0.0, limit=100.0)
    pending(s, "2", 4, limit=50.0, priority=10, queued_at=90.0)  # first in the queue, 10 s old
    pending(s, "3", 4, limit=50.0, queued_at=0.0)  # 100 s old: reserved for
    pending(s, "4", 1, limit=500.0, queued_at=0.0)  # would delay job 3's start at 100: held back
    assert s.place(now=99.0) == []
    assert s.expected_start("3") is not None and s.expected_start("2") is None
    assert s.leads("2") and s.leads("3") and not s.leads("4")


def test_reserve_after_is_validated():
    from reckon.model.controller import ControllerConfig

    for bad in (-1.0, True, "1h", float("nan")):
        with pytest.raises(ValueError, match="reserve_after"):
            Scheduler(policy="backfill", reserve_after=bad)
        with pytest.raises(ValueError, match="reserve_after"):
            ControllerConfig(reserve_after=bad)


def test_a_long_job_does_not_delay_the_reserved_one():
    s = cluster("backfill")
    pending(s, "3", 1, limit=500.0)  # would hold a slot past 100, when job 2 needs all 4
    pending(s, "4", 1)  # no time limit: it might never end
    assert s.place(now=10.0) == []
    fifo = cluster("fifo")
    pending(fifo, "3", 1, limit=500.0)
    pending(fifo, "4", 1)
    assert fifo.place(now=10.0) == [("3", "a"), ("4", "a")]  # first fit: job 2 starves


def test_a_job_that_fits_what_the_reserved_one_leaves_over_may_outlast_its_start():
    s = Scheduler(policy="backfill")
    agent(s, "a", 4, used=2)
    running(s, "1", "a", 2, started=0.0, limit=100.0)
    pending(s, "2", 3, limit=50.0)  # at 100: 4 free, it takes 3, one is left over
    pending(s, "3", 1, limit=500.0)
    pending(s, "4", 1, limit=500.0)
    assert s.place(now=10.0) == [("3", "a")]  # the one left over, once


def test_without_time_limits_nothing_is_promised_and_backfill_places_as_fifo():
    s = Scheduler(policy="backfill")
    agent(s, "a", 4, used=2)
    running(s, "1", "a", 2, started=0.0, limit=None)
    pending(s, "2", 4)
    pending(s, "3", 1)
    assert s.place(now=10.0) == [("3", "a")]
    assert s.expected_start("2") is None


def test_the_reservation_is_on_the_agent_that_frees_up_first_and_others_are_free_to_use():
    s = Scheduler(policy="backfill")
    agent(s, "a", 4, used=4)
    agent(s, "b", 4, used=3)
    running(s, "1", "a", 4, started=0.0, limit=50.0)
    running(s, "2", "b", 3, started=0.0, limit=200.0)
    pending(s, "3", 4, limit=10.0)
    pending(s, "4", 1, limit=1000.0)  # on b: b is not reserved
    assert s.place(now=10.0) == [("4", "b")]
    assert s.expected_start("3") == (50.0, "a")


def test_memory_counts_in_the_reservation():
    s = Scheduler(policy="backfill")
    agent(s, "a", 8, used=2, mem=2 * G)
    running(s, "1", "a", 2, started=0.0, limit=100.0, mem=2 * G)
    pending(s, "2", 1, limit=10.0, mem=4 * G)  # needs job 1's memory: starts at 100
    pending(s, "3", 1, limit=1000.0, mem=G)  # 1 GiB of the 4 would be gone at 100
    pending(s, "4", 1, limit=1000.0)  # asks no memory: fits what job 2 leaves over
    assert s.place(now=0.0) == [("4", "a")]
    assert s.expected_start("2") == (100.0, "a")


def test_a_higher_priority_job_is_the_one_reserved():
    s = cluster("backfill")
    pending(s, "3", 4, limit=10.0, priority=10)
    pending(s, "4", 1, limit=95.0)  # ends at 105: past the reserved start
    assert s.place(now=10.0) == []
    assert s.expected_start("3") == (100.0, "a") and s.expected_start("2") is None


def test_without_a_clock_backfill_places_as_fifo():
    s = cluster("backfill")
    pending(s, "3", 1, limit=500.0)
    assert s.place() == [("3", "a")]


def test_a_job_that_starts_loses_its_reservation():
    s = cluster("backfill")
    s.place(now=10.0)
    assert s.expected_start("2") is not None
    s.notify(JobNote(job="2", order=2, state=JobState.RUNNING, slots=4, agent="a", started=100.0, time_limit=50.0))
    assert s.expected_start("2") is None


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="one of fifo, backfill"):
        Scheduler(policy="lottery")


def test_the_free_index_places_as_the_sorted_scan_did():
    """Most free agent first, ties by name, across partitions (the order tests and users rely on)."""
    s = Scheduler()
    agent(s, "a", 2, partitions=("p",))
    agent(s, "b", 4, partitions=("q",))
    agent(s, "c", 4, partitions=("p", "q"))
    for job, slots, part in (("1", 1, "p"), ("2", 3, "q"), ("3", 2, None), ("4", 2, "p"), ("5", 1, "q")):
        pending(s, job, slots, partition=part)
    assert s.place() == [("1", "c"), ("2", "b"), ("3", "c"), ("4", "a"), ("5", "b")]


# ---- INV-BACKFILL-PROMISE ---------------------------------------------------------

LIMITS = st.sampled_from((None, 5.0, 20.0, 60.0, 300.0))


@st.composite
def clusters(draw):
    agents = draw(st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=3))
    jobs = draw(st.lists(st.tuples(st.integers(1, 8), LIMITS, st.sampled_from((None, G, 2 * G)),
                                   st.booleans(), st.integers(0, 2), st.floats(0, 50)), max_size=12))
    return agents, jobs, draw(st.floats(0, 100))


def build(agents, jobs, now, reserve_after=0.0):
    """Agents (slots, schedules memory: 4 GiB); jobs (slots, limit, mem, running?, priority, started:
    None for one whose start is not reported yet; a pending job's: when it was queued)."""
    s = Scheduler(policy="backfill", reserve_after=reserve_after)
    names = [f"a{i}" for i in range(len(agents))]
    used = dict.fromkeys(names, 0)
    mem_used = dict.fromkeys(names, 0)
    runs: dict[str, list] = {n: [] for n in names}
    for i, (slots, limit, mem, run, priority, started) in enumerate(jobs, 1):
        job = str(i)
        target = next((n for n, (cap, has_mem) in zip(names, agents)
                       if used[n] + slots <= cap and (mem is None or has_mem and mem_used[n] + mem <= 4 * G)), None)
        if run and target is not None:
            used[target] += slots
            mem_used[target] += mem or 0
            at = None if started is None else min(started, now)  # None: its start not reported yet
            running(s, job, target, slots, started=at, limit=limit, mem=mem)
            runs[target].append((math.inf if limit is None else (now if at is None else at) + limit, (slots, mem, 0)))
        else:
            pending(s, job, slots, limit=limit, priority=priority, mem=mem, queued_at=started)
    for n, (cap, has_mem) in zip(names, agents):
        agent(s, n, cap, used=used[n], mem=4 * G - mem_used[n] if has_mem else None)
    return s, runs, used, mem_used


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_inv_backfill_promise(case):
    """INV-BACKFILL-PROMISE: after a pass's proposals start (each running to its time limit), every
    job the pass gave a reservation can still start on its agent by the promised time."""
    check_promises(*case)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_inv_backfill_promise_with_reserve_after(case):
    """The same with ``reserve_after`` 30 s (each pending job queued at its drawn time): the
    reserved job may then be one further down the queue, and still nothing delays it."""
    check_promises(*case, reserve_after=30.0)


def check_promises(agents, jobs, now, reserve_after=0.0):
    s, runs, used, mem_used = build(agents, jobs, now, reserve_after)
    proposals = s.place(now=now)
    asks = {str(i): (slots, mem, limit) for i, (slots, limit, mem, *_rest) in enumerate(jobs, 1)}
    for job, name in proposals:
        slots, mem, limit = asks[job]
        used[name] += slots
        mem_used[name] += mem or 0
        runs[name].append((math.inf if limit is None else now + limit, (slots, mem, 0)))
    caps = dict(zip((f"a{i}" for i in range(len(agents))), agents))
    for job, r in s.reservations.items():
        slots, mem, _ = asks[job]
        cap, has_mem = caps[r.agent]
        free = (cap - used[r.agent], 4 * G - mem_used[r.agent] if has_mem else None, 0)
        assert soonest((slots, mem, 0), free, runs[r.agent], now) <= r.start, (
            f"INV-BACKFILL-PROMISE: job {job} was promised {r.start} on {r.agent}, the pass's proposals "
            f"{proposals} delay it")


@st.composite
def full_clusters(draw):
    """Up to 6 agents, each running jobs that fill it, and jobs pending behind them."""
    agents = draw(st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=6))
    jobs = []
    for cap, _ in agents:
        left = cap
        while left:
            slots = draw(st.integers(1, left))
            jobs.append((slots, draw(LIMITS), None, True, 0, draw(st.none() | st.floats(0, 50))))
            left -= slots
    jobs += draw(st.lists(st.tuples(st.integers(1, 8), LIMITS, st.sampled_from((None, G))), max_size=4).map(
        lambda pending: [(slots, limit, mem, False, 0, 0.0) for slots, limit, mem in pending]))
    return agents, jobs, draw(st.floats(0, 100))


@settings(max_examples=300, deadline=None)
@given(full_clusters())
# a0's job has no reported start yet (it ends at now + 5), a1's ends at 300: a0 is the soonest.
@example(([(2, False), (2, False)], [(2, 5.0, None, True, 0, None), (2, 300.0, None, True, 0, 0.0),
                                     (2, 10.0, None, False, 0, 0.0)], 10.0))
def test_the_reservation_is_the_soonest_start_any_agent_can_promise(case):
    """With nothing free, the top job's reservation is on the agent where it starts soonest (the
    search in first-end order stops early; it must not stop before the best), or none when no
    agent can ever run it."""
    agents, jobs, now = case
    s, runs, used, mem_used = build(agents, jobs, now)
    assert s.place(now=now) == []
    top = next((str(i) for i, job in enumerate(jobs, 1) if not job[3]), None)
    if top is None:
        return
    slots, _, mem, *_ = jobs[int(top) - 1]
    starts = {}
    for i, (cap, has_mem) in enumerate(agents):
        name = f"a{i}"
        free = (cap - used[name], 4 * G - mem_used[name] if has_mem else None, 0)
        if cap >= slots and (mem is None or has_mem):
            starts[name] = soonest((slots, mem, 0), free, runs[name], now)
    best = min(starts.values(), default=math.inf)
    if best == math.inf:
        assert s.expected_start(top) is None
    else:
        assert s.expected_start(top) is not None and s.expected_start(top)[0] == best


def test_two_partitions_sharing_an_agent_are_not_both_promised_it():
    """Agent x is in partitions A and B, y in B only; both fill up until different times.  A's top
    job is promised x; B's must not be promised x too (both cannot start there then): it gets y,
    and a long job of B does not take y from it."""
    s = Scheduler(policy="backfill")
    agent(s, "x", 2, used=2, partitions=("A", "B"))
    agent(s, "y", 2, used=1, partitions=("B",))
    running(s, "1", "x", 2, started=0.0, limit=100.0)
    running(s, "2", "y", 1, started=0.0, limit=150.0)
    pending(s, "3", 2, limit=50.0, partition="A")
    pending(s, "4", 2, limit=50.0, partition="B")
    pending(s, "5", 1, limit=10_000.0, partition="B")
    assert s.place(now=10.0) == []  # job 5 would hold y past 150, job 4's start there
    assert s.expected_start("3") == (100.0, "x")
    assert s.expected_start("4") == (150.0, "y")


def test_a_full_cluster_still_reserves_for_the_top_job_and_for_every_partition():
    """No free slot anywhere: the pass places nothing, yet the reservations are those of the queue
    as it is (a new top job, a partition the pass before never reached), not the previous pass's."""
    s = Scheduler(policy="backfill")
    agent(s, "x", 4, used=4, partitions=("p",))
    agent(s, "y", 4, used=4, partitions=("q",))
    running(s, "1", "x", 4, started=0.0, limit=100.0)
    running(s, "2", "y", 4, started=0.0, limit=150.0)
    pending(s, "3", 4, limit=10.0, partition="p")
    for job in range(4, 40):
        pending(s, str(job), 2, limit=10.0, partition="p")
    pending(s, "40", 4, limit=10.0, partition="q")
    assert s.place(now=10.0) == []
    assert s.expected_start("3") == (100.0, "x") and s.expected_start("40") == (150.0, "y")
    assert s.leads("3") and s.leads("40") and not s.leads("4")
    pending(s, "41", 4, limit=10.0, priority=5, partition="p")  # a new top job of p
    assert s.place(now=20.0) == []
    assert s.expected_start("41") == (100.0, "x") and s.expected_start("3") is None
    assert s.leads("41") and not s.leads("3")


def test_a_closed_start_gate_promises_nothing():
    from reckon.model.scheduler import DispatchHold

    s = cluster("backfill")
    s.place(now=10.0)
    assert s.expected_start("2") is not None and s.leads("2")
    s.notify(DispatchHold(held=True, reason="test"))
    assert s.place(now=11.0) == []
    assert s.expected_start("2") is None and not s.leads("2")


def test_a_full_pass_examines_a_bounded_number_of_jobs():
    """Nothing free, every job in a partition of its own: the pass meets the first SCAN_WHEN_FULL
    jobs (each leads its partition) and stops there."""
    from reckon.model.scheduler import SCAN_WHEN_FULL

    s = Scheduler(policy="backfill")
    agent(s, "x", 4, used=4, partitions=("p",))
    running(s, "1", "x", 4, started=0.0, limit=100.0)
    jobs = [str(n) for n in range(2, SCAN_WHEN_FULL + 102)]
    for job in jobs:
        pending(s, job, 1, limit=10.0, partition=f"p{job}")
    assert s.place(now=10.0) == []
    assert s.leading == set(jobs[:SCAN_WHEN_FULL])


def test_the_check_s_soonest_start_waits_for_a_held_licence():
    """The independent check counts generic resources too: an ask for the licence a running job
    holds fits when that job ends, never while one without a time limit holds it (the
    scheduler's reservation refuses such a job, the stateful machine's liveness check agrees)."""
    ask, free = (1, None, 0, (("lic", 1),)), (2, None, 0, {"lic": 0})
    assert soonest(ask, free, [(50.0, (1, None, 0, (("lic", 1),)))], 10.0) == 50.0
    assert soonest(ask, free, [(math.inf, (1, None, 0, (("lic", 1),)))], 10.0) == math.inf
    assert soonest(ask[:3], free[:3], [(math.inf, (1, None, 0))], 10.0) == 10.0  # no gres asked: CPUs free now
