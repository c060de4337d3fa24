"""What the controller decides when it starts: where job ids continue, and the start gate.

Both guard against a restored older copy of the controller's state (README,
"Restoring an older copy"), which the database alone cannot recognise:

- **Job ids.**  Ids are reserved in blocks of ``ID_BLOCK``: before the first
  ``JobSubmitted`` above the current mark, ``IdMarkRaised`` raises it, and the
  daemon writes the new mark to a file *outside* the database (durably) before
  it commits that fact.  At a start, ids continue above the mark the file and
  the database know, whichever is higher, so no id issued before the start
  (even one issued after a backup of the database was taken) is issued again.
  Every start therefore skips the rest of the current block (not on a
  store without a mark file, PostgreSQL, whose log is the one history).  The file also
  says how far the log went (``IdMark.facts``): the daemon records it before
  it releases what a batch of facts caused, so a copy taken while the
  controller ran (an online backup, its ids in the current block) is
  recognised too: its log ends before that position.
- **The start gate.**  A job the restored state calls PENDING may have run on
  an agent since.  That agent reports it when it rejoins and it is adopted
  with its true outcome; dispatching it elsewhere first would run it twice.
  So after a start with PENDING jobs nothing is dispatched until every agent
  the recovered state knows has rejoined and answered its round, or the grace
  (on the silence clock) is over.  A state older than its id mark (restored
  from a copy) may predate an agent's first join, so the agents it knows
  prove nothing: it holds for the whole grace, also when its unfinished jobs
  are all RUNNING (one may have been requeued and run elsewhere since).  The
  gate is volatile: replay never opens it, only ``ControllerStarted`` does.

The functions here are the controller's handlers for these events and its
post-handle hook ``check_gate``; they take the call's ``Transaction``
(model.transaction) and change state only through ``tx.apply``.
"""

from __future__ import annotations

from typing import Any

from . import events as E
from . import facts as F
from .errors import LocalProtocolError
from .id_marks import mark_for_submit
from .jobs import JobState
from .partitions import PartitionsConfigured
from .scheduler import DispatchHold
from .transaction import ControllerView, StartGate, Transaction, silence_clock



def on_controller_started(tx: Transaction, ev: E.ControllerStarted) -> None:
    if tx.volatile.started:
        raise LocalProtocolError("the controller has already started")
    restored = _continue_ids(tx, ev.id_mark, mark_file=ev.mark_file, facts=ev.facts)  # may refuse
    mark_for_submit(tx)  # the next block now, so submits rarely wait for the file
    tx.volatile.started = True
    configured = tx.config.partitions
    if configured is not None and configured != tx.state.partitions_configured:
        # The config file's partitions changed since they were recorded last (model/partitions.py).
        tx.apply(PartitionsConfigured(partitions=configured))
    if tx.config.priority.half_life != tx.state.usage.half_life:  # fair share's decay (model/priority.py)
        tx.apply(F.UsageDecaySet(half_life=float(tx.config.priority.half_life)))
    pending = any(j.state is JobState.PENDING for j in tx.state.jobs.values())
    # After a restore, a job the copy calls RUNNING may since have been requeued and run on an agent
    # the copy does not know: its placement's "unrecognized" must not send it out again at once.
    unfinished = restored and any(not j.terminal for j in tx.state.jobs.values())
    if ev.grace > 0 and (pending or unfinished):
        known = set(tx.state.agents)
        # A state known to be a restored copy may predate some agent's first join: that agent is not
        # among the known ones, so their rejoining proves nothing; only the grace ends the hold.
        tx.start_gate = StartGate(waiting=known, known=bool(known) and not restored,
                                  deadline=silence_clock(ev) + ev.grace, grace=ev.grace, restored=restored)
        until = (f"for {ev.grace:g}s (the state is older than its id mark)" if restored else
                 f"until {len(known)} known agent(s) have rejoined, or for {ev.grace:g}s")
        tx.emit(E.Notify(note=DispatchHold(held=True, reason=until)))
        tx.emit(E.StartGraceTimer(deadline=tx.start_gate.deadline))


def holding_restored(ctrl: ControllerView) -> bool:
    """Whether dispatch is held for the whole grace after a start on a restored copy.  The daemon
    records it in the id mark file (``IdMark.hold``): that start committed facts and raised the
    mark, so a restart before the grace ended would no longer see an older copy, and would open
    as soon as the agents the copy knows are back (a job that ran since on another one would run
    again)."""
    gate = ctrl.start_gate
    return gate is not None and gate.restored


