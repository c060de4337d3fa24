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
    # Issue #20: what it asks beyond slots (the spec's mem, gpus, gres).
    mem: int | None = None
    gpus: int = 0
    gres: tuple[tuple[str, int], ...] = ()


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


# What a pending job asks beyond slots, or None when it asks nothing more (most jobs: one test).
Need = tuple[int | None, int, tuple[tuple[str, int], ...]] | None


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

    @property
    def available(self) -> bool:
        return self.connected and not self.reconciling and not self.drained


class Scheduler:
    """FIFO placement by free slots onto connected, non-reconciling, non-drained agents."""

    def __init__(self) -> None:
        # ready job -> (order, slots, throttled array, what it asks beyond slots)
        self._pending: dict[str, tuple[int, int, str | None, Need]] = {}
        # FIFO queue with lazy deletion: entries of jobs no longer pending are
        # dropped when they surface, so a dispatch costs O(log n), not a re-sort.
        self._queue: list[tuple[int, str]] = []
        self._agents: dict[str, _AgentView] = {}
        self._array_max: dict[str, int] = {}  # throttled array -> its %MAX
        self._array_running: dict[str, set[str]] = {}  # throttled array -> its jobs RUNNING (as noted)
        self._held = False  # the controller's start gate is closed

    def notify(self, note: JobNote | AgentNote | DispatchHold) -> None:
        if isinstance(note, JobNote):
            if note.array is not None and note.array_max is not None:
                self._array_max[note.array] = note.array_max
                running = self._array_running.setdefault(note.array, set())
                if note.state is JobState.RUNNING:
                    running.add(note.job)
                else:
                    running.discard(note.job)
            if note.state is JobState.PENDING and note.ready:
                if note.job not in self._pending:
                    need = (note.mem, note.gpus, note.gres) if note.mem is not None or note.gpus or note.gres else None
                    self._pending[note.job] = (note.order, note.slots,
                                               note.array if note.array_max is not None else None, need)
                    heapq.heappush(self._queue, (note.order, note.job))
            else:
                self._pending.pop(note.job, None)
        elif isinstance(note, AgentNote):
            self._agents[note.agent] = _AgentView(note.slots, note.used, note.connected, note.reconciling,
                                                  note.drained, note.free_mem, note.free_gpus, note.free_gres)
        elif isinstance(note, DispatchHold):
            self._held = note.held
        else:
            raise TypeError(f"not a scheduler note: {note!r}")

    def _fifo(self) -> Iterator[str]:
        return iter(sorted(self._pending, key=lambda job: self._pending[job][0]))

    def place(self, limit: int | None = None) -> list[tuple[str, str]]:
        """Propose (job, agent) pairs in FIFO order, first fit by free slots (and memory, GPUs, gres)."""
        free = {name: a.slots - a.used for name, a in self._agents.items() if a.available and a.slots > a.used}
        # Free memory, GPUs and gres per agent, copied when a job first asks for them in this call.
        extra: dict[str, list] = {}
        proposals: list[tuple[str, str]] = []
        if not free or self._held:
            return proposals
        examined: dict[str, tuple[int, str]] = {}
        # Running plus proposed jobs per throttled array: %MAX holds within one call too.
        array_load = {array: len(jobs) for array, jobs in self._array_running.items()}
        queue = self._queue
        while queue and free and (limit is None or len(proposals) < limit):
            order, job = heapq.heappop(queue)
            if job in examined or self._pending.get(job, (None,))[0] != order:
                continue  # a job that left the queue, or a second entry of one
            examined[job] = (order, job)
            _, slots, array, need = self._pending[job]
            if array is not None and array_load.get(array, 0) >= self._array_max[array]:
                continue  # the array runs its %MAX already: the job waits for one to end
            for name in sorted(free, key=lambda n: (-free[n], n)):
                if free[name] >= slots and (need is None or self._take(need, name, extra)):
                    proposals.append((job, name))
                    if array is not None:
                        array_load[array] = array_load.get(array, 0) + 1
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
        """(pending jobs in FIFO order, agent -> (slots, used, available), dispatch held,
        agent -> (free memory, free GPUs, free gres))."""
        return (
            tuple(self._fifo()),
            {name: (a.slots, a.used, a.available) for name, a in self._agents.items()},
            self._held,
            {name: (a.free_mem, a.free_gpus, a.free_gres) for name, a in self._agents.items()},
        )
