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


class AgentNote(NamedTuple):
    agent: str
    slots: int
    used: int
    connected: bool
    reconciling: bool


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

    @property
    def available(self) -> bool:
        return self.connected and not self.reconciling


class Scheduler:
    """FIFO placement by free slots onto connected, non-reconciling agents."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[int, int]] = {}  # job -> (order, slots)
        # FIFO queue with lazy deletion: entries of jobs no longer pending are
        # dropped when they surface, so a dispatch costs O(log n), not a re-sort.
        self._queue: list[tuple[int, str]] = []
        self._agents: dict[str, _AgentView] = {}
        self._held = False  # the controller's start gate is closed

    def notify(self, note: JobNote | AgentNote | DispatchHold) -> None:
        if isinstance(note, JobNote):
            if note.state is JobState.PENDING:
                if note.job not in self._pending:
                    self._pending[note.job] = (note.order, note.slots)
                    heapq.heappush(self._queue, (note.order, note.job))
            else:
                self._pending.pop(note.job, None)
        elif isinstance(note, AgentNote):
            self._agents[note.agent] = _AgentView(note.slots, note.used, note.connected, note.reconciling)
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
        queue = self._queue
        while queue and free and (limit is None or len(proposals) < limit):
            order, job = heapq.heappop(queue)
            if job in examined or self._pending.get(job, (None,))[0] != order:
                continue  # a job that left the queue, or a second entry of one
            examined[job] = (order, job)
            slots = self._pending[job][1]
            for name in sorted(free, key=lambda n: (-free[n], n)):
                if free[name] >= slots:
                    proposals.append((job, name))
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
