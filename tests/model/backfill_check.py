"""INV-BACKFILL-PROMISE, judged independently of model/backfill.py's arithmetic.

``soonest`` recomputes, from plain (end, usage) pairs, the earliest time a job's ask fits on
one agent if every job there ends at its latest; the tests and the stateful machine compare
it with the start a reservation promised before the pass's proposals were applied.
"""

from __future__ import annotations

import math
from typing import Iterable


def soonest(ask: tuple, free: tuple, running: Iterable[tuple[float, tuple]], now: float) -> float:
    """The earliest t >= now at which ``ask`` fits in ``free`` plus what the jobs of ``running``
    (end, usage) that ended by t give back; inf if never.  Each of ``ask``, ``free`` and a usage
    is (slots, mem, gpus), or (slots, mem, gpus, gres) with gres (kind, count) pairs (``free``'s
    may be a mapping): a job that holds a licence the ask needs delays it as one holding CPUs does."""
    running = list(running)
    ask_gres = tuple(ask[3]) if len(ask) > 3 else ()
    for t in sorted({now, *(max(now, end) for end, _ in running if end != math.inf)}):
        slots, mem, gpus = free[:3]
        gres = dict(free[3]) if len(free) > 3 else {}
        for end, usage in running:
            if max(now, end) <= t:
                s, m, g = usage[:3]
                slots += s
                gpus += g
                if mem is not None and m is not None:
                    mem += m
                for kind, count in (usage[3] if len(usage) > 3 else ()):
                    gres[kind] = gres.get(kind, 0) + count
        if (ask[0] <= slots and ask[2] <= gpus and (ask[1] is None or (mem is not None and ask[1] <= mem))
                and all(count <= gres.get(kind, 0) for kind, count in ask_gres)):
            return t
    return math.inf
