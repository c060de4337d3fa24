"""The leader's hold on its epoch (PostgreSQL store): the I/O shell around ``model.leadership``.

The model decides when to renew, until when effects may be released (a
renewal's send time plus ``(1 - MARGIN)`` of the lease, on trio's clock) and
when to step down; this shell reads trio's clock, sends the renewals the model
asks for (on their own task, so a renewal stuck in the database cannot hold up
the deadline), wakes the model at its deadlines, and turns a ``StepDown`` into
``SteppedDown``.  ``check`` is called by the core loop after a batch's commit
and before its effects.  The fence on every commit (daemon/store/postgres.py)
is what keeps the log right; the deadline keeps the effects of a frozen or
cut-off leader from overlapping the next leader's (docs/ha.md).
"""

from __future__ import annotations

import math

import trio

from reckon.model import leadership as L

from reckon.daemon.store.interface import SteppedDown
from reckon.daemon.store.postgres import Deposed, PgFactStore

MARGIN = L.MARGIN  # of the lease: room for clock-rate differences (model/leadership.py)


class Leadership:
    def __init__(self, store: PgFactStore, *, renew_every: float | None = None) -> None:
        if store.epoch is None:
            raise ValueError("only a store that leads has a leadership")
        self.store = store
        self.epoch = store.epoch
        self.model = L.Leadership(L.LeaseConfig(lease=store.lease, renew_every=renew_every))
        self._renewals_send, self._renewals = trio.open_memory_channel[float](math.inf)
        self._changed = trio.Event()  # set when an event may have moved the model's next wakeup

    def taken(self, asked_at: float) -> None:
        """The epoch was taken by a request sent at trio time ``asked_at``."""
        self._handle(L.TakeoverResult(epoch=self.epoch, asked_at=asked_at, now=trio.current_time()))

    def check(self) -> None:
        """Called before a batch's effects are released: raise if the lease may have passed."""
        now = trio.current_time()
        self._handle(L.Tick(now=now))
        if not self.model.may_release(now):
            raise SteppedDown(self.model.reason or f"epoch {self.epoch} is not ours to release effects for")

    def commit_failed(self, exc: Exception) -> SteppedDown:
        """A commit failed with ``exc``: what to step down with (the model records why)."""
        event = (L.CommitRefused(detail=_words(exc)) if isinstance(exc, Deposed)
                 else L.DatabaseLost(detail=f"a commit failed: {_words(exc)}"))
        try:
            self._handle(event)
        except SteppedDown as stepped:
            return stepped
        return SteppedDown(self.model.reason)  # it had already stepped down, for this first reason

    async def run(self) -> None:
        """Renew until deposed, late or cut off; raises ``SteppedDown`` saying which."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._renew)
                await self._watch()
        except BaseExceptionGroup as group:
            stepped, rest = group.split(SteppedDown)
            if rest is not None and rest.subgroup(lambda e: not isinstance(e, Exception)) is not None:
                raise  # a cancellation or KeyboardInterrupt is not ours to translate
            raise _first_leaf(stepped if stepped is not None else rest) from None

    def _handle(self, event: L.LeadershipEvent) -> None:
        commands = self.model.handle(event)
        self._changed.set()
        for cmd in commands:
            if isinstance(cmd, L.SendRenew):
                self._renewals_send.send_nowait(cmd.asked_at)
            elif isinstance(cmd, L.StepDown):
                raise SteppedDown(cmd.reason)

    async def _watch(self) -> None:
        """Tick the model at its deadlines (apart from the renewals: a stuck one cannot hold this up)."""
        while True:
            self._handle(L.Tick(now=trio.current_time()))
            wake = self.model.next_wakeup()
            if wake is None:
                raise SteppedDown(self.model.reason)
            self._changed = trio.Event()
            with trio.move_on_at(wake):
                await self._changed.wait()

    async def _renew(self) -> None:
        async for asked_at in self._renewals:
            try:
                await self.store.renew()
            except Deposed as exc:
                self._handle(L.RenewResult(ok=False, asked_at=asked_at, now=trio.current_time(), detail=_words(exc)))
            except Exception as exc:  # the database is gone (so is our advisory lock: the epoch may move at once)
                self._handle(L.DatabaseLost(detail=f"the lease renewal failed: {_words(exc)}"))
                raise SteppedDown(self.model.reason) from exc  # reached only if it had already stepped down
            else:
                self._handle(L.RenewResult(ok=True, asked_at=asked_at, now=trio.current_time()))


def _words(exc: BaseException) -> str:
    """An exception as a step-down detail: its message (its type when it has none), not too long."""
    text = str(exc) or type(exc).__name__
    return text[:L.MAX_REASON]


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group
