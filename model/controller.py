"""The controller: every protocol decision on the controller side.

``Controller.handle(event) -> list[Command]`` is the only entry point.  It
looks the event's handler up in ``HANDLERS``, runs it on a fresh
``Transaction`` (model.transaction: the handlers' one interface to the model),
then runs the ``POST_HANDLE`` hooks on the same transaction.  Facts are
applied at once through ``state.apply`` (the seam replay also runs) and
returned in one ``Append`` that precedes every ``Send`` they cause: the daemon
releases sends only once the facts are durable.  Connection state (who is
connected, rounds, heartbeats) is volatile and rebuilt as agents rejoin.

This is the only module that imports the handler modules; none of them
imports it.  A handler that refuses raises a protocol error before it applies
anything, and the state is as it was; an exception after a fact was applied
in the call is ``ModelCorrupted``: the state has moved past what the log will
hold, and only a restart from the log repairs it.
"""

from __future__ import annotations

from typing import Any, Callable

from . import batches
from . import begin
from . import connections
from . import events as E
from . import facts as F
from . import job_ops
from . import nodes
from . import partition_ops
from . import reports
from . import startup
from .errors import LocalProtocolError, ModelCorrupted
from .jobs import JobState
from .nodes import NodeState
from .partitions import startable
from .policy import ready
from .scheduler import DispatchHold
from .session import AgentSession
from .state import ControllerState, replay, restore
from .transaction import (ControllerConfig, Transaction, Volatile, VolatileAccess, job_factors, placed_on,
                          recompute_priorities)

__all__ = ["AgentSession", "Controller", "ControllerConfig", "HANDLERS", "POST_HANDLE"]

Handler = Callable[[Transaction, Any], None]

# The dispatch table: one handler per event type.
HANDLERS: dict[type, Handler] = {
    E.AgentJoined: connections.on_join,
    E.MessageFromAgent: reports.on_message,
    E.ConnectionClosed: connections.on_closed,
    E.RoundDeadlineExpired: connections.on_deadline,
    E.Tick: connections.on_tick,
    E.SubmitJob: job_ops.on_submit,
    E.CancelJob: job_ops.on_cancel,
    E.DispatchProposed: job_ops.on_dispatch,
    E.DispatchUndelivered: job_ops.on_undelivered,
    E.ForgetAgent: job_ops.on_forget,
    E.DrainAgent: nodes.on_drain,
    E.ResumeAgent: nodes.on_resume,
    E.SubmitArray: job_ops.on_submit_array,
    E.SubmitBatch: batches.on_submit_batch,
    E.HoldJob: job_ops.on_hold,
    E.ReleaseJob: job_ops.on_release,
    E.RequeueJob: job_ops.on_requeue,
    E.SignalJob: job_ops.on_signal,
    E.UpdateJob: job_ops.on_update,
    E.ControllerStarted: startup.on_controller_started,
    E.StartGraceEnded: startup.on_grace_ended,
    partition_ops.SetPartition: partition_ops.on_set_partition,
    partition_ops.RemovePartition: partition_ops.on_remove_partition,
}


def notify_scheduler(tx: Transaction, ev: E.ControllerEvent) -> None:
    """Every job and agent the call changed reaches the scheduler once, with its final values."""
    tx.flush_notes()


def priorities_due(tx: Transaction, ev: E.ControllerEvent) -> None:
    """Pending jobs' priorities recomputed when their time comes (model/priority.py)."""
    recompute_priorities(tx)


def begin_due(tx: Transaction, ev: E.ControllerEvent) -> None:
    """The jobs whose begin time the clock reached are noted again (model.begin)."""
    begin.due(tx)


# What runs after every handler, in order, on the same transaction: the ids agents
# reported are reserved (a fact), the jobs whose begin time came are noted, the scheduler
# hears of every change (those included), and the start gate is checked (it may open, after
# those notes).
POST_HANDLE: tuple[Handler, ...] = (reports.reserve_reported_ids, begin_due, priorities_due, notify_scheduler,
                                    startup.check_gate)


