"""The scheduler: its own view of jobs and agents, fed only by notifications.

It never reads the controller's tables.  The controller hands it a ``JobNote``
or ``AgentNote`` for every change (through ``Notify`` commands), the scheduler
proposes placements, and the controller decides.  After the notifications
drain, ``view()`` equals ``Controller.scheduler_view()``: an invariant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .jobs import JobState


@dataclass(frozen=True, slots=True, kw_only=True)
class JobNote:
    job: str
    order: int  # submission order: FIFO key
    state: JobState
    slots: int
    agent: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentNote:
    agent: str
    slots: int
    used: int
    connected: bool
    reconciling: bool


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
        self._pending_sorted: list[tuple[int, str]] | None = []
        self._agents: dict[str, _AgentView] = {}

    def notify(self, note: JobNote | AgentNote) -> None:
        if isinstance(note, JobNote):
            if note.state is JobState.PENDING:
                if note.job not in self._pending:
                    self._pending[note.job] = (note.order, note.slots)
                    self._pending_sorted = None
            elif self._pending.pop(note.job, None) is not None:
                self._pending_sorted = None
        elif isinstance(note, AgentNote):
            self._agents[note.agent] = _AgentView(note.slots, note.used, note.connected, note.reconciling)
        else:
            raise TypeError(f"not a scheduler note: {note!r}")

    def _fifo(self) -> Iterator[str]:
        if self._pending_sorted is None:
            self._pending_sorted = sorted((order, job) for job, (order, _) in self._pending.items())
        for _, job in self._pending_sorted:
            if job in self._pending:
                yield job

    def place(self, limit: int | None = None) -> list[tuple[str, str]]:
        """Propose (job, agent) pairs in FIFO order, first fit by free slots."""
        free = {name: a.slots - a.used for name, a in self._agents.items() if a.available and a.slots > a.used}
        proposals: list[tuple[str, str]] = []
        if not free:
            return proposals
        for job in self._fifo():
            slots = self._pending[job][1]
            for name in sorted(free, key=lambda n: (-free[n], n)):
                if free[name] >= slots:
                    proposals.append((job, name))
                    free[name] -= slots
                    if not free[name]:
                        del free[name]
                    break
            if not free or (limit is not None and len(proposals) >= limit):
                break
        return proposals

    def view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]]]:
        """(pending jobs in FIFO order, agent -> (slots, used, available))."""
        return (
            tuple(self._fifo()),
            {name: (a.slots, a.used, a.available) for name, a in self._agents.items()},
        )
