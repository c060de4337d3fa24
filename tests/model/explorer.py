"""Exhaustive small-scope exploration of the model (issue #13).

A breadth-first search over every interleaving of deliveries, faults, crashes,
cancels, process ends and time, up to a depth bound, for a small scope (e.g. one
controller, two agents, two jobs, page size 1).  Issue #22's scopes add the
scheduler's policy (FIFO or EASY backfill), jobs with widths and time limits,
two partitions, and operator partition changes and priority adjustments as
budgeted steps.  The world it explores is the
stateful machine's (``test_stateful.ReckonMachine``): the real ``Controller``,
``Agent`` and ``Scheduler`` models, per-connection FIFO channels of in-flight
wire maps, a fake process table, durable agent disks and the controller's fact
log.  The explorer only chooses the next step; every invariant is the machine's
own ``inv_*`` check (one place, shared by both), run at every explored state.

States are hashed through a canonical form (``canonical``): round tokens and
connection numbers come from counters and are renamed by their order of
creation among the live ones; history kept only for checking (the fact log, the
list of ended timers, counters) is left out and the controller's durable state
enters as its digest.  So equal states, reached by different paths, are
explored once.

Liveness: from every state at the frontier (the depth bound), and from every
state whose successors were all seen before, faults stop and the machine's
``teardown`` runs the cluster to quiescence and checks that every outcome is
recorded, nothing is stuck and every pending job that fits gets placed.

A violation is reported with the shortest trace (breadth-first) as a readable
event list and as a replayable pytest snippet (``Violation.snippet``).
"""

from __future__ import annotations

import copy
import enum
import pickle
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.jobs import JobState
from reckon.model.partition_ops import SetPartition
from reckon.model.scheduler import POLICIES

from tests.model.test_stateful import ReckonMachine

TOKEN_LEN = 16

# A job of a scope (issue #22): (slots, time limit in seconds or None, partition or None: the default).
Ask = tuple[int, float | None, str | None]


@dataclass(frozen=True, kw_only=True)
class Scope:
    """What is explored: the cluster's size, its jobs and scheduler, and which fault kinds and
    operator changes are enabled."""

    agents: int = 2
    jobs: int = 2  # one-slot jobs without a time limit, placed by the start's pass (unless ``job_asks``)
    slots: int = 1  # per agent (unless ``agent_slots``)
    agent_slots: tuple[int, ...] = ()  # per agent, a1 first: agents of different sizes
    # Issue #22: the jobs the start's pass places, as (slots, time limit, partition); replaces ``jobs``.
    job_asks: tuple[Ask, ...] = ()
    # Jobs submitted once the start has settled, with no pass: the search's first pass meets them
    # (so a blocked wide job's reservation, and what may start around it, are explored steps).
    queued: tuple[Ask, ...] = ()
    policy: str = "fifo"  # the scheduler's policy: "fifo" or "backfill" (EASY, model/backfill.py)
    # Two partitions, pa (a1, the default) and pb (a2, a3), as ReckonMachine.setup(partitioned=True).
    partitioned: bool = False
    partition_changes: int = 0  # operator partition changes (``set_partition``) per trace
    priority_changes: int = 0  # operator priority adjustments of a pending job (``prioritize``) per trace
    fault_kinds: frozenset[str] | None = None  # which FAULTS a trace may take (None: all of them)
    ctrl_page: int = 1
    agent_page: int = 1
    round_timeout: float = 5.0
    lost_after: float | None = None
    outcomes: tuple[tuple[int | None, int | None], ...] = ((0, None), (1, None))
    settle_first: bool = True  # start from a settled cluster (every job running), else from dispatches in flight
    agent_down: bool = False  # an agent may stay down (crash now, restart later), not only crash-and-restart
    snapshots: bool = True  # controller crash may recover from a snapshot of half the log
    time_step: float = 2.5  # one "time passes" step: past the heartbeat interval (2 s)
    faults: int = 2  # fault steps (FAULTS) per trace; deliveries, time, cancels and process ends are unbounded
    # Judge connections a message was dropped, copied or reordered on too, when settling in place
    # (as the swarm machine does): the agent must end agreeing, unless the controller already saw
    # exactly this disagreement with a round, or the agent never saw all that was sent to it.
    judge_tampered: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= 3 or not 0 <= self.jobs <= 6 or not 1 <= self.slots <= 3:
            raise ValueError(f"scope out of range: {self}")
        if self.agent_slots and (len(self.agent_slots) != self.agents or not all(1 <= n <= 3 for n in self.agent_slots)):
            raise ValueError(f"agent_slots must give 1-3 slots for each of the {self.agents} agents: {self}")
        if len(self.job_asks) + len(self.queued) > 6 or self.policy not in POLICIES:
            raise ValueError(f"scope out of range: {self}")
        if self.partition_changes and not self.partitioned:
            raise ValueError("partition changes need partitioned=True")
        if self.fault_kinds is not None and not self.fault_kinds <= FAULTS:
            raise ValueError(f"not fault steps: {sorted(self.fault_kinds - FAULTS)}")