class Controller(VolatileAccess):
    def __init__(self, config: ControllerConfig | None = None, state: ControllerState | None = None) -> None:
        self.config = config or ControllerConfig()
        self.state = state or ControllerState()
        self.volatile = Volatile()
        begin.watch_all(self.volatile, self.state.jobs.values())  # a recovered state's jobs waiting to begin

    # ---- the volatile view (sessions, conns, start_gate: VolatileAccess), for the daemon, views, tests ----

    @property
    def applied_rounds(self) -> list[bytes]:  # tokens whose reports were applied (each at most once)
        return self.volatile.applied_rounds

    @property
    def started(self) -> bool:  # ControllerStarted was handled (once per start; replay never sets it)
        return self.volatile.started

    # ---- construction -----------------------------------------------------

    @classmethod
    def from_log(cls, facts: list[F.Fact], config: ControllerConfig | None = None,
                 snapshot: dict | None = None) -> "Controller":
        """Recover: restore the snapshot (if any), then replay the facts after it."""
        state = restore(snapshot) if snapshot is not None else ControllerState()
        return cls(config, replay(facts, state))

    def initial_notes(self) -> list[E.Command]:
        """Notifications that bring a fresh scheduler up to the current state."""
        tx = Transaction(self.state, self.volatile, self.config)
        limited = self.config.user_limits.any
        for job in self.state.jobs.values():
            # RUNNING jobs of a throttled array too: the scheduler counts them against %MAX.
            if job.state is JobState.PENDING or (job.state is JobState.RUNNING and job.spec.array_max is not None):
                tx.note_job(job)
            elif job.state is JobState.RUNNING and job.owner is not None and limited:
                # RUNNING jobs of their owners too: the scheduler counts them against the per-user limits.
                tx.note_job(job)
        for name in self.state.agents:
            tx.note_agent(name)
        tx.flush_notes()
        if self.start_gate is not None:
            tx.emit(E.Notify(note=DispatchHold(held=True, reason="start gate")))
        return tx.commands

    # ---- the entry point ------------------------------------------------------

    def handle(self, event: E.ControllerEvent) -> list[E.Command]:
        handler = HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"the controller does not handle {type(event).__name__}")
        begin.advance(self.volatile, event)  # the clock is the latest event's time (model.begin)
        tx = Transaction(self.state, self.volatile, self.config, now=getattr(event, "now", None))
        try:
            handler(tx, event)
            for hook in POST_HANDLE:
                hook(tx, event)
        except Exception as exc:
            if tx.applied:
                raise ModelCorrupted(
                    f"the controller model failed on {type(event).__name__} after applying {len(tx.facts)} "
                    f"fact(s) not yet in the log ({type(exc).__name__}: {' '.join(str(exc).split())})") from exc
            raise
        return tx.result()

    def validate_state(self) -> None:
        """The state's own check (``ControllerState.validate_state``), then the volatile view's:
        each session's fields agree with its state, and the connection index with the sessions.
        ``ModelCorrupted`` names the first difference."""
        self.state.validate_state()
        for name, session in self.sessions.items():
            wrong = session.consistency()
            if wrong is None and session.name != name:
                wrong = f"session {session.name} filed under {name}"
            if wrong is None and session.conn is not None and self.conns.get(session.conn) != name:
                wrong = f"agent {name}'s connection {session.conn} is indexed as {self.conns.get(session.conn)}"
            if wrong is None and session.round is not None and (session.round.agent != name or not session.round.open):
                wrong = f"agent {name}'s round is {session.round.state.value}, for {session.round.agent}"
            if wrong is not None:
                raise ModelCorrupted(f"controller sessions: {wrong}")
        jobs = self.state.jobs
        for job_id in self.volatile.priorities:
            job = jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING:
                raise ModelCorrupted(f"INV-FAIRSHARE-REPLAY: job {job_id} has a noted priority but is "
                                     f"{job.state.value if job else 'unknown'}")
        for conn, name in self.conns.items():
            session = self.sessions.get(name)
            if session is None or session.conn != conn:
                raise ModelCorrupted(f"controller sessions: connection {conn} indexed for {name}, which is not on it")

    # ---- views ---------------------------------------------------------------------

    def placed_on(self, agent: str) -> dict[str, int]:
        """job -> attempt of every non-terminal job placed on ``agent``, in job id order."""
        return placed_on(self.state, agent)

    def scheduler_view(self) -> tuple[tuple[str, ...], dict[str, tuple[int, int, bool]], bool, dict[str, tuple]]:
        """What the scheduler's view must equal once notifications drain."""
        pending = tuple(j.id for j in sorted(
            (j for j in self.state.jobs.values() if ready(self.state, j, self.clock) and startable(self.state.partitions, j)),
            key=lambda j: (-self.volatile.priorities.get(j.id, 0), int(j.id))))
        agents = {}
        for name, info in self.state.agents.items():
            session = self.sessions.get(name)
            available = bool(session and session.connected and not session.reconciling and not info.drained)
            agents[name] = (info.slots, info.used, available)
        free = {}
        for name, info in self.state.agents.items():
            _, mem, gpus, gres = info.free()
            free[name] = (mem, gpus, tuple(sorted(gres.items())))
        return pending, agents, self.start_gate is not None, free

    def priority_factors(self, job_id: str):  # -> model.priority.Factors
        """A job's priority factors now, as ``reckon priority`` shows them."""
        return job_factors(self.state, self.volatile, self.config, self.state.job(job_id))

    def node_state(self, name: str) -> NodeState:
        """The node's state as ``reckon nodes`` shows it (``.value``)."""
        return nodes.node_state(self, name)
