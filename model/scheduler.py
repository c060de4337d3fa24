"""The scheduler: its own view of jobs and agents, fed only by notifications.

It never reads the controller's tables.  The controller hands it a ``JobNote``
or ``AgentNote`` for every change (through ``Notify`` commands), the scheduler
proposes placements, and the controller decides.  After the notifications
drain, ``view()`` equals ``Controller.scheduler_view()``: an invariant.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from .backfill import INFINITY, Free, Release, Reservation, Usage, earliest_start
from .free_slots import BestFit, FreeIndex
from .jobs import JobState

# Notes are immutable named tuples rather than frozen dataclasses: a round
# that finishes 100k jobs makes 100k of them, and a frozen dataclass's
# __init__ (one object.__setattr__ per field) cost three times as much.
# The controller builds them from its own validated state, so they carry no
# checks of their own.


class JobNote(NamedTuple):
    job: str
    order: int  # submission order: FIFO key
    state: JobState
    slots: int
    agent: str | None
    ready: bool = True  # PENDING, not held, every dependency COMPLETED (model/policy.py ready)
    array: str | None = None  # the job's array id
    array_max: int | None = None  # the array's %MAX: at most this many of it RUNNING at once
    user: str | None = None  # the owner's name (the per-user limits count by it); None: token mode
    # Issue #20: what it asks beyond slots (the spec's mem, gpus, gres).
    mem: int | None = None
    gpus: int = 0
    gres: tuple[tuple[str, int], ...] = ()
    v7: bool = False  # it uses version 7 spec fields: only agents of version >= 7 may run it
    # Issue #22: what priority ordering and backfill work with.
    priority: int = 0  # the job's priority (model/priority.py): higher goes first; ties by order
    time_limit: float | None = None  # seconds: the spec's time limit, else its partition's default
    partition: str | None = None  # the partition it runs in (None: the cluster has no partitions)
    started: float | None = None  # RUNNING: when its attempt started (its expected end for backfill)
    # PENDING: when it was submitted (the age factor's start): backfill reserves only for a job
    # queued ``reserve_after`` seconds or longer.
    queued_at: float | None = None


class AgentNote(NamedTuple):
    agent: str
    slots: int
    used: int
    connected: bool
    reconciling: bool
    drained: bool = False  # the operator drained it: no new placements
    # Issue #20: what is free beyond slots (AgentInfo.free): memory (None: it schedules none), GPUs, gres.
    free_mem: int | None = None
    free_gpus: int = 0
    free_gres: tuple[tuple[str, int], ...] = ()
    v7: bool = True  # its connection speaks version 7 or later (runs jobs using version 7 fields)
    partitions: tuple[str, ...] = ()  # issue #22: the partitions it belongs to, sorted


# What a pending job asks beyond slots, or None when it asks nothing more (most jobs: one test).
Need = tuple[int | None, int, tuple[tuple[str, int], ...]] | None
# A pending job's place in the queue: (-priority, submission order), smallest first.
Key = tuple[int, int]


def queue_key(note: JobNote) -> Key:
    """Higher priority first; equal priorities in submission order (FIFO when all are 0)."""
    return (-note.priority, note.order)


class UserLimits(NamedTuple):
    """Per-user limits on what runs at once (ControllerConfig); None: no such limit.

    They govern starts: the scheduler proposes no job past its owner's limit.  A job RUNNING
    already (adopted, or started before the limit was lowered) counts but is never stopped."""

    max_running: int | None = None  # RUNNING jobs per user
    max_cpus: int | None = None  # slots (CPUs) of RUNNING jobs per user

    def refusal(self, user: str, running: int, cpus: int, slots: int) -> str | None:
        """Why a job of ``slots`` CPUs of ``user`` may not start now, given what the user runs; None if it may."""
        if self.max_running is not None and running + 1 > self.max_running:
            return (f"waiting: {user} runs {running} job{'s' if running != 1 else ''}, "
                    f"the per-user limit (max_running_per_user) is {self.max_running}")
        if self.max_cpus is not None and cpus + slots > self.max_cpus:
            return (f"waiting: {user} runs jobs on {cpus} CPU{'s' if cpus != 1 else ''} and this one needs "
                    f"{slots}, the per-user limit (max_cpus_per_user) is {self.max_cpus}")
        return None

    @property
    def any(self) -> bool:
        return self.max_running is not None or self.max_cpus is not None


NO_LIMITS = UserLimits()


class DispatchHold(NamedTuple):
    """The controller's start gate (``model.startup``): while held, nothing is placed."""

    held: bool
    reason: str  # why it closed or opened, for the operator's log