def on_grace_ended(tx: Transaction, ev: E.StartGraceEnded) -> None:
    pass  # the time check runs after every event: check_gate


def check_gate(tx: Transaction, ev: Any) -> None:
    """Post-handle hook: after each event while the gate is closed, has it ended?"""
    gate = tx.start_gate
    if gate is None:
        return
    if isinstance(ev, (E.StartGraceEnded, E.Tick)) and silence_clock(ev) >= gate.deadline:
        _open(tx, f"the rejoin grace of {gate.grace:g}s is over")
        return
    for name in list(gate.waiting):
        session = tx.sessions.get(name)
        if name not in tx.state.agents or (session is not None and session.connected and not session.reconciling):
            gate.waiting.discard(name)  # rejoined and reconciled (or forgotten): it holds nothing unknown now
    if gate.known and not gate.waiting:
        _open(tx, "every known agent has rejoined")


def _open(tx: Transaction, reason: str) -> None:
    tx.start_gate = None
    tx.emit(E.Notify(note=DispatchHold(held=False, reason=reason)))


def _continue_ids(tx: Transaction, mark: E.IdMark | None, *, mark_file: bool = True,
                  facts: int | None = None) -> bool:
    """Continue job ids above every id that may have been issued before this start.

    Returns whether the state is older than its id mark: its ids end below the mark's, or its
    log ends before the facts the mark says were recorded (``facts``: where the recovered log
    ends).  That is a restored copy, or a crash in the instant between writing the mark file
    and committing."""
    state = tx.state
    if mark is not None and mark.cluster != state.cluster:
        if state.next_job > 1 or state.id_mark > 0:
            raise LocalProtocolError(
                f"the id mark file belongs to cluster {mark.cluster}, but the controller state is cluster "
                f"{state.cluster}: this state directory mixes two histories; if the database is the state to "
                f"run, remove the id mark file (ids it issued after this copy was taken may then be issued again)")
        mark = None  # a new history: the mark of an older one in this directory does not concern it
    lost_mark = mark is None and state.id_mark > 0 and mark_file
    if mark is None:
        # No mark file at all (PostgreSQL): the log is the one history and holds every id issued
        # (commit before reply), so ids continue right after its last one and no block is skipped.
        floor = state.id_mark if mark_file else 0
        if lost_mark:
            tx.emit(E.Warn(message=(
                f"no id mark file, although the controller state recorded one (up to {state.id_mark}): the file "
                f"was lost, or the state was copied without it; ids issued after this copy of the state was "
                f"taken may be issued again; job ids continue from {floor + 1}; dispatch is held for the whole "
                f"rejoin grace")))
    else:
        floor = max(mark.upto, state.id_mark)
        if mark.upto > state.id_mark:
            tx.emit(E.Warn(message=(
                f"controller state is older than its id mark: restored from a backup? "
                f"job ids continue from {max(floor + 1, state.next_job)}")))
        elif mark.upto < state.id_mark:
            tx.emit(E.Warn(message=(
                f"the id mark file ({mark.upto}) is behind the controller state ({state.id_mark}): restored "
                f"from an older copy? it is raised again at the next submission")))
    # A lost file may be a copy restored onto a new disk (the controller's machine replaced): as older.
    restored = lost_mark or (mark is not None and mark.upto > state.id_mark)
    if mark is not None and not restored and facts is not None and mark.facts > facts:
        # The same ids but a shorter log: a copy taken while the controller ran (an online backup),
        # within the block of ids the mark covers.  Only the facts' position tells it from the file.
        restored = True
        tx.emit(E.Warn(message=(
            f"controller state is older than its id mark: its log ends at fact {facts}, but the controller "
            f"had recorded facts up to {mark.facts} (an online backup restored?); dispatch is held for "
            f"the whole rejoin grace")))
    if mark is not None and not restored and mark.hold:
        restored = True  # the start before this one held for a restored copy, and stopped before its grace ended
        tx.emit(E.Warn(message=(
            "the previous start held dispatch for a restored copy of the controller state and stopped before its "
            "rejoin grace ended: dispatch is held for the whole rejoin grace again")))
    if floor >= state.next_job:
        tx.apply(F.JobIdsReserved(upto=floor))
    return restored


