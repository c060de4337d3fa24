"""The scheduler's indexes of the agents with free slots, for one pass (model/scheduler.py ``place``).

A pass builds one from the free slots it gathered and asks it, per job, for the first agent with
enough free slots that the job otherwise fits (``fits``); a placement moves that agent.  Neither
index sorts the agents per job.  ``FreeIndex`` (FIFO): most free first, ties by name, heaps with
lazy deletion, O(log agents) per step.  ``BestFit`` (backfill): fewest free that fit first, sorted
lists, a bisect to find and a list move per placement.  An index per partition asked for in the
pass, built when first asked.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Callable, Mapping, Protocol

Fits = Callable[[str], bool]


class InPartitions(Protocol):
    """What an index reads of an agent (model/scheduler.py ``AgentView``): its partitions."""

    @property
    def partitions(self) -> tuple[str, ...]: ...


class FreeIndex:
    """The agents with free slots, most free first (ties by name), as heaps with lazy deletion:
    one of every agent, and one per partition asked for in the pass, built when first asked.

    A heap entry (-free, name) is current while ``free[name]`` still equals it; a change pushes a
    new entry and the old one is dropped when it surfaces."""

    def __init__(self, free: dict[str, int], agents: Mapping[str, InPartitions]) -> None:
        self._free = free
        self._agents = agents
        self._heaps: dict[str | None, list[tuple[int, str]]] = {}

    def _heap(self, partition: str | None) -> list[tuple[int, str]]:
        heap = self._heaps.get(partition)
        if heap is None:
            heap = [(-f, n) for n, f in self._free.items()
                    if partition is None or partition in self._agents[n].partitions]
            heapq.heapify(heap)
            self._heaps[partition] = heap
        return heap

    def take(self, slots: int, partition: str | None, fits: Fits) -> str | None:
        """The first agent, most free first, with ``slots`` free for which ``fits(name)``; None if none."""
        heap = self._heap(partition)
        tried: list[tuple[int, str]] = []
        found = None
        while heap:
            negative, name = heap[0]
            if self._free.get(name) != -negative:
                heapq.heappop(heap)  # stale: the agent's free slots changed (or none are left)
                continue
            if -negative < slots:
                break  # the most free agent has too few: so has every other
            heapq.heappop(heap)
            if fits(name):
                found = name
                break
            tried.append((negative, name))
        for entry in tried:
            heapq.heappush(heap, entry)
        return found

    def used(self, name: str, slots: int) -> None:
        """``slots`` of agent ``name`` were proposed: its entries move (or leave, at none free)."""
        left = self._free[name] - slots
        if left <= 0:
            del self._free[name]
            return
        self._free[name] = left
        for partition, heap in self._heaps.items():
            if partition is None or partition in self._agents[name].partitions:
                heapq.heappush(heap, (-left, name))


class BestFit:
    """Backfill's index of the agents with free slots: the one with the *fewest* free slots that
    fits goes first (ties by name), so small jobs fill the fragments and the large holes are
    left for wide jobs.  Sorted lists of (free, name), one of every agent and one per partition
    asked for in the pass; a change is a bisect and a list move (memmove), not a sort."""

    def __init__(self, free: dict[str, int], agents: Mapping[str, InPartitions]) -> None:
        self._free = free
        self._agents = agents
        self._lists: dict[str | None, list[tuple[int, str]]] = {}

    def _list(self, partition: str | None) -> list[tuple[int, str]]:
        entries = self._lists.get(partition)
        if entries is None:
            entries = sorted((f, n) for n, f in self._free.items()
                             if partition is None or partition in self._agents[n].partitions)
            self._lists[partition] = entries
        return entries

    def take(self, slots: int, partition: str | None, fits: Fits) -> str | None:
        entries = self._list(partition)
        for i in range(bisect.bisect_left(entries, (slots, "")), len(entries)):
            if fits(entries[i][1]):
                return entries[i][1]
        return None

    def used(self, name: str, slots: int) -> None:
        was = self._free[name]
        left = was - slots
        if left <= 0:
            del self._free[name]
        else:
            self._free[name] = left
        for partition, entries in self._lists.items():
            if partition is None or partition in self._agents[name].partitions:
                del entries[bisect.bisect_left(entries, (was, name))]
                if left > 0:
                    bisect.insort(entries, (left, name))
