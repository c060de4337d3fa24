"""INV-BACKFILL-PROMISE, judged independently of model/backfill.py's arithmetic.

``soonest`` recomputes, from plain (end, usage) pairs, the earliest time a job's ask fits on
one agent if every job there ends at its latest; the tests and the stateful machine compare
it with the start a reservation promised before the pass's proposals were applied.
"""

from __future__ import annotations

import math
from typing import Iterable


def soonest(ask: tuple[int, int | None, int], free: tuple[int, int | None, int],
            running: Iterable[tuple[float, tuple[int, int | None, int]]], now: float) -> float:
    """The earliest t >= now at which (slots, mem, gpus) ``ask`` fits in ``free`` plus what the
    jobs of ``running`` (end, (slots, mem, gpus)) that ended by t give back; inf if never."""
    running = list(running)
    for t in sorted({now, *(max(now, end) for end, _ in running if end != math.inf)}):
        slots, mem, gpus = free
        for end, (s, m, g) in running:
            if max(now, end) <= t:
                slots += s
                gpus += g
                if mem is not None and m is not None:
                    mem += m
        if ask[0] <= slots and ask[2] <= gpus and (ask[1] is None or (mem is not None and ask[1] <= mem)):
            return t
    return math.inf
