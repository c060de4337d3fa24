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
class _AgentView:
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


class Scheduler:
    """FIFO placement by free slots onto connected, non-reconciling, non-drained agents."""

    def __init__(self, limits: UserLimits = NO_LIMITS) -> None:
        # ready job -> (queue key, slots, throttled array, what it asks beyond slots).  The key is
        # (-priority, order): higher priority first, ties in submission order (``queue_key``).
        self._pending: dict[str, tuple[Key, int, str | None, Need]] = {}
        self._v7: set[str] = set()  # pending jobs that only agents of version >= 7 may run
        self._partition_of: dict[str, str] = {}  # pending job -> its partition (jobs with one only)
        # The queue with lazy deletion: entries of jobs no longer pending, or whose key changed
        # (a new priority), are dropped when they surface, so a dispatch or a reprioritized job
        # costs O(log n), not a re-sort.
        self._queue: list[tuple[Key, str]] = []
        self._agents: dict[str, _AgentView] = {}
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
            else:
                self._pending.pop(note.job, None)
                self._v7.discard(note.job)
                self._partition_of.pop(note.job, None)
        elif isinstance(note, AgentNote):
            self._agents[note.agent] = _AgentView(note.slots, note.used, note.connected, note.reconciling,
                                                  note.drained, note.free_mem, note.free_gpus, note.free_gres,
                                                  note.v7, note.partitions)
        elif isinstance(note, DispatchHold):
            self._held = note.held
        else:
            raise TypeError(f"not a scheduler note: {note!r}")

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
        memory, GPUs, gres).

        ``now`` (the controller's clock, as events carry it) is what backfill measures expected
        ends against; FIFO does not use it."""
        free = {name: a.slots - a.used for name, a in self._agents.items() if a.available and a.slots > a.used}
        # Free memory, GPUs and gres per agent, copied when a job first asks for them in this call.
        beyond: dict[str, list] = {}
        proposals: list[tuple[str, str]] = []
        if not free or self._held:
            return proposals
        if self._parked:
            self._unpark()
        examined: dict[str, tuple[int, str]] = {}
        # Running plus proposed jobs per throttled array: %MAX holds within one call too.
        array_load = {array: len(jobs) for array, jobs in self._array_running.items()}
        proposed: dict[str, list[int]] = {}  # user -> [jobs, slots] proposed in this call
        queue = self._queue
        while queue and free and (limit is None or len(proposals) < limit):
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
            for name in sorted(free, key=lambda n: (-free[n], n)):
                if v7 and not self._agents[name].v7:
                    continue
                if partition is not None and partition not in self._agents[name].partitions:
                    continue
                if free[name] >= slots and (need is None or self._take(need, name, beyond)):
                    proposals.append((job, name))
                    if array is not None:
                        array_load[array] = array_load.get(array, 0) + 1
                    if user is not None:
                        mine = proposed.setdefault(user, [0, 0])
                        mine[0] += 1
                        mine[1] += slots
                    free[name] -= slots
                    if not free[name]:
                        del free[name]
                    break
        # Proposals are not decisions: every examined job stays queued until a
        # note says it left PENDING (the controller may refuse a proposal).
        for entry in examined.values():
            heapq.heappush(queue, entry)
        return proposals

    def _take(self, need: Need, name: str, extra: dict[str, list]) -> bool:
        """Whether ``need`` fits what is left of agent ``name`` in this call; if so, take it."""
        assert need is not None
        mem, gpus, gres = need
        left = extra.get(name)
        if left is None:
            a = self._agents[name]
            left = extra[name] = [a.free_mem, a.free_gpus, dict(a.free_gres)]
        if mem is not None and (left[0] is None or mem > left[0]) or gpus > left[1]:
            return False
        if any(count > left[2].get(kind, 0) for kind, count in gres):
            return False
        if mem is not None:
            left[0] -= mem
        left[1] -= gpus
        for kind, count in gres:
            left[2][kind] -= count
        return True

    def view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]], bool, dict[str, tuple]]:
        """(pending jobs in queue order, agent -> (slots, used, available), dispatch held,
        agent -> (free memory, free GPUs, free gres))."""
        return (
            tuple(self._fifo()),
            {name: (a.slots, a.used, a.available) for name, a in self._agents.items()},
            self._held,
            {name: (a.free_mem, a.free_gpus, a.free_gres) for name, a in self._agents.items()},
        )
