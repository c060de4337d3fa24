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


class AgentNote(NamedTuple):
    agent: str
    slots: int
    used: int
    connected: bool
    reconciling: bool
    drained: bool = False  # the operator drained it: no new placements


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

    @property
    def available(self) -> bool:
        return self.connected and not self.reconciling and not self.drained


class Scheduler:
    """FIFO placement by free slots onto connected, non-reconciling, non-drained agents."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[int, int, str | None]] = {}  # ready job -> (order, slots, throttled array)
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
                    self._pending[note.job] = (note.order, note.slots,
                                               note.array if note.array_max is not None else None)
                    heapq.heappush(self._queue, (note.order, note.job))
            else:
                self._pending.pop(note.job, None)
        elif isinstance(note, AgentNote):
            self._agents[note.agent] = _AgentView(note.slots, note.used, note.connected, note.reconciling,
                                                  note.drained)
        elif isinstance(note, DispatchHold):
            self._held = note.held
        else:
            raise TypeError(f"not a scheduler note: {note!r}")

    def _fifo(self) -> Iterator[str]:
        return iter(sorted(self._pending, key=lambda job: self._pending[job][0]))

    def place(self, limit: int | None = None) -> list[tuple[str, str]]:
        """Propose (job, agent) pairs in FIFO order, first fit by free slots."""
        free = {name: a.slots - a.used for name, a in self._agents.items() if a.available and a.slots > a.used}
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
            _, slots, array = self._pending[job]
            if array is not None and array_load.get(array, 0) >= self._array_max[array]:
                continue  # the array runs its %MAX already: the job waits for one to end
            for name in sorted(free, key=lambda n: (-free[n], n)):
                if free[name] >= slots:
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

    def view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]], bool]:
        """(pending jobs in FIFO order, agent -> (slots, used, available), dispatch held)."""
        return (
            tuple(self._fifo()),
            {name: (a.slots, a.used, a.available) for name, a in self._agents.items()},
            self._held,
        )
