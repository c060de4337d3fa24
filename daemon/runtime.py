"""Interpreter settings for the daemons: the cyclic GC and the GIL switch interval.

The garbage collector, tuned for daemons that hold large, acyclic tables.

A controller with 100k jobs, or an agent with 100k records, holds millions of
objects that never form reference cycles (refcounting frees them).  With the
default settings the collector keeps re-scanning them: in-process, a 100k-job
resync round spent a quarter of its time in collections (38.7 -> 30.0 us/job
with the settings below; `docs/performance.md`).  So:

* recovered state is frozen (``gc.freeze``) once it is built: later
  collections skip it;
* young collections run every 50,000 allocations instead of 700, so a burst
  (a report page, a group commit) is not interrupted hundreds of times;
* loads that build the state run with the collector paused.

Cycles are still collected (trio's tracebacks and cancel scopes make some).

The GIL switch interval: each daemon has its SQLite work on a thread of its
own.  Whenever that thread lets go of the GIL (around every SQLite call) and
the event loop is busy, getting it back takes up to one switch interval:
5 ms by default, which made a commit of a few statements cost tens of
milliseconds under load.  At 0.5 ms the event loop is asked to yield sooner;
when nothing waits for the GIL the interval costs nothing.  (Statements over
many rows, ``sqlite_thread.RowStatement``, keep the number of hand-offs low
in the first place.)
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

GC_THRESHOLDS = (50_000, 20, 10)
SWITCH_INTERVAL = 0.0005  # seconds


def tune() -> None:
    """Called once at daemon start."""
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL)


def settle() -> None:
    """Collect once, then freeze everything alive: the recovered state is never scanned again."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a load builds millions of long-lived objects.

    Otherwise they trigger repeated full collections (a quarter or more of the
    load time); the decoded data holds no reference cycles, so nothing is left
    for the GC to find.  Left alone if someone else already disabled it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