class ExploredMachine(ReckonMachine):
    """The stateful machine, driven step by step by the explorer instead of Hypothesis."""

    # Most scenarios are written for FIFO's placement (most free agent first); a scope's
    # ``policy`` sets the instance's (``start``), which the machine's set-up and restarts read.
    SCHEDULER_POLICY = "fifo"

    def __init__(self) -> None:  # noqa: D107 - skip Hypothesis' set-up: nothing here uses it
        self.ready = False

    @classmethod
    def start(cls, scope: Scope) -> "ExploredMachine":
        m = cls()
        if scope.policy != cls.SCHEDULER_POLICY:
            m.SCHEDULER_POLICY = scope.policy
        slots = list(scope.agent_slots or (scope.slots,) * scope.agents) + [scope.slots] * 3
        plain = not scope.job_asks  # one-slot jobs: submitted by the machine's own set-up
        m.setup(n_agents=scope.agents, slots=slots[:3], ctrl_page=scope.ctrl_page,
                agent_page=scope.agent_page, round_timeout=scope.round_timeout, lost_after=scope.lost_after,
                recent_window=300.0, retry_max=4.0, initial_jobs=[1] * scope.jobs if plain else [],
                partitioned=scope.partitioned)
        if not plain:
            for ask in scope.job_asks:
                m._submit_ask(ask)
            m._schedule(None)
        if scope.settle_first:
            m._deliver_all()
            m._advance(scope.time_step, 0.0, False)  # the Started reports go out with a tick
            m._deliver_all()
        for ask in scope.queued:
            m._submit_ask(ask)
        m.check()
        return m

    def _submit_ask(self, ask: Ask) -> None:
        slots, time_limit, partition = ask
        asks = {k: v for k, v in (("time_limit", time_limit), ("partition", partition)) if v is not None}
        self._submit(slots, ("true",), asks=asks)

    # ---- steps the Hypothesis rules do not offer in this exact form ----------------

    lossy: set[int]  # connections a message was dropped, duplicated or reordered on (see settle_in_place)

    def _tamper(self, i: int) -> Any:
        item = self._heads()[i]
        self.lossy = getattr(self, "lossy", set()) | {item.conn}
        return item

    def delay(self, i: int) -> None:
        """The head of channel ``i`` is delivered late: behind everything now in flight on any channel."""
        item = self._tamper(i)
        self.wire.remove(item)
        self.wire.append(item)

    def drop_head(self, i: int) -> None:
        self.wire.remove(self._tamper(i))

    def duplicate_head(self, i: int) -> None:
        item = self._tamper(i)
        self.uid += 1
        self.wire.insert(self.wire.index(item) + 1, _twin(item, self.uid))

    def round_deadline(self, agent: str) -> None:
        """The open round's timer fires at its deadline (time jumps there, no one else ticks)."""
        token, deadline = next((k[1], d) for k, d in sorted(self.timers.items()) if k[0] == agent)
        self.now = max(self.now, deadline)
        self._ctrl(E.RoundDeadlineExpired(agent=agent, token=token, now=self.now))

    def start_grace_ends(self) -> None:
        """The start gate's grace timer fires (time jumps to its deadline, no one else ticks)."""
        assert self.grace_timer is not None
        self.now = max(self.now, self.grace_timer)
        self.grace_timer = None
        self._ctrl(E.StartGraceEnded(now=self.now))

    def rollback_losing_mark(self, keep: int) -> None:
        """The operator restores an old copy of the controller's state without its id mark file
        (a scenario's prefix only: ids may then be issued again, for other submissions)."""
        self._rollback(keep, lose_mark=True)

    def kill_slowly(self, i: int) -> None:
        """The head of channel ``i`` (a Kill) is delivered, and the process it kills outlives it for
        its grace period: it ends when time next passes (a scenario's prefix only)."""
        self.slow_kills = True
        try:
            self._deliver(self._heads()[i])
        finally:
            self.slow_kills = False

    def submit_one(self) -> None:
        """A user submits a one-slot job (a scenario's prefix only)."""
        self._submit(1, ("true",))

    def set_partition(self, name: str, key: str, value: Any) -> None:
        """The operator changes partition ``name`` at run time (``reckon partition set``): the
        machine's ``partition_change`` rule with the partition and the new value named, so that
        a trace reads as what the operator did.  Token mode: always allowed."""
        self._client_op(SetPartition(name=name, changes=((key, value),), now=self.now, caller=None), "partition")

    def prioritize(self, job: str, priority: int) -> None:
        """The operator sets a job's priority adjustment (``reckon update JOB --priority N``; the
        rule the stateful machine had, taken out of its draw): the job moves in the queue."""
        record = self.controller.state.jobs[job]
        self._client_op(E.UpdateJob(job=job, priority=priority, now=self.now, caller=None), "prioritize", record)

    def check(self, *, whole_state: bool = True) -> None:
        """Every state invariant of the machine (each ``inv_*``; ``whole_state=False``: all but the
        whole-state comparisons, for the rounds of a settling run)."""
        self._check_all_invariants(whole_state=whole_state)


def _twin(item: Any, uid: int) -> Any:
    twin = copy.copy(item)
    twin.data = copy.deepcopy(item.data)
    twin.uid = uid
    return twin


# ---- the steps enabled in a state ---------------------------------------------------------

Step = tuple[str, tuple[tuple[str, Any], ...]]  # (method, keyword arguments)

# Steps that are faults: a trace may take at most ``Scope.faults`` of them.
FAULTS = frozenset({"drop_head", "duplicate_head", "delay", "disconnect", "agent_crash", "controller_crash",
                    "controller_rollback", "supervisor_lost"})


