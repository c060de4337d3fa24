"""The leader's hold on its epoch (PostgreSQL store): renew the lease, stop in time.

The lease ends at the database's ``now() + lease`` as of each renewal.  The
leader measures on its own monotonic clock (trio's) from *before* it sent the
renewal, so its own idea of the end, ``sent + lease * (1 - MARGIN)``, comes
before the database's: when that moment passes without a newer renewal, it
stops releasing effects (``check`` raises in the core loop before a batch's
effects go out) and steps down, before any standby could take the epoch over
on expiry.  The fence on every commit (daemon/store/postgres.py) is what keeps
the log right; this keeps the effects of a frozen or cut-off leader from
overlapping the next leader's.
"""

from __future__ import annotations

import logging
import math

import trio

from daemon.store.interface import SteppedDown
from daemon.store.postgres import Deposed, PgFactStore

log = logging.getLogger("reckon.controller")

MARGIN = 0.25  # of the lease: room for clock rate differences and the time a renewal takes to land


class Leadership:
    def __init__(self, store: PgFactStore, *, renew_every: float | None = None) -> None:
        if store.epoch is None:
            raise ValueError("only a store that leads has a leadership")
        self.store = store
        self.epoch = store.epoch
        self.renew_every = renew_every if renew_every is not None else store.lease / 4
        self.valid_until = -math.inf  # trio time until which this controller may release effects

    def taken(self, asked_at: float) -> None:
        """The epoch was taken by a request sent at trio time ``asked_at``."""
        self.valid_until = asked_at + self.store.lease * (1 - MARGIN)

    def check(self) -> None:
        """Called before a batch's effects are released: raise if the lease may have passed."""
        if trio.current_time() >= self.valid_until:
            raise SteppedDown(self._expired())

    def _expired(self) -> str:
        return (f"could not renew the lease of epoch {self.epoch} in time (lease {self.store.lease:g} s): "
                "stopped releasing effects before another controller could take over")

    async def run(self) -> None:
        """Renew until deposed, late or cut off; raises ``SteppedDown`` saying which."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._renew)
                # A watchdog apart from the renewals: a renewal stuck in the database cannot hold it up.
                while trio.current_time() < self.valid_until:
                    await trio.sleep_until(self.valid_until)
                raise SteppedDown(self._expired())
        except BaseExceptionGroup as group:
            stepped, rest = group.split(SteppedDown)
            if rest is not None and rest.subgroup(lambda e: not isinstance(e, Exception)) is not None:
                raise  # a cancellation or KeyboardInterrupt is not ours to translate
            first = _first_leaf(stepped if stepped is not None else rest)
            if isinstance(first, SteppedDown):
                raise first from None
            # The database is gone (so is our advisory lock: the epoch may move at once).
            raise SteppedDown(f"lost the database while renewing the lease of epoch {self.epoch}: {first}") from first

    async def _renew(self) -> None:
        while True:
            await trio.sleep(self.renew_every)
            asked_at = trio.current_time()
            try:
                await self.store.renew()
            except Deposed as exc:
                raise SteppedDown(str(exc)) from exc
            self.valid_until = max(self.valid_until, asked_at + self.store.lease * (1 - MARGIN))


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group
