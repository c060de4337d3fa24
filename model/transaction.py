"""What a controller handler works through: one ``Transaction`` per ``handle`` call.

Handlers (model.connections, model.reports, model.job_ops, model.batches,
model.nodes, model.startup) never see the ``Controller``: they read the state
and the volatile view of the agents through the transaction, and change the
model only through it:

- ``apply(fact)``: apply a fact now (the seam replay also runs), queue it for
  the one leading ``Append``, note what it changed for the scheduler, and
  cancel the jobs whose dependency it doomed;
- ``send(session, make)``: a message to a joined agent, numbered on its connection;
- ``emit(command)``: any other command (close, timers, warnings, notifications);
- ``note_job`` / ``note_agent``: the scheduler must hear of a job or agent again.

The transaction also knows whether a fact was applied in this call: after one,
any exception means the state differs from what the log will hold
(``Controller.handle`` turns it into ``ModelCorrupted``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from . import events as E
from . import facts as F
from . import messages as M
from .begin import watch as watch_begin
from .jobs import JobRecord, JobState
from .partitions import Partition, agent_partitions, check_set, partition_of, startable, tier_of
from .resources import MAX_MEM
from .priority import Factors, PriorityConfig, ShareView, factors, share_view
from .policy import doomed_dependants, ready
from .scheduler import POLICIES, AgentNote, JobNote, UserLimits
from .session import AgentSession
from .state import ControllerState, apply

_MAX_ID_DIGITS = 18  # a reported id longer than this can never collide with one we issue


def silence_clock(ev: object) -> float:
    """The time silence (and the start grace) is measured on: monotonic when the daemon gives it,
    so a wall-clock step never makes an agent look silent (or heard from)."""
    mono = getattr(ev, "mono", None)
    return mono if mono is not None else ev.now  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    page_size: int = 1000  # jobs per resync query page
    round_timeout: float = 30.0  # seconds a round may stay open
    lost_after: float | None = None  # seconds of silence before a disconnected agent's jobs are requeued
    # Issue #20: at most this many RUNNING jobs / CPUs (slots) per user; None: no limit.  The
    # scheduler starts no job past its owner's limit (model/scheduler.py UserLimits).
    max_running_per_user: int | None = None
    max_cpus_per_user: int | None = None
    # The oldest agent protocol that may join.  A cluster whose jobs have owners (MUNGE) needs
    # version 6 (messages.OWNERS_SINCE): an older agent is never told a job's owner and would run
    # it as itself, root included.
    min_agent_version: int = 1
    # Issue #22: the config file's partitions (model/partitions.py), sorted by name; None: the file
    # configures none (the partitions are the log's alone).  Recorded at a start when they differ.
    partitions: tuple[Partition, ...] | None = None
    # Issue #22: the scheduler's policy (model/scheduler.py POLICIES): "backfill" (EASY: the first
    # blocked job of each partition gets a start no later job may delay) or "fifo" (first fit).
    scheduler: str = "backfill"
    # Issue #22: the priority factors' weights and fair share (model/priority.py; the config
    # file's [priority] table).
    priority: PriorityConfig = PriorityConfig()
    # Backfill reserves only for a blocked job queued this long (model/scheduler.py; Slurm's
    # bf_min_age_reserve), so a wide job just submitted does not hold small ones back at once.
    reserve_after: float = 0.0
    # Slurm's DefMemPerCPU: bytes per CPU a job that gives no --mem asks for (model/admission.py
    # with_default_mem, applied at submit); None: such a job asks no memory, as before.
    default_mem_per_cpu: int | None = None

    def __post_init__(self) -> None:
        if self.scheduler not in POLICIES:
            raise ValueError(f"scheduler must be one of {', '.join(POLICIES)}, got {self.scheduler!r}")
        if isinstance(self.reserve_after, bool) or not isinstance(self.reserve_after, (int, float)) \
                or not 0 <= self.reserve_after < 1e9:
            raise ValueError(f"reserve_after must be a number of seconds >= 0, got {self.reserve_after!r}")
        if not isinstance(self.priority, PriorityConfig):
            raise ValueError("priority must be a PriorityConfig")
        if self.partitions is not None:
            check_set(self.partitions)
        if type(self.min_agent_version) is not int or not 1 <= self.min_agent_version <= M.PROTOCOL_VERSION:
            raise ValueError(f"min_agent_version must be in 1..{M.PROTOCOL_VERSION}")
        if not isinstance(self.page_size, int) or not 1 <= self.page_size <= M.MAX_PAGE_ENTRIES:
            raise ValueError(f"page_size must be in 1..{M.MAX_PAGE_ENTRIES}")
        if not self.round_timeout > 0:
            raise ValueError("round_timeout must be positive")
        if self.lost_after is not None and not self.lost_after > 0:
            raise ValueError("lost_after must be positive or None")
        if self.default_mem_per_cpu is not None and (type(self.default_mem_per_cpu) is not int
                                                     or not 1 <= self.default_mem_per_cpu <= MAX_MEM):
            raise ValueError(f"default_mem_per_cpu must be a number of bytes in 1..{MAX_MEM} or None, "
                             f"got {self.default_mem_per_cpu!r}")
        for name in ("max_running_per_user", "max_cpus_per_user"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")

    @property
    def user_limits(self) -> UserLimits:
        return UserLimits(max_running=self.max_running_per_user, max_cpus=self.max_cpus_per_user)


@dataclass(slots=True)
class StartGate:
    """Volatile: dispatch is held after a start (model.startup's docstring)."""

    waiting: set[str]  # agents the recovered state knows that have not rejoined and answered their round yet
    known: bool  # the recovered state knew some agent; if not, only the grace ends the gate
    deadline: float  # on the silence clock (events' mono, else now)
    grace: float
    restored: bool = False  # the state is older than its id mark: the daemon records it there (``holding_restored``)


@dataclass(slots=True)
class Volatile:
    """What the controller knows that is not in its log: rebuilt as agents rejoin, lost at a restart."""

    sessions: dict[str, AgentSession] = field(default_factory=dict)
    conns: dict[int, str] = field(default_factory=dict)  # live connection -> agent name
    applied_rounds: list[bytes] = field(default_factory=list)  # tokens whose reports were applied (each once)
    started: bool = False  # ControllerStarted was handled (once per start; replay never sets it)
    start_gate: StartGate | None = None  # dispatch held after a start: model.startup
    # model.begin: the clock (the latest event's now) and the jobs waiting for their begin time.
    clock: float = 0.0
    begin_heap: list[tuple[float, int, str]] = field(default_factory=list)  # (begin, order, job)
    begin_queued: set[str] = field(default_factory=set)  # the jobs in begin_heap
    # model/priority.py: every PENDING job's priority as last noted, the fair-share view they were
    # computed with, when the next sweep starts and the jobs the current sweep has left.
    priorities: dict[str, int] = field(default_factory=dict)
    shares: ShareView | None = None
    next_sweep: float = float("-inf")
    sweep: list[str] = field(default_factory=list)


def share_view_of(state: ControllerState, volatile: Volatile, config: ControllerConfig) -> ShareView:
    """The fair-share view priorities are computed with: rebuilt at each sweep (O(users + RUNNING jobs))."""
    if volatile.shares is None:
        running = (state.jobs[j] for info in state.agents.values() for j in info.running)
        cpus = sum(info.slots for info in state.agents.values())
        volatile.shares = share_view(config.priority, state.usage, running, state.partitions, cpus, volatile.clock)
    return volatile.shares


def job_factors(state: ControllerState, volatile: Volatile, config: ControllerConfig, job: JobRecord) -> Factors:
    """A job's priority factors now (``reckon priority``)."""
    partitions = state.partitions
    tier = tier_of(partitions, partition_of(partitions, job.spec)) if partitions else None
    return factors(job, share_view_of(state, volatile, config), tier)


def priority_of(state: ControllerState, volatile: Volatile, config: ControllerConfig, job: JobRecord) -> int:
    """A PENDING job's priority as noted to the scheduler (computed on its first note)."""
    known = volatile.priorities.get(job.id)
    if known is not None:
        return known
    if config.priority.on:
        known = job_factors(state, volatile, config, job).priority
    else:  # every weight 0: nice and the operator's adjustment only
        known = job.priority_adjust - job.spec.nice
    volatile.priorities[job.id] = known
    return known


class ControllerView(Protocol):
    """What the read-only views (model.nodes, model.startup.holding_restored) read: a
    ``Controller`` or a ``Transaction``."""

    @property
    def state(self) -> ControllerState: ...
    @property
    def sessions(self) -> dict[str, AgentSession]: ...
    @property
    def start_gate(self) -> StartGate | None: ...
    @property
    def config(self) -> ControllerConfig: ...
    @property
    def clock(self) -> float: ...


def placed_on(state: ControllerState, agent: str) -> dict[str, int]:
    """job -> attempt of every non-terminal job placed on ``agent``, in job id order (not the set's hash order)."""
    info = state.agents.get(agent)
    if info is None:
        return {}
    return {j: state.jobs[j].attempt for j in sorted(info.running, key=lambda j: (len(j), j))}


class VolatileAccess:
    """Reads of a holder's ``volatile`` view: the Controller's and each Transaction's are the same one."""

    __slots__ = ()
    volatile: Volatile

    @property
    def sessions(self) -> dict[str, AgentSession]:
        return self.volatile.sessions

    @property
    def conns(self) -> dict[int, str]:  # live connection -> agent name
        return self.volatile.conns

    @property
    def start_gate(self) -> StartGate | None:  # dispatch held after a start: model.startup
        return self.volatile.start_gate

    @start_gate.setter
    def start_gate(self, gate: StartGate | None) -> None:
        self.volatile.start_gate = gate

    @property
    def clock(self) -> float:  # the latest event's now (model.begin)
        return self.volatile.clock


class Transaction(VolatileAccess):
    """One ``handle`` call's reads, changes and output (see the module docstring)."""

    __slots__ = ("state", "config", "volatile", "facts", "commands", "changed_jobs", "changed_agents",
                 "reserve_upto", "now")

    def __init__(self, state: ControllerState, volatile: Volatile, config: ControllerConfig,
                 now: float | None = None) -> None:
        self.state = state
        self.now = now  # the handled event's time (facts that record a time take it: a dependant's cancel)
        self.config = config
        self.volatile = volatile
        self.facts: list[F.Fact] = []
        self.commands: list[E.Command] = []
        # Changed jobs and agents not yet noted to the scheduler.  Noted once per
        # handle with their final values: a round applying 100k facts to one agent
        # sends one agent note, not 100k.
        self.changed_jobs: dict[str, JobRecord] = {}
        self.changed_agents: dict[str, None] = {}
        # The highest job id agents reported that the history never issued: one
        # JobIdsReserved for all of them after the handler (a post-handle hook), not one per entry.
        self.reserve_upto = 0

    # ---- reads ------------------------------------------------------------------

    @property
    def applied(self) -> bool:
        """Whether a fact was applied in this call (the state has moved past the log's end)."""
        return bool(self.facts)

    def placed_on(self, agent: str) -> dict[str, int]:
        return placed_on(self.state, agent)

    # ---- changes ----------------------------------------------------------------

    def apply(self, fact: F.Fact) -> None:
        """Apply a fact now, queue it for durability, and note what it changed for the scheduler.

        A job that ended FAILED or CANCELLED dooms the PENDING jobs waiting on it: each is
        cancelled here, with the reason, and its own dependants follow as that fact is applied."""
        changes = apply(self.state, fact)
        self.facts.append(fact)
        for job_id in changes.jobs:
            self.note_job(self.state.jobs[job_id])
            if self.state.dependants.get(job_id):
                for dependant, reason in doomed_dependants(self.state, self.state.jobs[job_id]):
                    if self.state.jobs[dependant].state is JobState.PENDING:  # an earlier one may have got it
                        self.apply(F.JobCancelled(job=dependant, reason=reason, cancelled_at=self.now))
        for name in changes.agents:
            self.note_agent(name)

    def send(self, session: AgentSession, make: Callable[[int], M.Message]) -> None:
        """Send to a joined agent: ``make`` gets the message's number on the current connection."""
        assert session.conn is not None
        session.seq += 1
        self.commands.append(E.Send(conn=session.conn, message=make(session.seq)))

    def emit(self, command: E.Command) -> None:
        self.commands.append(command)

    def note_job(self, job: JobRecord) -> None:
        self.changed_jobs[job.id] = job

    def note_agent(self, name: str) -> None:
        self.changed_agents[name] = None

    def reserve_ids(self, job_id: str) -> None:
        """Note ``job_id`` (if decimal, like ours) for the one JobIdsReserved after the handler."""
        if job_id.isascii() and job_id.isdecimal() and len(job_id) <= _MAX_ID_DIGITS:
            self.reserve_upto = max(self.reserve_upto, int(job_id))

    def flush_notes(self) -> None:
        """Hand every pending change to the scheduler's notification path, with current values."""
        partitions = self.state.partitions
        clock = self.volatile.clock
        priorities = self.volatile.priorities
        for job in self.changed_jobs.values():
            if job.state is JobState.PENDING:
                priority = priority_of(self.state, self.volatile, self.config, job)
            else:
                priority = 0
                priorities.pop(job.id, None)
            if job.spec.begin is not None:
                watch_begin(self.volatile, job)  # noted again when its begin comes (model.begin)
            # Partitions (issue #22): the job's partition, and whether it lets the job start now.
            part = partition_of(partitions, job.spec) if partitions else None
            self.commands.append(E.Notify(note=JobNote(job=job.id, order=int(job.id), state=job.state,
                                                       slots=job.spec.slots, agent=job.agent,
                                                       ready=ready(self.state, job, clock) and startable(partitions, job),
                                                       partition=part, time_limit=job.spec.time_limit,
                                                       started=job.started_at if job.state is JobState.RUNNING else None,
                                                       queued_at=job.submitted_at if job.state is JobState.PENDING else None,
                                                       priority=priority,
                                                       array=job.spec.array_id,
                                                       array_max=job.spec.array_max, mem=job.spec.mem,
                                                       gpus=job.spec.gpus, gres=job.spec.gres,
                                                       user=job.owner.user if job.owner is not None else None,
                                                       v7=job.spec.uses_v7)))
        for name in self.changed_agents:
            info = self.state.agents.get(name)
            session = self.sessions.get(name)
            _, free_mem, free_gpus, free_gres = info.free() if info else (0, None, 0, {})
            self.commands.append(E.Notify(note=AgentNote(
                agent=name,
                slots=info.slots if info else 0,
                used=info.used if info else 0,
                connected=bool(session and session.connected),
                reconciling=bool(session and session.reconciling),
                drained=bool(info and info.drained),
                free_mem=free_mem, free_gpus=free_gpus, free_gres=tuple(sorted(free_gres.items())),
                v7=session is None or session.version >= M.SPEC7_SINCE,
                partitions=agent_partitions(partitions, name) if partitions else (),
            )))
        self.changed_jobs.clear()
        self.changed_agents.clear()

    def attempt_lost(self, job: JobRecord, reason: str) -> None:
        """The current attempt of a RUNNING job ran nowhere or will never report: a cancel
        asked for meanwhile is confirmed (the job ends CANCELLED), else the job is requeued.

        The fact records the time the controller gave the attempt up (the event's): fair share
        charges the attempt up to it, in apply, so a replay charges exactly what live did."""
        at = self.now if self.now is not None else self.clock
        if job.cancel_requested:
            self.apply(F.JobCancelConfirmed(job=job.id, attempt=job.attempt, confirmed_at=at))
        else:
            self.apply(F.JobRequeued(job=job.id, attempt=job.attempt, reason=reason, requeued_at=at))

    def result(self) -> list[E.Command]:
        """The call's commands, its facts gathered into one leading Append."""
        return ([E.Append(facts=tuple(self.facts))] if self.facts else []) + self.commands



def recompute_priorities(tx: Transaction) -> None:
    """Every ``recompute_every`` seconds (on the clock, the events' now) a sweep recomputes every
    PENDING job's priority, ``recompute_batch`` jobs per call at most (a sweep over 100k jobs
    spans several ticks, each bounded); a changed one is noted, so the scheduler moves it."""
    config = tx.config.priority
    volatile = tx.volatile
    if not config.on or not volatile.priorities and not volatile.sweep:
        return
    if not volatile.sweep:
        if volatile.clock < volatile.next_sweep:
            return
        volatile.next_sweep = volatile.clock + config.recompute_every
        volatile.shares = None  # usage and age as of now
        volatile.sweep = list(volatile.priorities)
    sweep, jobs, priorities = volatile.sweep, tx.state.jobs, volatile.priorities
    batch = sweep[-config.recompute_batch:]
    del sweep[-config.recompute_batch:]
    for job_id in batch:
        job = jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING:
            priorities.pop(job_id, None)
            continue
        priority = job_factors(tx.state, volatile, tx.config, job).priority
        if priority != priorities.get(job_id):
            priorities[job_id] = priority
            tx.note_job(job)
