"""The controller daemon's part of ``model.startup``: the id mark file and the start gate's timer."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from reckon.model import events as E
from reckon.model.errors import LocalProtocolError
from reckon.model.facts import Fact, IdMarkRaised
from reckon.model.startup import holding_restored

from reckon.daemon.commands import facts_of
from reckon.daemon.store.idmark import BadIdMark, read_id_mark, write_id_mark
from reckon.daemon.store.statelock import WrongStateDir

if TYPE_CHECKING:  # pragma: no cover
    from reckon.daemon.controller.host import DaemonHost


async def start_model(daemon: "DaemonHost") -> list[E.Command]:
    """Deliver ``ControllerStarted`` (where ids continue, the start gate) and commit what it decided.

    A refusal (an id mark file of another history, or an unreadable one) stops
    the controller before it listens, with the reason in one line.  Returns the
    commands for the caller to release.
    """
    state_dir = daemon.options.state_dir
    try:
        # No state directory: the facts live in PostgreSQL (daemon/controller/ha.py), whose own
        # backups are restored whole; the mark file guards a restored controller.db only.
        mark = read_id_mark(state_dir) if daemon.options.store is None else None
        commands = daemon.model.handle(E.ControllerStarted(
            now=time.time(), mono=trio.current_time(), grace=daemon.options.rejoin_grace, id_mark=mark,
            mark_file=daemon.options.store is None, facts=daemon.store.last_seq))
    except (BadIdMark, LocalProtocolError) as exc:
        raise WrongStateDir(f"{state_dir}: {exc}") from None
    for cmd in commands:
        if isinstance(cmd, E.Notify):
            daemon.scheduler.notify(cmd.note)
    facts = facts_of(commands)
    if facts:
        await commit(daemon, facts)
    return commands


async def commit(daemon: "DaemonHost", facts: list[Fact]) -> None:
    """Make facts durable.  Commit before effect: nothing they cause leaves the
    process before this returns; a failed commit kills the daemon.

    With a state directory, the id mark file also records how far the log goes
    (``IdMark.facts``): rewritten on the database thread once the commit is
    durable, before this returns, so before anything the batch caused leaves.
    A copy of ``controller.db`` taken earlier (an online backup) ends before it
    and is recognised as older at a start after it is restored.  A crash between
    the commit and the file leaves the file behind, which is harmless: nothing
    that batch caused had left yet.
    """
    if daemon.options.store is not None:
        await daemon.store.append(facts)  # PostgreSQL: restored whole, its own mark is the only one
        committed(daemon, facts)
        return
    state_dir = daemon.options.state_dir
    hold = holding_restored(daemon.model)  # a restored copy's whole-grace hold survives a restart
    mark = _mark(daemon, hold)  # the batch is decided: its mark (if raised) is in the state
    if any(isinstance(f, IdMarkRaised) for f in facts):
        # The id mark first: no id above the file's mark is ever committed, so a restored
        # older controller.db still learns the mark at its next start.  Inline: once per block.
        write_id_mark(state_dir, mark)
    await daemon.store.append(facts, then=lambda last_seq: write_id_mark(state_dir, replace(mark, facts=last_seq)))
    daemon.mark_hold = hold
    committed(daemon, facts)


def committed(daemon: "DaemonHost", facts: list[Fact]) -> None:
    """The facts are durable: the query index may show them (query.py); a checking run
    (``validate_state``) also compares it with the job table."""
    daemon.queries.committed(daemon, facts)
    if daemon.options.validate_state:
        daemon.queries.check(daemon)


def end_mark_hold(daemon: "DaemonHost") -> None:
    """After a batch with no facts: if the file still says a restored copy's hold lasts and it has
    ended, say so (once per restore; a batch with facts does it in ``commit``).  Inline: no write
    is in flight on the database thread between the core loop's batches."""
    if daemon.mark_hold and not holding_restored(daemon.model):
        write_id_mark(daemon.options.state_dir, _mark(daemon, hold=False))
        daemon.mark_hold = False


def _mark(daemon: "DaemonHost", hold: bool) -> E.IdMark:
    """What the id mark file says now: the state's mark, the log's position, the hold."""
    state = daemon.model.state
    return E.IdMark(cluster=state.cluster, upto=state.id_mark, facts=daemon.store.last_seq, hold=hold)


class GraceTimer:
    """The model's ``StartGraceTimer``: ``StartGraceEnded`` once trio's clock (the events' mono) reaches it."""

    def __init__(self) -> None:
        self._deadline: float | None = None
        self._set = trio.Event()

    def arm(self, deadline: float) -> None:
        self._deadline = deadline
        self._set.set()

    async def run(self, submit: Any) -> None:
        """Wait for the timer to be armed and due, then ``await submit(event)``."""
        await self._set.wait()
        assert self._deadline is not None
        await trio.sleep_until(self._deadline)
        await submit(E.StartGraceEnded(now=time.time(), mono=trio.current_time()))