def _step(method: str, **kwargs: Any) -> Step:
    return (method, tuple(kwargs.items()))


# Operator steps with budgets of their own: at most ``Scope.partition_changes`` partition changes
# and ``Scope.priority_changes`` priority adjustments per trace.
PARTITION_CHANGES = frozenset({"set_partition"})
PRIORITY_CHANGES = frozenset({"prioritize"})
PUSH = 100_000  # an operator's adjustment that puts a job before every other (age and fair share: < 31 000)


def steps(m: ExploredMachine, scope: Scope, faults_left: int = 1, changes_left: int = 0,
          priorities_left: int = 0) -> list[Step]:
    out = _all_steps(m, scope)
    kinds = FAULTS if scope.fault_kinds is None else scope.fault_kinds
    out = [s for s in out if s[0] not in FAULTS or (faults_left > 0 and s[0] in kinds)]
    if changes_left > 0 and scope.partition_changes:
        out += _partition_steps(m)
    if priorities_left > 0 and scope.priority_changes:
        out += [_step("prioritize", job=job.id, priority=0 if job.priority_adjust else PUSH)
                for job in m.controller.state.jobs.values() if job.state is JobState.PENDING]
    return out


def _partition_steps(m: ExploredMachine) -> list[Step]:
    """Each change an operator can make to one partition: down or up, the default, its agents
    moved (to one agent, or to every agent: an agent then in both partitions)."""
    out: list[Step] = []
    for name, part in sorted(m.controller.state.partitions.items()):
        out.append(_step("set_partition", name=name, key="state", value="UP" if part.state == "DOWN" else "DOWN"))
        if not part.default:
            out.append(_step("set_partition", name=name, key="default", value=True))
        for nodes in [(agent,) for agent in m.names] + [("a*",)]:
            if part.nodes != nodes:
                out.append(_step("set_partition", name=name, key="nodes", value=nodes))
    return out