@dataclass(slots=True)
class AgentView:
    slots: int
    used: int
    connected: bool
    reconciling: bool
    drained: bool
    free_mem: int | None = None
    free_gpus: int = 0
    free_gres: tuple[tuple[str, int], ...] = ()
    v7: bool = True
    partitions: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        return self.connected and not self.reconciling and not self.drained


POLICIES = ("fifo", "backfill")
# Once no agent has a free slot, how many more pending jobs a pass examines at most to meet the
# first blocked job of every partition (its reservation, ``leads``): a bound on a full cluster's pass.
SCAN_WHEN_FULL = 500


class Scheduler:
    """Placement in queue order onto connected, non-reconciling, non-drained agents.

    ``fifo``: every job that fits starts, in queue order (first fit: a job that does not fit is
    passed over).  ``backfill``: the same, but the first job of each partition that does not fit
    and has been queued ``reserve_after`` seconds or longer gets a reservation (model/backfill.py)
    that no job behind it may delay (Slurm's ``bf_min_age_reserve``: a younger blocked job holds
    nothing back, so small jobs flow around it as under FIFO until it has waited that long)."""

    def __init__(self, limits: UserLimits = NO_LIMITS, *, policy: str = "fifo", reserve_after: float = 0.0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduler policy {policy!r}: one of {', '.join(POLICIES)}")
        if isinstance(reserve_after, bool) or not isinstance(reserve_after, (int, float)) or not 0 <= reserve_after < 1e9:
            raise ValueError(f"reserve_after must be a number of seconds >= 0, got {reserve_after!r}")
        self.policy = policy
        self.reserve_after = float(reserve_after)
        # ready job -> (queue key, slots, throttled array, what it asks beyond slots).  The key is
        # (-priority, order): higher priority first, ties in submission order (``queue_key``).
        self._pending: dict[str, tuple[Key, int, str | None, Need]] = {}
        self._v7: set[str] = set()  # pending jobs that only agents of version >= 7 may run
        self._partition_of: dict[str, str] = {}  # pending job -> its partition (jobs with one only)
        # The queue with lazy deletion: entries of jobs no longer pending, or whose key changed
        # (a new priority), are dropped when they surface, so a dispatch or a reprioritized job
        # costs O(log n), not a re-sort.
        self._queue: list[tuple[Key, str]] = []
        self._agents: dict[str, AgentView] = {}
        # Available agents with free slots -> how many, kept by the agent notes: a pass copies it
        # (a C-level dict copy) rather than walk every agent's view.
        self._free_now: dict[str, int] = {}
        self._array_max: dict[str, int] = {}  # throttled array -> its %MAX
        self._array_running: dict[str, set[str]] = {}  # throttled array -> its jobs RUNNING (as noted)
        self._held = False  # the controller's start gate is closed
        # Per-user limits (UserLimits).  What each user runs, from the RUNNING notes; a job met at
        # its user's limit is parked in that user's own queue, out of the FIFO, and comes back when
        # one of the user's jobs leaves RUNNING: a pass never walks a user's backlog again.
        self._limits = limits
        self._user_of: dict[str, str] = {}  # pending job -> its owner's name (limited jobs only)
        self._running_of: dict[str, tuple[str, int]] = {}  # RUNNING job -> (user, slots)
        self._user_running: dict[str, list[int]] = {}  # user -> [RUNNING jobs, their slots]
        self._parked: dict[str, list[tuple[Key, str]]] = {}  # user -> heap of (key, job) at the limit
        # Backfill only: pending jobs' time limits, and what runs where until when.
        self._limit_of: dict[str, float] = {}  # pending job -> its time limit (jobs with one)
        self._queued_at: dict[str, float] = {}  # pending job -> when it was submitted (reserve_after)
        self._running_at: dict[str, dict[str, tuple[float | None, float | None, Usage]]] = {}
        self._runs_on: dict[str, str] = {}  # RUNNING job -> its agent
        # Agent -> the earliest end of a job running there, and a heap of (end, agent) with lazy
        # deletion: the order ``_reserve`` tries agents in (``_note_first_end``).
        self._first_end: dict[str, float] = {}
        self._end_heap: list[tuple[float, str]] = []
        # The reservations of the latest pass that ran (job -> Reservation): ``expected_start``.
        self.reservations: dict[str, Reservation] = {}
        self._per_partition: dict[str | None, int] = {}  # pending jobs per partition (None: none named)
        self.leading: set[str] = set()  # the latest pass's first blocked job of each partition (``leads``)

    def notify(self, note: JobNote | AgentNote | DispatchHold) -> None:
        if isinstance(note, JobNote):
            if note.array is not None and note.array_max is not None:
                self._array_max[note.array] = note.array_max
                running = self._array_running.setdefault(note.array, set())
                if note.state is JobState.RUNNING:
                    running.add(note.job)
                else:
                    running.discard(note.job)
            if self._limits.any and note.user is not None:
                self._note_user(note)
            if self.policy == "backfill":
                self._note_backfill(note)
            if note.job in self._pending:
                self._uncount(self._partition_of.get(note.job))
            if note.state is JobState.PENDING and note.ready:
                key = queue_key(note)
                known = self._pending.get(note.job)
                if known is None or known[0] != key:
                    need = (note.mem, note.gpus, note.gres) if note.mem is not None or note.gpus or note.gres else None
                    self._pending[note.job] = (key, note.slots,
                                               note.array if note.array_max is not None else None, need)
                    heapq.heappush(self._queue, (key, note.job))  # an old entry is dropped when it surfaces
                    if note.v7:
                        self._v7.add(note.job)
                if note.partition is not None:  # a job without --partition follows the default's changes
                    self._partition_of[note.job] = note.partition
                else:
                    self._partition_of.pop(note.job, None)
                self._per_partition[note.partition] = self._per_partition.get(note.partition, 0) + 1
                if len(self._queue) > 2 * len(self._pending) + 64:
                    self._compact()
            else:
                self._pending.pop(note.job, None)
                self._v7.discard(note.job)
                self._partition_of.pop(note.job, None)
                self.leading.discard(note.job)
        elif isinstance(note, AgentNote):
            view = self._agents[note.agent] = AgentView(note.slots, note.used, note.connected, note.reconciling,
                                                         note.drained, note.free_mem, note.free_gpus,
                                                         note.free_gres, note.v7, note.partitions)
            if view.available and view.slots > view.used:
                self._free_now[note.agent] = view.slots - view.used
            else:
                self._free_now.pop(note.agent, None)
        elif isinstance(note, DispatchHold):
            self._held = note.held
        else:
            raise TypeError(f"not a scheduler note: {note!r}")

    def _uncount(self, partition: str | None) -> None:
        left = self._per_partition[partition] - 1
        if left:
            self._per_partition[partition] = left
        else:
            del self._per_partition[partition]

    def _compact(self) -> None:
        """Rebuild the queue and the parked heaps from the pending jobs, when stale entries (of
        jobs dispatched, or whose priority changed) outnumber the live ones: a sweep that
        reprioritizes every pending job would otherwise grow the queue by the backlog each time,
        and entries of jobs that never surface would stay.  O(pending) when it runs, after at
        least as many pushes: O(1) amortized per note."""
        parked_ok: set[str] = set()
        for user in list(self._parked):
            heap = []
            for key, job in self._parked[user]:
                entry = self._pending.get(job)
                if entry is not None and entry[0] == key and job not in parked_ok:
                    parked_ok.add(job)
                    heap.append((key, job))
            if heap:
                heapq.heapify(heap)
                self._parked[user] = heap
            else:
                del self._parked[user]
        self._queue = [(entry[0], job) for job, entry in self._pending.items() if job not in parked_ok]
        heapq.heapify(self._queue)

    def leads(self, job: str) -> bool:
        """Whether ``job`` was the first of its partition the latest pass could not place (the one
        backfill reserves for): it waits for resources, not behind a job queued before it."""
        return job in self.leading

    def _note_backfill(self, note: JobNote) -> None:
        """Keep the pending jobs' time limits and the running jobs' expected ends."""
        if note.state is JobState.PENDING and note.time_limit is not None:
            self._limit_of[note.job] = note.time_limit
        else:
            self._limit_of.pop(note.job, None)
        if note.state is JobState.PENDING and note.queued_at is not None:
            self._queued_at[note.job] = note.queued_at
        else:
            self._queued_at.pop(note.job, None)
        if note.state is not JobState.PENDING:
            self.reservations.pop(note.job, None)
        was = self._runs_on.pop(note.job, None)
        if was is not None:
            on = self._running_at[was]
            del on[note.job]
            if not on:
                del self._running_at[was]
            self._note_first_end(was)
        if note.state is JobState.RUNNING and note.agent is not None:
            self._runs_on[note.job] = note.agent
            self._running_at.setdefault(note.agent, {})[note.job] = (
                note.started, note.time_limit, Usage(note.slots, note.mem, note.gpus, note.gres))
            self._note_first_end(note.agent)

    def _note_first_end(self, agent: str) -> None:
        """Keep ``agent``'s entry in the heap of first ends: the earliest any job running there
        may end (started + time limit; -inf for one whose start is not reported yet, whose end is
        reckoned from the pass's now), a lower bound on when a blocked job can start there."""
        on = self._running_at.get(agent)
        if not on:
            self._first_end.pop(agent, None)
            return
        first = min(INFINITY if limit is None else -INFINITY if started is None else started + limit
                    for started, limit, _ in on.values())
        if self._first_end.get(agent) != first:
            self._first_end[agent] = first
            heapq.heappush(self._end_heap, (first, agent))
            if len(self._end_heap) > 2 * len(self._first_end) + 64:  # stale entries outnumber live ones
                self._end_heap = [(end, name) for name, end in self._first_end.items()]
                heapq.heapify(self._end_heap)

    def _note_user(self, note: JobNote) -> None:
        """Keep what each user runs (RUNNING jobs and their slots), from the notes."""
        if note.state is JobState.PENDING:
            self._user_of[note.job] = note.user  # type: ignore[assignment]
        else:
            self._user_of.pop(note.job, None)
        was = self._running_of.pop(note.job, None)
        if was is not None:
            load = self._user_running[was[0]]
            load[0] -= 1
            load[1] -= was[1]
        if note.state is JobState.RUNNING:
            self._running_of[note.job] = (note.user, note.slots)  # type: ignore[assignment]
            load = self._user_running.setdefault(note.user, [0, 0])  # type: ignore[arg-type]
            load[0] += 1
            load[1] += note.slots

    def _unpark(self) -> None:
        """Put parked jobs whose users are under their limits again back into the FIFO, oldest
        first, as many as the limits leave room for: O(users with parked jobs) per pass."""
        for user in list(self._parked):
            parked = self._parked[user]
            running, cpus = self.user_load(user)
            while parked:
                key, job = parked[0]
                entry = self._pending.get(job)
                if entry is None or entry[0] != key:
                    heapq.heappop(parked)  # no longer pending: dropped
                    continue
                if self._limits.refusal(user, running, cpus, entry[1]) is not None:
                    break
                heapq.heappush(self._queue, heapq.heappop(parked))
                running, cpus = running + 1, cpus + entry[1]
            if not parked:
                del self._parked[user]

    def user_load(self, user: str) -> tuple[int, int]:
        """(RUNNING jobs, their slots) of ``user``, as noted."""
        load = self._user_running.get(user)
        return (load[0], load[1]) if load is not None else (0, 0)

    def _fifo(self) -> Iterator[str]:
        return iter(sorted(self._pending, key=lambda job: self._pending[job][0]))

    def place(self, limit: int | None = None, now: float | None = None) -> list[tuple[str, str]]:
        """Propose (job, agent) pairs in queue order (``queue_key``), first fit by free slots (and
        memory, GPUs, gres): FIFO onto the agent with the most free slots (ties by name),
        backfill onto the one with the fewest that fit (best fit).

        ``now`` (the controller's clock, as events carry it) is what backfill measures expected
        ends against; FIFO does not use it, and without it backfill places as FIFO does.

        Cost: O(free agents) to copy the free ones (kept by the agent notes), then per examined
        job: FIFO O(log agents) when it fits the agent with the most free slots or when no agent
        has its slots, and one heap step
        more per agent it is tried on and does not fit; backfill (best fit) O(log agents) to find
        the first agent with enough slots, one step per agent passed over (memory, GPUs, a
        reservation), and O(agents) per placement to move the agent in its sorted lists.  Backfill
        adds one reservation per partition a pass, O(agents + their running jobs x log).  No sort
        of the agents per job; every pending job the pass examines is popped and pushed back,
        O(examined x log queue).  Once nothing is free the pass examines jobs only until it met
        the first blocked job of every partition with pending jobs, SCAN_WHEN_FULL at most, so a
        full cluster's pass costs O(agents + partitions' first jobs x log queue)."""
        backfill = self.policy == "backfill" and now is not None
        proposals: list[tuple[str, str]] = []
        if self._held:  # nothing starts and nothing is promised while the start gate is closed
            self.reservations, self.leading = {}, set()
            return proposals
        free = dict(self._free_now)  # this pass's copy: placements take from it
        # Free memory, GPUs and gres per agent, copied when a job first asks for them in this call.
        beyond: dict[str, list] = {}
        if self._parked:
            self._unpark()
        if backfill:
            self.reservations = {}
        self.leading = set()
        reserved_on: dict[str, list[Reservation]] = {}  # agent -> the reservations it holds
        # Partitions whose first blocked job this pass has met (and, under backfill, reserved for).
        # Once nothing is free, the pass goes on only to meet the first blocked job of every
        # partition with pending jobs, SCAN_WHEN_FULL jobs at most: the leaders and their
        # reservations are then those of the queue as it is, not of the pass before.
        tried: set[str | None] = set()
        # Under backfill, the partitions this pass has made its reservation for: the first blocked
        # job of each queued reserve_after or longer (with reserve_after 0, the first blocked job).
        reserved: set[str | None] = set()
        wanted = sum(1 for count in self._per_partition.values() if count > 0)
        scan_left = SCAN_WHEN_FULL
        proposed_ends: dict[str, list[Release]] = {}  # agent -> this pass's proposals, as releases
        index = (BestFit if backfill else FreeIndex)(free, self._agents)
        examined: dict[str, tuple[Key, str]] = {}
        # Running plus proposed jobs per throttled array: %MAX holds within one call too.
        array_load = {array: len(jobs) for array, jobs in self._array_running.items()}
        proposed: dict[str, list[int]] = {}  # user -> [jobs, slots] proposed in this call
        queue = self._queue
        while queue and (limit is None or len(proposals) < limit):
            if not free:
                if len(tried) >= wanted and (not backfill or len(reserved) >= wanted) or scan_left <= 0:
                    break
                scan_left -= 1
            key, job = heapq.heappop(queue)
            if job in examined or self._pending.get(job, (None,))[0] != key:
                continue  # a job that left the queue, a stale key, or a second entry of one
            examined[job] = (key, job)
            _, slots, array, need = self._pending[job]
            if array is not None and array_load.get(array, 0) >= self._array_max[array]:
                continue  # the array runs its %MAX already: the job waits for one to end
            user = self._user_of.get(job)
            if user is not None:
                running, cpus = self.user_load(user)
                mine = proposed.get(user, (0, 0))
                if self._limits.refusal(user, running + mine[0], cpus + mine[1], slots) is not None:
                    # At the limit (by what runs, or with this call's proposals): parked, out of the FIFO.
                    # Each pass first puts back as many as the user's noted load leaves room for, so a
                    # refused proposal or an ended job lets them out again.
                    del examined[job]
                    heapq.heappush(self._parked.setdefault(user, []), (key, job))
                    continue
            v7 = job in self._v7
            partition = self._partition_of.get(job)  # issue #22: only agents of the job's partition
            time_limit = self._limit_of.get(job)
            usage = Usage(slots, *need) if need is not None else Usage(slots)

            def fits(name: str) -> bool:
                if v7 and not self._agents[name].v7:
                    return False
                if need is not None and not self._fits(need, name, beyond):
                    return False
                held = reserved_on.get(name)
                return held is None or all(r.admits(usage, now, time_limit) for r in held)  # type: ignore[arg-type]

            name = index.take(slots, partition, fits) if free else None
            if name is None:
                if partition not in tried:
                    tried.add(partition)
                    self.leading.add(job)
                if backfill and partition not in reserved and self._reserves_for(job, now):  # type: ignore[arg-type]
                    reserved.add(partition)
                    self.leading.add(job)
                    self._reserve(job, usage, v7, partition, free, beyond, proposed_ends, reserved_on, now)  # type: ignore[arg-type]
                continue
            proposals.append((job, name))
            if need is not None:
                self._take(need, name, beyond)
            for r in reserved_on.get(name, ()):
                r.consume(usage, now, time_limit)  # type: ignore[arg-type]
            if backfill:
                end = now + time_limit if time_limit is not None else INFINITY  # type: ignore[operator]
                proposed_ends.setdefault(name, []).append(Release(end, usage))
            if array is not None:
                array_load[array] = array_load.get(array, 0) + 1
            if user is not None:
                mine = proposed.setdefault(user, [0, 0])
                mine[0] += 1
                mine[1] += slots
            index.used(name, slots)
        # Proposals are not decisions: every examined job stays queued until a
        # note says it left PENDING (the controller may refuse a proposal).
        for entry in examined.values():
            heapq.heappush(queue, entry)
        return proposals

    def _reserves_for(self, job: str, now: float) -> bool:
        """Whether blocked ``job`` is old enough for a reservation (``reserve_after``; a job noted
        without its queue time always is)."""
        queued = self._queued_at.get(job)
        return self.reserve_after <= 0 or queued is None or now - queued >= self.reserve_after

    def _reserve(self, job: str, usage: Usage, v7: bool, partition: str | None, free: dict[str, int],
                 beyond: dict[str, list], proposed_ends: dict[str, list[Release]],
                 reserved_on: dict[str, list[Reservation]], now: float) -> None:
        """Give ``job`` (blocked: the first of its partition this pass) the soonest start any
        agent it may run on can promise, counting running jobs and this pass's proposals.

        The job fits no agent it may use now, so on each it starts at the earliest when a job
        there ends: agents are tried in order of their first end (a heap kept by the notes, plus
        the agents of this pass's proposals, whose ends are not in it), and the search stops at
        the first agent whose first end is past the best start found.  An idle agent (nothing
        running) is not tried: what it lacks now it lacks for good.  Usually a few agents, not all."""
        best: Reservation | None = None
        agents = self._agents

        def consider(name: str) -> None:
            nonlocal best
            a = agents.get(name)
            if a is None or not a.available or a.slots < usage.slots or (v7 and not a.v7):
                return
            if name in reserved_on:
                return  # promised to another partition's job this pass (an agent in several): one promise each
            if partition is not None and partition not in a.partitions:
                return
            left = beyond.get(name)
            mem, gpus, gres = (left[0], left[1], tuple(left[2].items())) if left is not None else (
                a.free_mem, a.free_gpus, a.free_gres)
            releases = [Release(INFINITY if limit is None else max(now, (now if started is None else started) + limit),
                                held) for started, limit, held in self._running_at.get(name, {}).values()]
            releases += proposed_ends.get(name, ())
            r = earliest_start(job, name, usage, Free(free.get(name, 0), mem, gpus, gres), releases, now)
            if r is not None and (best is None or (r.start, r.agent) < (best.start, best.agent)):
                best = r

        for name in proposed_ends:
            consider(name)
        heap, first_end = self._end_heap, self._first_end
        popped: list[tuple[float, str]] = []
        while heap:
            end, name = heap[0]
            if first_end.get(name) != end:
                heapq.heappop(heap)  # stale: the agent's first end moved (or nothing runs there)
                continue
            if best is not None and end > best.start:
                break  # every agent from here on starts it later than the best found
            popped.append(heapq.heappop(heap))
            if name not in proposed_ends:
                consider(name)
        for entry in popped:
            heapq.heappush(heap, entry)
        if best is not None:
            reserved_on.setdefault(best.agent, []).append(best)
            self.reservations[job] = best

    def expected_start(self, job: str) -> tuple[float, str] | None:
        """(when, on which agent) the latest backfill pass promised ``job`` its start; None if it did not."""
        r = self.reservations.get(job)
        return (r.start, r.agent) if r is not None else None

    def _fits(self, need: Need, name: str, extra: dict[str, list]) -> bool:
        """Whether ``need`` fits what is left of agent ``name`` in this call."""
        assert need is not None
        mem, gpus, gres = need
        left = extra.get(name)
        if left is None:
            a = self._agents[name]
            left = extra[name] = [a.free_mem, a.free_gpus, dict(a.free_gres)]
        if mem is not None and (left[0] is None or mem > left[0]) or gpus > left[1]:
            return False
        return not any(count > left[2].get(kind, 0) for kind, count in gres)

    def _take(self, need: Need, name: str, extra: dict[str, list]) -> None:
        """Take ``need`` from what is left of agent ``name`` in this call (``_fits`` said it fits)."""
        assert need is not None
        mem, gpus, gres = need
        left = extra[name]
        if mem is not None:
            left[0] -= mem
        left[1] -= gpus
        for kind, count in gres:
            left[2][kind] -= count

    def view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]], bool, dict[str, tuple]]:
        """(pending jobs in queue order, agent -> (slots, used, available), dispatch held,
        agent -> (free memory, free GPUs, free gres))."""
        return (
            tuple(self._fifo()),
            {name: (a.slots, a.used, a.available) for name, a in self._agents.items()},
            self._held,
            {name: (a.free_mem, a.free_gpus, a.free_gres) for name, a in self._agents.items()},
        )
