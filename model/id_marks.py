"""Job ids and the id mark, below the handlers: every handler that submits raises the mark first.

Ids are reserved in blocks of ``ID_BLOCK`` (model.startup says why and what a start does with
the mark); the daemon writes the mark file before the fact that raises it is committed.
"""

from __future__ import annotations

from . import facts as F
from .transaction import Transaction

ID_BLOCK = 1000  # job ids reserved per raise of the id mark (one durable file write per block)


def mark_for_submit(tx: Transaction, count: int = 1) -> None:
    """Before submitting ``count`` jobs: raise the id mark if the last of their ids is above it
    (the daemon writes the file first)."""
    state = tx.state
    last = state.next_job + count - 1
    if last > state.id_mark:
        tx.apply(F.IdMarkRaised(upto=last + ID_BLOCK - 1))