def _all_steps(m: ExploredMachine, scope: Scope) -> list[Step]:
    out: list[Step] = []
    if m.wire:
        out.append(_step("settle"))  # deliver everything, oldest first: a shortcut to deeper states
    for i, head in enumerate(m._heads()):
        out.append(_step("deliver", i=i, keep_copy=False))
        if head.data is not None:  # a close notice is never lost, duplicated or overtaken
            out += [_step("drop_head", i=i), _step("duplicate_head", i=i), _step("delay", i=i)]
    names = list(m.sides)
    connected = [s for s in m.sides.values() if s.conn is not None]
    for i, _ in enumerate(connected):
        out.append(_step("disconnect", i=i, lose_in_flight=False))
    down_conn = [s for s in m.sides.values() if s.agent is not None and s.conn is None]
    for i, _ in enumerate(down_conn):
        out.append(_step("rejoin", i=i, deliver_join=False, then_schedule=False))
    alive = [s for s in m.sides.values() if s.agent is not None]
    for i, _ in enumerate(alive):
        out.append(_step("agent_crash", i=i, restart_now=not scope.agent_down, lost=[], slots=None))
    if scope.agent_down:
        for i, _ in enumerate(s for s in m.sides.values() if s.agent is None):
            out.append(_step("agent_restart", i=i, lost=[], slots=None))
    out.append(_step("controller_crash", keep_stale=True, snapshot_at=None))
    if scope.snapshots and len(m.log) > 2:
        out.append(_step("controller_crash", keep_stale=True, snapshot_at=len(m.log) // 2))
    if len(m.log) > 3:  # the operator restores the state before the newest fact (agents keep what it placed)
        out.append(_step("controller_rollback", keep=len(m.log) - 2))
    jobs = list(m.controller.state.jobs.values())
    for i, job in enumerate(jobs):
        if not job.terminal:
            out.append(_step("cancel", i=i, running_only=False))
    procs = [p for p in m.procs if p.alive]
    for i, _ in enumerate(procs):
        for outcome in scope.outcomes:
            out.append(_step("process_ends", i=i, outcome=outcome))
    for i, _ in enumerate(p for p in procs if m.sides[p.agent].agent is not None):
        out.append(_step("supervisor_lost", i=i))
    for name in names:
        if any(k[0] == name for k in m.timers):
            out.append(_step("round_deadline", agent=name))
    if any(j.state is JobState.PENDING for j in jobs):
        out.append(_step("scheduler_pass", limit=None, defer=False))
        out.append(_step("scheduler_pass", limit=None, defer=True))  # its proposals reach the controller later
    for i, _ in enumerate(m.proposals):
        out.append(_step("late_proposal", i=i))
    if m.grace_timer is not None:
        out.append(_step("start_grace_ends"))
    out.append(_step("advance_time", dt=scope.time_step, jitter=0.0, fire=False))
    return out


def run_step(m: ExploredMachine, step: Step) -> None:
    method, kwargs = step
    getattr(m, method)(**dict(kwargs))


def describe(step: Step) -> str:
    method, kwargs = step
    return f"{method}({', '.join(f'{k}={v!r}' for k, v in kwargs)})"


# ---- canonical form -------------------------------------------------------------------------

# Machine fields that are history kept for the checks (or counters), not state.
_HISTORY = frozenset({
    "log", "durable", "ended_timers", "queries", "applied_tokens", "violations", "uid", "next_token", "next_conn",
    "last_report", "ever_dispatched", "terminal_seen", "ready", "cconf", "names",
    "issued_ids",  # every id ever issued (INV-JOB-ID-UNIQUE): the id mark and next_job carry what matters
    "scheduler", "notes",  # re-entered below as the view the scheduler has once the notes drain
    "conn_agent", "ctrl_open", "ctrl_joined", "agent_open", "lossy",  # re-entered below, for live connections only
})
_CONN_FIELDS = frozenset({"conn", "latest_conn"})
_SKIP_ATTRS = frozenset({"applied_rounds", "facts_applied", "digest", "pid", "uid_wire", "config"})


class _Canon:
    """Builds a hashable canonical form; tokens and connections are renamed by order of creation."""

    def __init__(self, tokens: dict[bytes, int], conns: dict[int, int]) -> None:
        self.tokens, self.conns = tokens, conns

    def form(self, obj: Any, conn: bool = False) -> Any:
        if conn and isinstance(obj, int):
            return ("c", self.conns.get(obj, -1))
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, bytes):
            return ("t", self.tokens.get(obj, -1)) if len(obj) == TOKEN_LEN else obj
        if isinstance(obj, enum.Enum):
            return obj.name
        if isinstance(obj, (list, tuple)):
            return tuple(self.form(x) for x in obj)
        if isinstance(obj, (set, frozenset)):
            return ("set", tuple(sorted((self.form(x) for x in obj), key=repr)))
        if isinstance(obj, dict):
            items = [(self.form(k, conn), self.form(v, conn=k in _CONN_FIELDS)) for k, v in obj.items()]
            return ("map", tuple(sorted(items, key=lambda kv: repr(kv[0]))))
        return (type(obj).__name__, tuple(
            (name, self.form(value, conn=name in _CONN_FIELDS)) for name, value in _attrs(obj)
            if name not in _SKIP_ATTRS))


def _attrs(obj: Any) -> list[tuple[str, Any]]:
    names: list[str] = []
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if name not in names and not name.startswith("__"):
                names.append(name)
    names += [n for n in getattr(obj, "__dict__", {}) if n not in names]
    return [(n, getattr(obj, n)) for n in names if hasattr(obj, n)]


def _collect_tokens(obj: Any, found: set[bytes], depth: int = 0) -> None:
    if isinstance(obj, bytes):
        if len(obj) == TOKEN_LEN:
            found.add(obj)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for x in obj:
            _collect_tokens(x, found, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _collect_tokens(k, found, depth + 1)
            _collect_tokens(v, found, depth + 1)
    elif obj is not None and not isinstance(obj, (bool, int, float, str, enum.Enum)):
        for _, v in _attrs(obj):
            _collect_tokens(v, found, depth + 1)


def canonical(m: ExploredMachine) -> Any:
    """The state of model + world, with counters' values renamed: equal states get equal forms."""
    live_conns = {s.conn for s in m.sides.values() if s.conn is not None}
    live_conns |= {w.conn for w in m.wire}
    live_conns |= set(m.controller.conns)
    for sess in m.controller.sessions.values():
        live_conns |= {c for c in (sess.conn, sess.latest_conn) if c}
    conns = {c: k for k, c in enumerate(sorted(live_conns))}
    scheduler = copy.deepcopy(m.scheduler)
    for note in m.notes:  # every use of the scheduler drains the notes first
        scheduler.notify(note)
    parts = {
        # The view, and what backfill and partitions keep beyond it (issue #22): the agents'
        # partitions, pending jobs' partitions and time limits, what runs where until when, and the
        # latest pass's reservations (``expected_start``; the liveness check reads them).
        "scheduler": (scheduler.view(), {n: a.partitions for n, a in scheduler._agents.items()},
                      scheduler._partition_of, scheduler._limit_of, scheduler._running_at,
                      {job: (r.agent, r.start) for job, r in scheduler.reservations.items()}),
        "durable": m.controller.state.digest(),
        "controller": (m.controller.sessions, {conns[c]: name for c, name in m.controller.conns.items()},
                       m.controller.start_gate),
        "links": {c: (m.conn_agent.get(c), m.ctrl_open.get(c), m.ctrl_joined.get(c), m.agent_open.get(c),
                      c in getattr(m, "lossy", ())) for c in live_conns},
        "rest": {k: v for k, v in vars(m).items() if k not in _HISTORY and k != "controller"},
    }
    found: set[bytes] = set()
    _collect_tokens(parts, found)
    canon = _Canon({t: k for k, t in enumerate(sorted(found))}, conns)
    return (canon.form(parts["durable"]), canon.form(parts["scheduler"]), canon.form(parts["controller"]),
            tuple(sorted(((conns[c], canon.form(v)) for c, v in parts["links"].items()))),
            canon.form(parts["rest"]))


# ---- the search ----------------------------------------------------------------------------------


@dataclass
class Violation:
    invariant: str  # the invariant ID named by the failed check (or the exception's type)
    message: str
    trace: list[Step]
    scope: Scope
    liveness: bool = False  # found while running to quiescence from the trace's last state

    def events(self) -> str:
        lines = [f"{k + 1:3d}. {describe(s)}" for k, s in enumerate(self.trace)] or ["     (the scope's start)"]
        if self.liveness:
            lines.append("     then: faults stop, run to quiescence (teardown)")
        return "\n".join(lines)

    def snippet(self) -> str:
        body = "\n".join(f"    m.{describe(s)}\n    m.check()" for s in self.trace)
        tail = "\n    m.teardown()" if self.liveness else ""
        return (f"def test_found_by_explorer():\n    m = ExploredMachine.start({self.scope!r})\n"
                f"{body}{tail}\n")

    def __str__(self) -> str:
        return (f"{self.invariant}: {self.message}\nshortest trace ({len(self.trace)} steps):\n{self.events()}\n"
                f"replayable test:\n{self.snippet()}")


@dataclass
class Result:
    states: int = 0  # distinct states explored
    transitions: int = 0
    depth: int = 0  # deepest level completed
    liveness_checked: int = 0
    seconds: float = 0.0
    violation: Violation | None = None
    goal: list[Step] | None = None  # the shortest way to a state ``goal`` accepts
    per_depth: list[int] = field(default_factory=list)

    def summary(self) -> str:
        found = f"VIOLATION {self.violation.invariant}" if self.violation else "no violation"
        return (f"{self.states} states, {self.transitions} transitions, depth {self.depth} "
                f"(per depth {self.per_depth}), {self.liveness_checked} liveness runs, {self.seconds:.1f} s: {found}")


def _invariant_of(exc: BaseException) -> str:
    text = str(exc)
    if text.startswith("INV-"):
        return text.split(":", 1)[0]
    for word in text.replace(",", " ").split():
        if word.startswith("INV-"):
            return word.rstrip(":")
    return type(exc).__name__


def _clone(m: ExploredMachine) -> ExploredMachine:
    return pickle.loads(pickle.dumps(m, pickle.HIGHEST_PROTOCOL))  # several times faster than deepcopy


def settle_in_place(m: ExploredMachine, rounds: int = 12, judge_tampered: bool = False) -> None:
    """Faults stop and nobody reconnects: deliver everything and let time pass (heartbeats, retries,
    deadlines).  Every agent still connected ends with the controller's placement (INV-LIVENESS-AGREE):
    anti-entropy repairs a disagreement on a live connection, without a join round."""
    step = 1.0 + max(max(s.config.retry_max * 1.25, s.config.heartbeat_interval) for s in m.sides.values())
    def judged(tampered: bool = False) -> list[str]:
        # A WebSocket loses nothing without closing: a tampered connection is judged only on request.
        return [name for name, side in m.sides.items()
                if side.agent is not None and side.conn is not None
                and (side.conn in getattr(m, "lossy", ())) == tampered
                and getattr(m.controller.sessions.get(name), "conn", None) == side.conn]

    def agree(name: str) -> bool:
        return sorted(m.sides[name].agent.held()) == sorted(m.controller.placed_on(name).items())

    for k in range(rounds):
        m._deliver_all()
        m._drain_notes()
        m.check(whole_state=False)
        if k >= 2 and not m.wire and all(agree(name) for name in judged()):
            break
        m._advance(step, 0.0, True)
    m._deliver_all()
    m.check()
    for name, side in m.sides.items():  # tampered or not: a round ends (applied, or timed out and closed)
        sess = m.controller.sessions.get(name)
        assert sess is None or sess.round is None or sess.conn != side.conn, (
            f"INV-LIVENESS-QUIET: {name} stays connected with a round open (deadlines fired, nothing in flight)")
    for name in judged():
        held, placed = sorted(m.sides[name].agent.held()), sorted(m.controller.placed_on(name).items())
        assert held == placed, (f"INV-LIVENESS-AGREE: {name} stays connected and holds {held}, "
                                f"the controller places {placed} there (anti-entropy did not repair it)")
    for name in judged(tampered=True) if judge_tampered else ():
        agent, sess = m.sides[name].agent, m.controller.sessions[name]
        held, placed = sorted(agent.held()), sorted(m.controller.placed_on(name).items())
        seen = sess.unrepaired == (sess.conn, (len(held), M.running_digest(held)),
                                   m.controller.state.placement_digest(name))
        blind = agent.seen_seq < sess.seq  # a message it never got: no fair comparison on this connection
        assert held == placed or seen or blind, (
            f"INV-LIVENESS-AGREE: {name} stays connected (a message was tampered with on its connection) and "
            f"holds {held}, the controller places {placed} there, and no round has seen that disagreement")


def _teardown(m: ExploredMachine, scope: Scope) -> None:
    settle_in_place(_clone(m), judge_tampered=scope.judge_tampered)
    m.teardown()


def explore(scope: Scope, depth: int, *, prefix: tuple[Step, ...] = (), max_states: int | None = None,
            liveness: Callable[[int, bool], bool] | None = None,
            goal: Callable[[ExploredMachine], bool] | None = None) -> Result:
    """Breadth-first to ``depth`` steps; stops at the first violation (its trace is a shortest one).

    ``liveness(level, leaf)`` says whether to run to quiescence from a state; by
    default from every frontier state and every state with no new successor.
    """
    started = time.monotonic()
    result = Result()
    check_liveness = liveness or (lambda level, leaf: leaf or level == depth)

    def fail(exc: BaseException, trace: list[Step], live: bool) -> Result:
        result.violation = Violation(invariant=_invariant_of(exc), message=str(exc)[:2000], trace=trace,
                                     scope=scope, liveness=live)
        result.seconds = time.monotonic() - started
        return result

    done: list[Step] = []
    try:  # a start that already breaks a check (the scope's first pass, say) is a finding too
        root = ExploredMachine.start(scope)
        for st in prefix:  # a scenario's way to an interesting state, then everything from there
            done.append(st)
            run_step(root, st)
            root.check()
    except Exception as exc:  # noqa: BLE001
        return fail(exc, done, False)
    # What a trace may still take: (faults, partition changes, priority changes); part of a state's key.
    budget = (scope.faults, scope.partition_changes, scope.priority_changes)
    seen = {(budget, canonical(root))}
    level: list[tuple[ExploredMachine, list[Step], tuple[int, int, int]]] = [(root, list(prefix), budget)]
    result.states = 1
    result.per_depth.append(1)

    for d in range(depth + 1):
        following: list[tuple[ExploredMachine, list[Step], tuple[int, int, int]]] = []
        for m, trace, (faults_left, changes_left, priorities_left) in level:
            new = 0
            if d < depth:
                for st in steps(m, scope, faults_left, changes_left, priorities_left):
                    child = _clone(m)
                    result.transitions += 1
                    try:
                        run_step(child, st)
                        child.check()
                    except Exception as exc:  # noqa: BLE001 - any failure of the model is a finding
                        return fail(exc, trace + [st], False)
                    left = (faults_left - (st[0] in FAULTS), changes_left - (st[0] in PARTITION_CHANGES),
                            priorities_left - (st[0] in PRIORITY_CHANGES))
                    key = (left, canonical(child))
                    if key in seen:
                        continue
                    seen.add(key)
                    if goal is not None and goal(child):  # a search for a way into a state, not a check
                        result.goal = trace + [st]
                        result.seconds = time.monotonic() - started
                        return result
                    new += 1
                    following.append((child, trace + [st], left))
                    if max_states is not None and len(seen) >= max_states:
                        break
            if check_liveness(d, new == 0):
                result.liveness_checked += 1
                probe = _clone(m)
                try:
                    _teardown(probe, scope)
                except Exception as exc:  # noqa: BLE001
                    return fail(exc, trace, True)
        result.depth = d
        if not following:
            break
        result.states += len(following)
        result.per_depth.append(len(following))
        level = following
        if max_states is not None and len(seen) >= max_states:
            result.depth = d + 1
            break
    result.seconds = time.monotonic() - started
    return result


@dataclass(frozen=True)
class Scenario:
    """A scope, a way into it (steps run before the search) and the depth searched from there."""

    name: str
    scope: Scope
    depth: int
    prefix: tuple[Step, ...] = ()


S_ = _step
# a1's anti-entropy round R1 (its supervisor lost job 1) is applied; a copy of R1's report page is kept
# in flight; job 1's next attempt runs on a1 and is lost too, so a heartbeat arms R2 on the same
# connection, overtaking the copy.  From here a stale round's page can reach the open round.
TWO_ROUNDS = (
    S_("supervisor_lost", i=0), S_("advance_time", dt=2.5, jitter=0.0, fire=False),
    S_("deliver", i=0, keep_copy=False),  # a1's heartbeat: R1
    S_("deliver", i=0, keep_copy=False),  # a2's heartbeat
    S_("deliver", i=0, keep_copy=False),  # R1's query: its report is in flight
    S_("duplicate_head", i=0),
    S_("deliver", i=0, keep_copy=False),  # R1 applied: job 1 requeued
    S_("deliver", i=1, keep_copy=False),  # R1's ResyncDone
    S_("scheduler_pass", limit=None, defer=False),  # job 1 attempt 2 goes to a1
    S_("deliver", i=1, keep_copy=False),  # a1 starts it
    S_("supervisor_lost", i=1), S_("advance_time", dt=2.5, jitter=0.0, fire=False),
    S_("delay", i=0),  # R1's copied page falls behind a1's heartbeat
    S_("deliver", i=0, keep_copy=False),  # R2
)

# Both dispatches were lost by a rollback of the controller's state, but the agents got them and run
# jobs 1 and 2; a2 (2 slots) has rejoined, so its job 2 was adopted.
ROLLED_BACK = (S_("controller_rollback", keep=4), S_("settle"),
               S_("rejoin", i=1, deliver_join=False, then_schedule=False), S_("settle"))

# Four jobs run on two agents of two slots, a fifth is pending; a1's job 1 ended, so a scheduler pass
# proposed job 5 for a1, but the proposal is still on its way when a1 is cut and back: it has its
# Welcome, its join round's query is in flight.
REJOINING = (S_("process_ends", i=0, outcome=(0, None)), S_("settle"), S_("scheduler_pass", limit=None, defer=True),
             S_("disconnect", i=0, lose_in_flight=False), S_("rejoin", i=0, deliver_join=True, then_schedule=False),
             S_("deliver", i=1, keep_copy=False))  # a1's Welcome (with the round's token)

# The controller's state is restored from its oldest copy without the id mark file, so job id 1 is
# issued again, to another submission, while a1 still holds attempt 1 of the old one (killed at its
# rejoin, its record kept for the recent window).  a1 refuses the new dispatch of 1/1; a copy of that
# refusal stays in flight behind the original, which is delivered: 1 is requeued, to run as attempt 2.
REUSED_ID = (S_("rollback_losing_mark", keep=0), S_("submit_one"), S_("settle"),
             S_("rejoin", i=0, deliver_join=False, then_schedule=False),
             S_("rejoin", i=0, deliver_join=False, then_schedule=False), S_("settle"),
             S_("scheduler_pass", limit=None, defer=False), S_("deliver", i=0, keep_copy=False),
             S_("duplicate_head", i=0), S_("deliver", i=0, keep_copy=False))

# Two disagreements that cancel out in the counts (the I6 class, docs/checking.md): jobs 1 and 3 are
# dispatched to a1 (2 slots); 1's Dispatch falls behind 3's, then behind the anti-entropy round a1's
# heartbeat arms, so a1 reports 1 unrecognized and 1 is requeued; the Dispatch then arrives and a1
# runs attempt 1 of job 1, an orphan nobody knows of.  Then 3's supervisor is lost.  a1 holds {1/1},
# the controller places {3/1} there: one each.  (Two reorderings of one live connection: a
# WebSocket never does that, so the scenario judges tampered connections too, judge_tampered.)
EQUAL_COUNTS = (S_("delay", i=0), S_("deliver", i=0, keep_copy=False), S_("deliver", i=0, keep_copy=False),
                S_("advance_time", dt=2.5, jitter=0.0, fire=False),
                S_("deliver", i=1, keep_copy=False), S_("deliver", i=1, keep_copy=False),  # a1's Started, heartbeat:
                S_("deliver", i=1, keep_copy=False),  # a2's Started; the round's two query pages are on their way
                S_("delay", i=0),  # 1's Dispatch falls behind them
                S_("deliver", i=1, keep_copy=False), S_("deliver", i=1, keep_copy=False),  # a1 reports
                S_("deliver", i=2, keep_copy=False), S_("deliver", i=2, keep_copy=False),  # 1/1 requeued
                S_("deliver", i=1, keep_copy=False),  # the Dispatch of 1/1: a1 starts it
                S_("supervisor_lost", i=1))  # 3's supervisor is lost

# One agent holds two attempts of one job: a1 was lost (lost_after) with job 1 running, 1 was requeued;
# at a1's rejoin its round reported 1/1 running and the controller killed that orphan, which outlives
# its kill (kill_slowly) while 1/2 is dispatched to a1 and starts.  a1's next heartbeat disagrees
# (it holds both), the anti-entropy round's report names 1/1 running again, and a second Kill of 1/1
# is in flight.  An agent that kills by job alone kills 1/2 with it (INV-NO-WRONG-KILL, at the agent).
_DELIVER = S_("deliver", i=0, keep_copy=False)
_TIME = S_("advance_time", dt=2.5, jitter=0.0, fire=False)
ORPHAN_DYING = (S_("disconnect", i=0, lose_in_flight=False), S_("settle"), _TIME, _TIME,  # 1/1 requeued
                S_("rejoin", i=0, deliver_join=False, then_schedule=False),
                _DELIVER, _DELIVER, _DELIVER, _DELIVER,  # Join, Welcome, query, report: Kill 1/1 sent
                S_("kill_slowly", i=0), S_("settle"), S_("scheduler_pass", limit=None, defer=False),
                S_("settle"),  # 1/2 runs on a1 beside the dying 1/1
                _TIME, _DELIVER, _DELIVER, _DELIVER, _DELIVER, _DELIVER)  # the heartbeat's round: Kill 1/1 again

# Issue #22's scheduling.  Backfill: a1 runs a 2-slot job without a time limit, a2 (2 slots) a 1-slot job
# of 10 s; queued behind them, a 2-slot job of 60 s (blocked: it fits only once a2 empties, so the first
# pass promises it a2 at 110), a 1-slot job without a time limit (it fits a2 now but would delay that
# promise: it waits) and a 1-slot job of 5 s (it ends before 110: it starts on a2 now, while time has
# not passed 105).
BACKFILL = dict(agent_slots=(2, 2), job_asks=((2, None, None), (1, 10.0, None)),
                queued=((2, 60.0, None), (1, None, None), (1, 5.0, None)), policy="backfill",
                outcomes=((0, None),))
# The same queue on a1 alone (2 slots, running the 10 s job), where a controller crash (a new
# scheduler, fed by the recovered state's notes, behind the start gate) or a1's crash (it stays down,
# or comes back and reconciles: no promise on an agent that is away) is the trace's fault.
BACKFILL_FAULT = dict(agents=1, agent_slots=(2,), job_asks=((1, 10.0, None),),
                      queued=((2, 60.0, None), (1, None, None), (1, 5.0, None)), policy="backfill",
                      outcomes=((0, None),), agent_down=True, snapshots=False,
                      fault_kinds=frozenset({"controller_crash", "agent_crash"}))
# The same queue on a1 alone, no fault, and one operator priority adjustment per trace: a queued job
# pushed before every other (or back), so the blocked job that holds the promise can change hands.
BACKFILL_PRIORITY = dict(agents=1, agent_slots=(2,), job_asks=((1, 10.0, None),),
                         queued=((2, 60.0, None), (1, None, None), (1, 5.0, None)), policy="backfill",
                         outcomes=((0, None),), priority_changes=1)
# Partitions pa (a1, the default) and pb (a2): a2 runs a pb job of 20 s; queued, a job of pa (a1 is
# free: the first pass proposes it there) and a pb job of 30 s (blocked behind the first: promised a2
# at 120).  One operator change per trace: a partition down or up, pb the default, a partition's
# agents moved (to one agent, or to both: a1 then in both), while proposals are on their way.
PARTITION_MOVED = dict(partitioned=True, partition_changes=1, job_asks=((1, 20.0, "pb"),),
                       queued=((1, None, None), (1, 30.0, "pb")), policy="backfill", outcomes=((0, None),))

# The CI bound (tests/model/test_explore.py): 1 controller x 2 agents x 2 jobs x 1 slot x page size 1
# (5 jobs x 2 slots for "rejoining"), one fault per trace, from eight starting points (none after
# "equal-counts"' prefix, whose own faults are two reorderings and a lost supervisor); and issue #22's
# four, under backfill: "backfill" (no fault: every interleaving of passes, ends, cancels and time),
# "backfill-fault" (one controller or agent crash), "backfill-priority" (one operator priority
# adjustment, no fault) and "partition-moved" (one operator partition change, no fault).  `make check-deep` runs DEEP.
SCENARIOS = (
    Scenario("settled", Scope(faults=1), depth=3),  # every job running and reported
    Scenario("dispatching", Scope(settle_first=False, faults=1), depth=3),  # both Dispatches in flight
    Scenario("rejoining", Scope(jobs=5, slots=2, faults=1), depth=2, prefix=REJOINING),
    Scenario("two-rounds", Scope(faults=1), depth=3, prefix=TWO_ROUNDS),
    Scenario("rolled-back", Scope(settle_first=False, slots=2, faults=1), depth=3, prefix=ROLLED_BACK),
    Scenario("reused-id", Scope(jobs=1, faults=1), depth=3, prefix=REUSED_ID),
    Scenario("equal-counts", Scope(jobs=3, slots=2, settle_first=False, faults=0, judge_tampered=True), depth=2,
             prefix=EQUAL_COUNTS),
    Scenario("orphan-dying", Scope(agents=1, jobs=1, lost_after=4.0, faults=1), depth=2, prefix=ORPHAN_DYING),
    Scenario("backfill", Scope(**BACKFILL, faults=0), depth=3),
    Scenario("backfill-fault", Scope(**BACKFILL_FAULT, faults=1), depth=3),
    Scenario("backfill-priority", Scope(**BACKFILL_PRIORITY, faults=0), depth=3),
    Scenario("partition-moved", Scope(**PARTITION_MOVED, faults=0), depth=3),
)
DEEP = (  # two faults per trace, "rejoining" one level deeper, an agent that stays down, three agents
    Scenario("settled", Scope(faults=2), depth=3),
    Scenario("dispatching", Scope(settle_first=False, faults=2), depth=3),
    Scenario("rejoining", Scope(jobs=5, slots=2, faults=2), depth=3, prefix=REJOINING),
    Scenario("two-rounds", Scope(faults=2), depth=3, prefix=TWO_ROUNDS),
    Scenario("rolled-back", Scope(settle_first=False, slots=2, faults=2), depth=3, prefix=ROLLED_BACK),
    Scenario("reused-id", Scope(jobs=1, faults=2), depth=3, prefix=REUSED_ID),
    Scenario("equal-counts", Scope(jobs=3, slots=2, settle_first=False, faults=1, judge_tampered=True), depth=3,
             prefix=EQUAL_COUNTS),
    Scenario("orphan-dying", Scope(agents=1, jobs=1, lost_after=4.0, faults=2), depth=3, prefix=ORPHAN_DYING),
    Scenario("agent-down", Scope(agent_down=True, faults=2), depth=3),
    Scenario("three-agents", Scope(agents=3, jobs=3, faults=1), depth=3),
    Scenario("backfill", Scope(**BACKFILL, faults=1, fault_kinds=BACKFILL_FAULT["fault_kinds"]), depth=4),
    Scenario("backfill-fault", Scope(**BACKFILL_FAULT, faults=2), depth=4),
    Scenario("backfill-priority", Scope(**BACKFILL_PRIORITY, faults=0), depth=4),
    Scenario("partition-moved", Scope(**PARTITION_MOVED, faults=0), depth=4),
)


def run_scenarios(scenarios: tuple[Scenario, ...], **kwargs: Any) -> list[tuple[Scenario, Result]]:
    """Explore each scenario; stop at the first violation."""
    results = []
    for sc in scenarios:
        result = explore(sc.scope, sc.depth, prefix=sc.prefix, **kwargs)
        results.append((sc, result))
        if result.violation is not None:
            break
    return results


def main() -> None:  # pragma: no cover - the deep run: `make check-deep`
    import argparse

    parser = argparse.ArgumentParser(description="exhaustive exploration of the model's small scopes")
    parser.add_argument("--deep", action="store_true", help="the DEEP scenarios (default: the CI ones)")
    args = parser.parse_args()
    failed = False
    for scenario in DEEP if args.deep else SCENARIOS:
        result = explore(scenario.scope, scenario.depth, prefix=scenario.prefix)
        print(f"{scenario.name}: {result.summary()}", flush=True)
        if result.violation is not None:
            print(result.violation, flush=True)
            failed = True
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["ExploredMachine", "Result", "Scope", "Violation", "canonical", "explore", "steps"]
