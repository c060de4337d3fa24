"""The whole protocol under faults: a Hypothesis ``RuleBasedStateMachine``.

The machine owns one ``Controller`` (and its durable fact log), one
``Scheduler``, two or three ``Agent`` models with a durable "disk" each, the
messages in flight on every connection in both directions, a fake world of OS
processes (the ground truth of every exit code, signal and finish time) and a
clock that only moves forward.  Rules inject work (submit, cancel, schedule,
processes ending) and faults (drop, duplicate, reorder, stale delivery, a
report presented twice, late scheduler proposals, lost supervisors,
disconnects, controller crash + replay, agent crash + restart, time jumps).

What the harness never does, because a real daemon cannot: deliver a message
of a closed connection to the agent's newer connection, accept a Join on a
connection that is already gone, or lose a connection's close notification
(a close may be late, never lost).

After every step the ``inv_*`` methods check the invariants of
``docs/invariants.md``; each names its ID in its docstring and in every
assertion message.  Checks that can only be made at the moment something is
emitted (a Dispatch sent to a reconciling agent, an oversized page) are
recorded as violations when the harness processes the command and reported by
the invariant method of that ID.  ``teardown`` stops the faults, reconnects
every agent, delivers everything and lets time pass until the system is quiet,
then checks liveness: every outcome an agent observed is recorded, truly.

Run ``RECKON_HYPOTHESIS_PROFILE=fuzz`` for long runs; ``ci`` is the default.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test,
)

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model import state as S
from reckon.model.agent import Agent, AgentConfig, LocalStatus, Retry, SessionState, refusal_retry
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.errors import LocalProtocolError, ModelCorrupted, PermissionDenied, RemoteProtocolError
from reckon.model.permissions import JOB_ACTIONS, Caller, check, owner_of
from reckon.model.policy import ready, user_limit_refusal
from reckon.model.jobs import JobSpec, JobState
from reckon.model.partition_ops import SetPartition
from reckon.model.partitions import Partition, may_run_on, startable
from reckon.model.resources import NodeResources, Usage
from reckon.model.scheduler import Scheduler

from tests.model import resource_checks, usage_check
from tests.model.backfill_check import soonest

AGENT_NAMES = ("a1", "a2", "a3")
# (exit_code, signal) of a process end: success, failures, killed by a signal.
OUTCOMES = ((0, None), (1, None), (3, None), (None, 9), (None, 15))
KILL_SIGNAL = 9
KILL_GRACE_STEPS = 2  # time steps a slowly killed process outlives its kill (the explorer's kill_slowly)
TIME_STEPS = (0.5, 1.0, 2.5, 6.0, 31.0, 301.0)
TERMINAL_FACTS = (F.JobFinished, F.JobCancelled, F.JobCancelConfirmed)
# What an agent's machine offers beyond CPUs (issue #20): None is an agent that schedules no
# memory and has no GPUs or gres (what a version 5 agent says); the rest mix the dimensions.
_G = 1 << 30
AGENT_RESOURCES = (
    None,
    NodeResources(mem=2 * _G, gpus=(0, 1), gres=(("lic", 2),), enforcer="cgroup-v1"),
    NodeResources(mem=_G, gpus=(3,), unenforced=("cpus", "mem"), enforcer="none"),
    NodeResources(mem=None, gpus=(0, 2, 5), gres=(("lic", 1),)),
)
# What a job asks beyond CPUs: most ask nothing more.
JOB_ASKS = ({}, {}, {"mem": _G // 2}, {"mem": _G}, {"gpus": 1}, {"gpus": 2, "mem": _G // 2},
            {"gres": (("lic", 1),)}, {"gpus": 1, "gres": (("lic", 2),)},
            # Issue #22: time limits, which backfill's reservations count on.
            {"time_limit": 5.0}, {"time_limit": 60.0}, {"time_limit": 60.0}, {"time_limit": 90.0},
            {"time_limit": 20.0, "mem": _G // 2}, {"time_limit": 30.0, "gpus": 1},
            # Priorities: a user's own nice (a negative one is an operator's: refused for a user).
            {"nice": 50}, {"nice": 2000, "time_limit": 60.0}, {"nice": -100})
# Version 8 (when a job may start): (--begin this many seconds from now or None, --dependency=singleton).
WHEN = (None, None, None, None, (0.0, False), (3.0, False), (40.0, False), (None, True), (None, True), (5.0, True))
INDEX = st.integers(min_value=0, max_value=1 << 16)
# Who asks (issue #20): token mode (None: may do everything, its jobs have no owner), two users, an operator.
CALLERS = (None, Caller(uid=1001, gid=1001, user="alice"), Caller(uid=1002, gid=1002, user="bob"),
           Caller(uid=0, gid=0, user="root", operator=True))
CALLER = st.sampled_from(CALLERS)
# An operator's priority adjustments (``reckon update JOB --priority``): the largest outweigh every
# factor together (the default weights add up to 31000), so INV-PRIORITY-ORDER can judge them.
PRIORITY_ADJUSTS = (-100_000, -5000, -1, 0, 1, 300, 100_000)


def cbor_like(value: Any) -> Any:
    """What a CBOR round trip gives back: tuples become lists, maps are copied."""
    if isinstance(value, (list, tuple)):
        return [cbor_like(v) for v in value]
    if isinstance(value, dict):
        return {k: cbor_like(v) for k, v in value.items()}
    return value


@dataclass
class Wire:
    """One item in flight: a wire map, or ``data=None`` for "the peer closed this connection"."""

    to: str  # "controller" or the receiving agent's name
    conn: int
    agent: str
    data: dict | None
    uid: int

    @property
    def channel(self) -> tuple[str, int]:
        return (self.to, self.conn)


@dataclass
class Proc:
    """A process of the fake world: the ground truth."""

    pid: int
    agent: str
    job: str
    attempt: int
    started_at: float
    alive: bool = True
    lost: bool = False  # its supervisor's record vanished: the outcome can never be observed
    exit_code: int | None = None
    signal: int | None = None
    finished_at: float | None = None
    uid: str | None = None  # the submission it runs for (the agent record's uid)
    dying: int = 0  # killed, in its grace period: the time steps it still lives (0: not dying)
    oom: bool = False  # it was killed for exceeding its memory limit

    @property
    def usage(self) -> Usage | None:
        """What its supervisor measured: a value of its own, so a usage given to another attempt shows."""
        if self.finished_at is None:
            return None
        return Usage(cpu_user=float(self.pid), cpu_system=0.5, max_rss=self.pid << 20,
                     wall=max(0.0, self.finished_at - self.started_at), source="rusage")

    @property
    def ended(self) -> bool:
        """It ended and the end was (or will be) observed by the supervisor."""
        return not self.alive and not self.lost

    @property
    def outcome(self) -> tuple:
        return (self.exit_code, self.signal, self.finished_at)

    def runs_for(self, job: Any) -> bool:
        """Whether this process ran for ``job``'s submission (its id and uid; a None uid is legacy)."""
        return self.job == job.id and (self.uid is None or job.uid is None or self.uid == job.uid)


@dataclass
class Side:
    """One machine: the agent model (None while crashed), its disk, its connection."""

    name: str
    config: AgentConfig
    agent: Agent | None = None
    records: dict = field(default_factory=dict)  # durable local job records
    outbox: dict = field(default_factory=dict)  # durable completion outbox
    conn: int | None = None  # the connection the agent uses now
    pending_exits: list = field(default_factory=list)  # ends recorded while the agent was down
    cluster: str | None = None  # durable: the controller history the records belong to


class ReckonMachine(RuleBasedStateMachine):
    # Issue #22: the scheduler's policy (the daemon's default); the explorer's scenarios keep FIFO.
    SCHEDULER_POLICY = "backfill"

    def __init__(self) -> None:
        super().__init__()
        self.ready = False

    # ---- set-up ---------------------------------------------------------------

    @initialize(
        n_agents=st.integers(2, 3),
        slots=st.lists(st.integers(1, 3), min_size=3, max_size=3),
        ctrl_page=st.integers(1, 3),
        agent_page=st.integers(1, 3),
        round_timeout=st.sampled_from([5.0, 30.0]),
        lost_after=st.sampled_from([None, 10.0, 60.0]),
        recent_window=st.sampled_from([5.0, 300.0]),
        retry_max=st.sampled_from([4.0, 30.0]),
        initial_jobs=st.lists(st.integers(1, 2), max_size=4),
        start_grace=st.sampled_from([0.0, 15.0]),
        max_running=st.sampled_from([None, None, 1, 2]),
        max_cpus=st.sampled_from([None, None, 2, 3]),
        resources=st.lists(st.sampled_from(AGENT_RESOURCES), min_size=3, max_size=3),
        partitioned=st.booleans(),
    )
    def setup(self, n_agents, slots, ctrl_page, agent_page, round_timeout, lost_after, recent_window, retry_max,
              initial_jobs, start_grace=15.0, max_running=None, max_cpus=None, resources=(None, None, None),
              partitioned=False):
        self.now = 100.0
        self.start_grace = start_grace  # the controller's rejoin grace after each start (0: no start gate)
        self.id_mark_file = 0  # the daemon's id mark file: outside the log, a rollback keeps it
        self.issued_ids: set[str] = set()  # every job id any history of this controller issued
        self.grace_timer: float | None = None  # the armed StartGraceTimer's deadline
        self.expected_hold: tuple[set[str], bool, float] | None = None  # INV-START-HOLD: (waiting, known, deadline)
        # Issue #22: two partitions in the config, pa (agent a1, the default) and pb (the others).
        parts = (Partition(name="pa", nodes=("a1",), default=True), Partition(name="pb", nodes=("a[2-3]",)))
        self.cconf = ControllerConfig(page_size=ctrl_page, round_timeout=round_timeout, lost_after=lost_after,
                                      max_running_per_user=max_running, max_cpus_per_user=max_cpus,
                                      partitions=parts if partitioned else None)
        self.owners: dict[str | None, Any] = {}  # INV-OWNER: submission uid -> the owner its submit's caller gives
        self.controller = Controller(self.cconf)
        self.scheduler = Scheduler(self.cconf.user_limits, policy=self.SCHEDULER_POLICY)
        self.notes: list = []
        self.log: list[F.Fact] = []  # the controller's durable fact log (decoded facts)
        self.durable = S.ControllerState()  # the log applied incrementally: what is durable right now
        # A new history is named first, as the daemon does (agents never mix two histories).
        created = F.ClusterCreated(cluster="c1a55e5")
        S.apply(self.controller.state, created)
        self._append(created)
        self._controller_starts()
        self.names = AGENT_NAMES[:n_agents]
        self.sides: dict[str, Side] = {}
        for i, (name, n, offers) in enumerate(zip(self.names, slots, resources)):
            # Every other agent has a durable identity (version 3), the others none (versions 1, 2).
            cfg = AgentConfig(name=name, slots=n, page_size=agent_page, recent_window=recent_window,
                              retry_initial=1.0, retry_max=retry_max, heartbeat_interval=2.0,
                              identity=f"{i + 1:032x}" if i % 2 == 0 else None, resources=offers)
            self.sides[name] = Side(name=name, config=cfg, agent=Agent(cfg))
        self.wire: list[Wire] = []
        self.uid = 0
        self.submissions = 0  # for fresh submission uids
        self.next_conn = 1
        self.next_token = 1
        self.conn_agent: dict[int, str] = {}
        self.ctrl_open: dict[int, bool] = {}  # the controller side still has the connection
        self.ctrl_joined: dict[int, bool] = {}  # its Join reached the controller
        self.agent_open: dict[int, bool] = {}  # the agent side still reads the connection
        self.timers: dict[tuple[str, bytes], float] = {}  # armed round timers
        self.ended_timers: list[tuple[str, bytes]] = []  # timers of rounds that ended (stale if fired)
        self.procs: list[Proc] = []
        self.ever_dispatched: set[tuple[str, int, str]] = set()  # (job, attempt, agent) of every history's log
        self.lost_terminal: set[tuple[str, str | None]] = set()  # (job, uid) whose terminal fact a rollback lost
        self.void_acks: set[tuple] = set()  # (agent, job, attempt, uid) acknowledged by a history rolled back
        self.terminal_seen: dict[str, tuple] = {}
        self.applied_tokens: list[bytes] = []  # every applied round, across controller lives
        self.queries: dict[tuple[str, bytes], dict[int, tuple]] = {}  # query pages an agent processed
        self.violations: dict[str, list[str]] = defaultdict(list)
        self.proposals: list[tuple[str, str]] = []  # scheduler proposals not yet seen by the controller
        self.last_report: dict[str, tuple[int, list[dict]]] = {}  # agent -> (conn, pages) of its last report
        self.ready = True
        # Start from a working cluster: every agent joined, some jobs queued.
        for name in self.names:
            self._connect(self.sides[name])
        self._deliver_all()
        for n in initial_jobs:
            self._submit(n, ("true",))
        self._schedule(None)

    # ---- plumbing: tokens, violations, the controller side ----------------------

    def _token(self) -> bytes:
        self.next_token += 1
        return self.next_token.to_bytes(16, "big")

    def _violate(self, inv_id: str, text: str) -> None:
        self.violations[inv_id].append(text)

    def _take(self, inv_id: str) -> None:
        found, self.violations[inv_id] = self.violations[inv_id], []
        assert not found, f"{inv_id}: " + "; ".join(found[:3])

    def _enqueue(self, to: str, conn: int, data: dict | None) -> None:
        self.uid += 1
        self.wire.append(Wire(to=to, conn=conn, agent=self.conn_agent[conn], data=data, uid=self.uid))

    def _ctrl(self, event: Any) -> list:
        held = self._update_expected_hold()
        cmds = self.controller.handle(event)
        self._validate_state()  # after every handle: an index that drifts is caught at the step that did it
        if held:
            sent = [c.message for c in cmds if isinstance(c, E.Send) and isinstance(c.message, M.Dispatch)]
            if sent:
                self._violate("INV-START-HOLD", f"{sent[0].job}/{sent[0].attempt} dispatched after a start, "
                                                f"before {sorted(self.expected_hold[0])} rejoined or the grace ended")
        self._ctrl_commands(cmds)
        self._update_expected_hold()
        return cmds

    def _controller_starts(self) -> None:
        """The daemon's start after recovery: the id mark file and the start gate (model.startup)."""
        mark = E.IdMark(cluster="c1a55e5", upto=self.id_mark_file) if self.id_mark_file else None
        pending = any(j.state is JobState.PENDING for j in self.controller.state.jobs.values())
        self.grace_timer = None
        self.expected_hold = None
        if self.start_grace > 0 and pending:  # what the machine expects, independently of the model's gate
            known = set(self.controller.state.agents)
            self.expected_hold = (known, bool(known), self.now + self.start_grace)
        self._ctrl(E.ControllerStarted(now=self.now, grace=self.start_grace, id_mark=mark))

    def _update_expected_hold(self) -> bool:
        """Whether dispatch must still be held: some agent the restarted controller knew has not
        rejoined and answered its round since, and the grace is not over."""
        if self.expected_hold is None:
            return False
        waiting, known, deadline = self.expected_hold
        for name in list(waiting):
            sess = self.controller.sessions.get(name)
            if name not in self.controller.state.agents or (sess is not None and sess.connected
                                                             and sess.round is None):
                waiting.discard(name)
        if self.now >= deadline or (known and not waiting):
            self.expected_hold = None
        return self.expected_hold is not None

    def _ctrl_commands(self, cmds: list) -> None:
        appends = [i for i, c in enumerate(cmds) if isinstance(c, E.Append)]
        if appends and appends != [0]:
            self._violate("INV-COMMIT-BEFORE-EFFECT", f"Append not first and only: at {appends}")
        sent_queries: dict[bytes, list[M.ResyncQuery]] = defaultdict(list)
        closing = {c.conn for c in cmds if isinstance(c, E.Close)}
        for cmd in cmds:
            if isinstance(cmd, E.Append):
                for fact in cmd.facts:
                    self._append(fact)
            elif isinstance(cmd, E.Send):
                msg = cmd.message
                self._check_controller_send(cmd.conn, msg)
                if isinstance(msg, M.Error):
                    self._check_refusal(cmd.conn, msg, closing)
                if isinstance(msg, M.ResyncQuery):
                    sent_queries[msg.token].append(msg)
                data = self._wire_roundtrip(msg, to="agent")
                if self.agent_open.get(cmd.conn):
                    self._enqueue(self.conn_agent[cmd.conn], cmd.conn, data)
            elif isinstance(cmd, E.Close):
                self.ctrl_open[cmd.conn] = False
                if self.agent_open.get(cmd.conn):
                    self._enqueue(self.conn_agent[cmd.conn], cmd.conn, None)
            elif isinstance(cmd, E.Notify):
                self.notes.append(cmd.note)
            elif isinstance(cmd, E.StartRoundTimer):
                self.timers[(cmd.agent, cmd.token)] = cmd.deadline
            elif isinstance(cmd, E.RoundEnded):
                if self.timers.pop((cmd.agent, cmd.token), None) is not None:
                    self.ended_timers.append((cmd.agent, cmd.token))
            elif isinstance(cmd, E.StartGraceTimer):
                self.grace_timer = cmd.deadline
            elif isinstance(cmd, E.Warn):
                pass  # the daemon logs it
            else:
                raise AssertionError(f"unexpected controller command {cmd!r}")
        for token, pages in sent_queries.items():
            self._check_query(token, pages)

    def _append(self, fact: F.Fact) -> None:
        stored = json.loads(json.dumps(F.encode(fact)))
        back = F.decode(stored)
        if back != fact:
            self._violate("INV-FACT-CODEC", f"{fact!r} decodes as {back!r}")
        if isinstance(fact, F.IdMarkRaised):
            self.id_mark_file = max(self.id_mark_file, fact.upto)  # the daemon writes the file before the commit
        if isinstance(fact, F.JobSubmitted):
            if fact.job in self.issued_ids:
                self._violate("INV-JOB-ID-UNIQUE", f"job id {fact.job} issued again")
            if int(fact.job) > self.id_mark_file:
                self._violate("INV-JOB-ID-UNIQUE", f"job id {fact.job} issued above the id mark {self.id_mark_file}")
            self.issued_ids.add(fact.job)
        if isinstance(fact, F.JobDispatched):
            info = self.controller.state.agents.get(fact.agent)
            if info is not None and info.used > info.slots:
                self._violate("INV-CAPACITY", f"dispatch of {fact.job} made {fact.agent} use {info.used}/{info.slots}")
            self._check_user_limit(fact)
            self._check_when(fact)
        if isinstance(back, F.JobDispatched):
            placed_on = self.durable.agents.get(back.agent)
            before_job = self.durable.jobs.get(back.job)
            if before_job is not None and not may_run_on(self.durable.partitions, before_job.spec, back.agent):
                self._violate("INV-PARTITION", f"{back.job}/{back.attempt} dispatched to {back.agent}, outside its "
                                               f"partition {before_job.spec.partition} (or it starts nothing)")
            if placed_on is not None and placed_on.drained:
                self._violate("INV-DRAINED-NOT-DISPATCHED", f"{back.job}/{back.attempt} dispatched to drained "
                                                            f"agent {back.agent}")
            before = self.durable.jobs.get(back.job)
            if before is not None and (before.cancel_requested or before.state is JobState.CANCELLED):
                self._violate("INV-CANCELLED-NOT-DISPATCHED", f"{back.job}/{back.attempt} dispatched to {back.agent} "
                                                              f"after its cancel")
        if isinstance(back, F.JobRequeued):
            self._check_requeue(back)
        self.log.append(back)
        S.apply(self.durable, back)
        if isinstance(back, F.JobDispatched):
            self.ever_dispatched.add((back.job, back.attempt, back.agent))

    def _check_user_limit(self, fact: F.JobDispatched) -> None:
        """INV-USER-LIMIT, when a dispatch is appended: its owner runs no more jobs, nor CPUs, than the
        per-user limits allow, counted from the job table (not the controller's own index)."""
        job = self.controller.state.jobs.get(fact.job)
        if job is None or job.owner is None:
            return
        mine = [j for j in self.controller.state.jobs.values()
                if j.state is JobState.RUNNING and j.owner is not None and j.owner.user == job.owner.user]
        most, cpus = self.cconf.max_running_per_user, self.cconf.max_cpus_per_user
        if most is not None and len(mine) > most:
            self._violate("INV-USER-LIMIT", f"dispatch of {fact.job} makes {job.owner.user} run {len(mine)} jobs, "
                                            f"limit {most}")
        if cpus is not None and sum(j.spec.slots for j in mine) > cpus:
            self._violate("INV-USER-LIMIT", f"dispatch of {fact.job} gives {job.owner.user} "
                                            f"{sum(j.spec.slots for j in mine)} CPUs, limit {cpus}")

    def _check_when(self, fact: F.JobDispatched) -> None:
        """INV-BEGIN-TIME and INV-SINGLETON, when a dispatch is appended: the job's begin time has
        come (the machine's clock), and a singleton job starts only while no other job of its
        name and owner runs and none submitted before it waits, counted from the job table."""
        job = self.controller.state.jobs.get(fact.job)
        if job is None:
            return
        if job.spec.begin is not None and self.now < job.spec.begin:
            self._violate("INV-BEGIN-TIME", f"dispatch of {fact.job} at {self.now}, before its begin {job.spec.begin}")
        if job.spec.singleton:
            user = job.owner.user if job.owner is not None else None
            others = [o for o in self.controller.state.jobs.values() if o.id != job.id and o.spec.name == job.spec.name
                      and (o.owner.user if o.owner is not None else None) == user
                      and (o.state is JobState.RUNNING or (o.state is JobState.PENDING and int(o.id) < int(job.id)))]
            if others:
                self._violate("INV-SINGLETON", f"dispatch of singleton {fact.job} while job(s) "
                                               f"{[(o.id, o.state.value) for o in others]} of its name and owner "
                                               f"run or wait before it")

    def _client_op(self, event: Any, action: str, job: Any = None, node: str | None = None) -> bool:
        """Run a client operation as its ``caller``; False if it was refused for permission.

        INV-PERMISSION: it is refused exactly when ``permissions.check`` says so, and a refusal
        changes no state (digest before == after), appends no fact and emits no command."""
        caller = event.caller
        expected = check(caller, action, job.owner if job is not None else None,
                         job=job.id if job is not None else None, node=node)
        before, logged = self.controller.state.digest(), len(self.log)
        try:
            cmds = self._ctrl(event)
        except PermissionDenied as exc:
            if expected is None:
                self._violate("INV-PERMISSION", f"{action} by {caller} refused though allowed: {exc}")
            if self.controller.state.digest() != before or len(self.log) != logged:
                self._violate("INV-PERMISSION", f"a refused {action} by {caller} changed the state")
            # A refusal of a job action names the owner; an operators-only one (priority) need not.
            if (job is not None and job.owner is not None and action in JOB_ACTIONS
                    and job.owner.user not in str(exc)):
                self._violate("INV-PERMISSION", f"the refusal {exc} does not name the owner {job.owner.user}")
            return False
        if expected is not None:
            self._violate("INV-PERMISSION", f"{action} by {caller.user} went through: {expected} ({len(cmds)} commands)")
        return True

    def _check_requeue(self, fact: F.JobRequeued) -> None:
        """INV-REQUEUE-NOT-RUNNING, when the requeue is appended: a job is requeued off a connected
        agent only on that agent's word that it does not run the attempt (unrecognized, refused, held
        for another submission); then no process of that attempt and submission runs there.  (An
        agent away may be requeued while its processes run on: ``lost_after``, ``reckon forget``.)"""
        job = self.durable.jobs.get(fact.job)
        if job is None or job.agent is None or job.attempt != fact.attempt:
            return
        sess = self.controller.sessions.get(job.agent)
        if sess is None or not sess.connected:
            return
        running = [p for p in self.procs if p.alive and p.agent == job.agent and p.attempt == fact.attempt
                   and p.runs_for(job)]
        if running:
            self._violate("INV-REQUEUE-NOT-RUNNING", f"{fact.job}/{fact.attempt} requeued while connected "
                                                     f"{job.agent} runs it ({fact.reason})")

    def _wire_roundtrip(self, msg: M.Message, *, to: str) -> dict:
        data = cbor_like(M.to_wire(msg))
        back = M.from_wire(copy.deepcopy(data), to=to)
        if isinstance(msg, M.Dispatch):  # an agent is never sent the scheduling-only (v8) spec fields
            msg = replace(msg, spec=JobSpec.from_dict(msg.spec.agent_dict()))
        if back != msg:
            self._violate("INV-MESSAGE-CODEC", f"{msg!r} arrives as {back!r}")
        return data

    def _check_controller_send(self, conn: int, msg: M.Message) -> None:
        name = self.conn_agent.get(conn)
        if isinstance(msg, M.Dispatch):
            sess = self.controller.sessions.get(name or "")
            if sess is None or sess.conn != conn or not self.ctrl_open.get(conn):
                self._violate("INV-DISPATCH-GATED", f"Dispatch of {msg.job} on conn {conn} of a disconnected agent")
            elif sess.round is not None:
                self._violate("INV-DISPATCH-GATED", f"Dispatch of {msg.job} to {name} while it is reconciling")
            job = self.durable.jobs.get(msg.job)
            if job is None or job.state is not JobState.RUNNING or job.attempt != msg.attempt or job.agent != name:
                self._violate("INV-COMMIT-BEFORE-EFFECT", f"Dispatch {msg.job}/{msg.attempt} to {name} not durable")
        elif isinstance(msg, M.Ack) and msg.outcome in (M.AckOutcome.APPLIED, M.AckOutcome.ALREADY_TERMINAL):
            # APPLIED: this attempt's end is durable.  ALREADY_TERMINAL: the job's end is
            # (possibly of a later attempt: a late report of a superseded run).
            job = self.durable.jobs.get(msg.job)
            applied = msg.outcome is M.AckOutcome.APPLIED
            retried = applied and job is not None and not job.terminal and any(  # the attempt failed, a retry runs
                isinstance(f, F.JobFinished) and (f.job, f.attempt) == (msg.job, msg.attempt) for f in self.log)
            if not retried and (job is None or not job.terminal or (applied and job.attempt != msg.attempt)):
                self._violate("INV-COMMIT-BEFORE-EFFECT",
                              f"Ack {msg.outcome.value} of {msg.job}/{msg.attempt} before a durable terminal fact")
        elif isinstance(msg, M.Kill):
            job = self.controller.state.jobs.get(msg.job)
            if (job is not None and not job.terminal and not job.cancel_requested and not job.requeue_requested
                    and job.attempt == msg.attempt
                    and job.agent == name and (msg.uid is None or job.uid is None or msg.uid == job.uid)):
                self._violate("INV-NO-WRONG-KILL", f"Kill of live, uncancelled {msg.job}/{msg.attempt} on {name}")
        elif isinstance(msg, M.ResyncQuery):
            if len(msg.jobs) > self.cconf.page_size:
                self._violate("INV-PAGE-SIZE", f"query page of {len(msg.jobs)} jobs > page size {self.cconf.page_size}")

    def _check_refusal(self, conn: int, msg: M.Error, closing: set[int]) -> None:
        """INV-REFUSAL-RETRY, at emission: the agent model's answer to the error (``refusal_retry``, what
        the daemon follows) fits what the controller does with the connection and what the error is."""
        retry = refusal_retry(msg)
        name = self.conn_agent.get(conn)
        if msg.code is None:
            self._violate("INV-REFUSAL-RETRY", f"error to {name} without a code (the agent would go by its "
                                               f"words): {msg.reason}")
        if (retry is Retry.CARRY_ON) != (conn not in closing):
            self._violate("INV-REFUSAL-RETRY", f"{name} would {retry.value} after {msg.reason!r}, but the controller "
                                               f"{'closes' if conn in closing else 'keeps'} the connection")
        if (retry is Retry.NEVER) != msg.permanent:
            self._violate("INV-REFUSAL-RETRY", f"{name} would {retry.value} after {msg.reason!r} "
                                               f"(permanent={msg.permanent}): an older agent would not")
        if retry is Retry.RETRY_NOW:
            self._violate("INV-REFUSAL-RETRY", f"{name} is sent to another leader by a controller that leads")

    def _check_query(self, token: bytes, pages: list[M.ResyncQuery]) -> None:
        """INV-QUERY-COMPLETE, at emission: one query names every placed job exactly once."""
        name = next((n for n, s in self.controller.sessions.items() if s.round is not None and s.round.token == token),
                    None)
        if name is None:
            self._violate("INV-QUERY-COMPLETE", "query sent for a round that is not open")
            return
        numbers = sorted(p.page for p in pages)
        if numbers != list(range(pages[0].pages)) or any(p.pages != pages[0].pages for p in pages):
            self._violate("INV-QUERY-COMPLETE", f"query pages {numbers} of {pages[0].pages}")
        pairs = [pair for p in sorted(pages, key=lambda p: p.page) for pair in p.jobs]
        placed = sorted(self.controller.placed_on(name).items())
        if sorted(pairs) != placed or len(set(pairs)) != len(pairs):
            self._violate("INV-QUERY-COMPLETE", f"query {sorted(pairs)} but {name} holds {placed}")

    # ---- plumbing: the agent side ------------------------------------------------

    def _agent(self, side: Side, event: Any) -> list:
        """Feed one event (and the process events its commands cause) to an agent."""
        assert side.agent is not None
        queue = [event]
        all_cmds: list = []
        while queue:
            ev = queue.pop(0)
            before = side.agent.session
            try:
                cmds = side.agent.handle(ev)
            except RemoteProtocolError:
                # The daemon closes the connection the bad message came on.
                assert isinstance(ev, E.MessageFromController), ev
                if side.conn is not None:
                    self._agent_drops_conn(side)
                continue
            all_cmds.extend(cmds)
            self._check_held_back(side, before, cmds)
            self._check_agent_kills(side, ev, cmds)
            queue.extend(self._agent_commands(side, cmds))
        return all_cmds

    def _check_agent_kills(self, side: Side, ev: Any, cmds: list) -> None:
        """INV-NO-WRONG-KILL, at the agent: it kills only the attempt a Kill names, and only the process
        of the submission that Kill is for (an agent may hold two attempts of one job: an orphan of a
        requeued attempt still dying while the new attempt runs)."""
        kills = [c for c in cmds if isinstance(c, E.KillProcess)]
        if not kills:
            return
        msg = ev.message if isinstance(ev, E.MessageFromController) else None
        if not isinstance(msg, M.Kill):
            self._violate("INV-NO-WRONG-KILL", f"{side.name} kills {kills[0].job}/{kills[0].attempt} "
                                               f"on {type(ev).__name__}, which is no Kill")
            return
        for kill in kills:
            if (kill.job, kill.attempt) != (msg.job, msg.attempt):
                self._violate("INV-NO-WRONG-KILL", f"{side.name} kills {kill.job}/{kill.attempt} for a Kill "
                                                   f"of {msg.job}/{msg.attempt}")
            other = [p for p in self.procs if p.alive and p.agent == side.name
                     and (p.job, p.attempt) == (kill.job, kill.attempt)
                     and None not in (p.uid, msg.uid) and p.uid != msg.uid]
            if other:
                self._violate("INV-NO-WRONG-KILL", f"{side.name} kills {kill.job}/{kill.attempt} of submission "
                                                   f"{other[0].uid}, the Kill is for {msg.uid}")

    def _check_held_back(self, side: Side, before: SessionState, cmds: list) -> None:
        """INV-RESYNC-HOLDS-BACK (Req 3.8): no normal traffic until the whole report is out."""
        if before is SessionState.OPERATING:
            return
        sends = [c.message for c in cmds if isinstance(c, E.Send)]
        last_report = max((k for k, m in enumerate(sends) if isinstance(m, M.ResyncReport)), default=-1)
        for k, msg in enumerate(sends):
            if isinstance(msg, (M.Heartbeat, M.Finished, M.Started)):
                released = last_report >= 0 and k > last_report or (
                    before is SessionState.JOINING and side.agent.session is SessionState.OPERATING)
                if not released:
                    self._violate("INV-RESYNC-HOLDS-BACK", f"{side.name} sent {msg.TYPE} while {before.value}")

    def _agent_commands(self, side: Side, cmds: list) -> list:
        follow: list = []
        reports: dict[bytes, list[M.ResyncReport]] = defaultdict(list)
        for cmd in cmds:
            if isinstance(cmd, E.StoreRecord):
                side.records[cmd.record.key] = cmd.record
            elif isinstance(cmd, E.DeleteRecord):
                side.records.pop((cmd.job, cmd.attempt), None)
            elif isinstance(cmd, E.OutboxPut):
                side.outbox[(cmd.report.job, cmd.report.attempt)] = cmd.report
            elif isinstance(cmd, E.OutboxDelete):
                side.outbox.pop((cmd.job, cmd.attempt), None)
            elif type(cmd).__name__ == "StoreCluster":
                side.cluster = cmd.cluster
            elif isinstance(cmd, E.Send):
                msg = cmd.message
                if isinstance(msg, M.ResyncReport):
                    reports[msg.token].append(msg)
                    if len(msg.entries) > side.config.page_size:
                        self._violate("INV-PAGE-SIZE",
                                      f"report page of {len(msg.entries)} > page size {side.config.page_size}")
                    for entry in msg.entries:
                        if entry.status is M.EntryStatus.FINISHED:
                            self._check_reported_outcome(side.name, entry.job, entry.attempt,
                                                         (entry.exit_code, entry.signal, entry.finished_at))
                elif isinstance(msg, M.Finished):
                    self._check_reported_outcome(side.name, msg.job, msg.attempt,
                                                 (msg.exit_code, msg.signal, msg.finished_at))
                data = self._wire_roundtrip(msg, to="controller")
                if side.conn is not None:
                    self._enqueue("controller", side.conn, data)
                    if isinstance(msg, M.ResyncReport):
                        if msg.page == 0:
                            self.last_report[side.name] = (side.conn, [])
                        self.last_report[side.name][1].append(data)
            elif isinstance(cmd, E.StartProcess):
                # Dispatched by this history, or by one a rollback lost (the agent still had it in flight).
                if (cmd.job, cmd.attempt, side.name) not in self.ever_dispatched:
                    self._violate("INV-NO-INVENTED-WORK", f"{side.name} starts {cmd.job}/{cmd.attempt}, never dispatched")
                alive = [p for p in self.procs if p.alive and p.agent == side.name
                         and (p.job, p.attempt) == (cmd.job, cmd.attempt)]
                if alive:
                    self._violate("INV-SINGLE-PROCESS", f"{side.name} starts {cmd.job}/{cmd.attempt} twice")
                record = side.agent.records.get((cmd.job, cmd.attempt)) if side.agent is not None else None
                self.procs.append(Proc(pid=len(self.procs) + 1, agent=side.name, job=cmd.job, attempt=cmd.attempt,
                                       started_at=self.now, uid=record.uid if record is not None else None))
                follow.append(E.ProcessStarted(job=cmd.job, attempt=cmd.attempt, started_at=self.now))
            elif isinstance(cmd, E.KillProcess):
                for p in self.procs:
                    if p.alive and p.agent == side.name and (p.job, p.attempt) == (cmd.job, cmd.attempt):
                        if getattr(self, "slow_kills", False):  # it outlives the kill a while (explorer prefixes)
                            p.dying = KILL_GRACE_STEPS
                            continue
                        p.alive, p.exit_code, p.signal, p.finished_at, p.dying = False, None, KILL_SIGNAL, self.now, 0
                        follow.append(self._exited(p))
            else:
                raise AssertionError(f"unexpected agent command {cmd!r}")
        for token, pages in reports.items():
            self._check_report(side, token, pages)
        return follow

    def _exited(self, p: Proc) -> E.ProcessExited:
        return E.ProcessExited(job=p.job, attempt=p.attempt, exit_code=p.exit_code, signal=p.signal,
                               finished_at=p.finished_at, now=self.now, usage=p.usage, oom=p.oom)

    def _check_reported_outcome(self, agent: str, job: str, attempt: int, outcome: tuple) -> None:
        truths = [p.outcome for p in self.procs if p.agent == agent and p.ended and (p.job, p.attempt) == (job, attempt)]
        if outcome not in truths:
            self._violate("INV-TRUE-OUTCOME", f"{agent} reports {job}/{attempt} as {outcome}, world saw {truths}")

    def _check_report(self, side: Side, token: bytes, pages: list[M.ResyncReport]) -> None:
        """INV-REPORT-COMPLETE, at emission: the report answers every queried (job, attempt) once."""
        numbers = sorted(p.page for p in pages)
        if numbers != list(range(pages[0].pages)):
            self._violate("INV-REPORT-COMPLETE", f"report pages {numbers} of {pages[0].pages}")
        keys = [(e.job, e.attempt) for p in pages for e in p.entries]
        if len(set(keys)) != len(keys):
            self._violate("INV-REPORT-COMPLETE", f"report names a job twice: {sorted(keys)}")
        asked = self.queries.get((side.name, token), {})
        queried = {pair for page in asked.values() for pair in page}
        if not queried <= set(keys):
            self._violate("INV-REPORT-COMPLETE", f"report lacks queried {sorted(queried - set(keys))}")

    def _connect(self, side: Side) -> int:
        assert side.agent is not None and side.conn is None
        conn = self.next_conn
        self.next_conn += 1
        self.conn_agent[conn] = side.name
        self.ctrl_open[conn], self.ctrl_joined[conn], self.agent_open[conn] = True, False, True
        side.conn = conn
        self._agent(side, E.Connected(now=self.now))
        return conn

    def _agent_drops_conn(self, side: Side) -> None:
        """The agent's side of its connection ends (cut, refused, or its process died)."""
        conn = side.conn
        assert conn is not None
        side.conn = None
        self.agent_open[conn] = False
        if self.ctrl_open.get(conn):
            self._enqueue("controller", conn, None)  # the controller learns of it in order
        if side.agent is not None:
            self._agent(side, E.Disconnected(now=self.now))

    # ---- plumbing: delivery ---------------------------------------------------------

    def _heads(self) -> list[Wire]:
        seen: set = set()
        heads = []
        for item in self.wire:
            if item.channel not in seen:
                seen.add(item.channel)
                heads.append(item)
        return heads

    def _deliver(self, item: Wire) -> None:
        self.wire.remove(item)
        if item.to == "controller":
            self._deliver_to_controller(item)
        else:
            self._deliver_to_agent(item)

    def _deliver_to_controller(self, item: Wire) -> None:
        conn = item.conn
        if item.data is None:
            if self.ctrl_open.get(conn):
                self.ctrl_open[conn] = False
                self._ctrl(E.ConnectionClosed(conn=conn, now=self.now))
            return
        msg = M.from_wire(item.data, to="controller")
        if not self.ctrl_open.get(conn):
            if isinstance(msg, M.Join):
                return  # the daemon never accepts a join on a connection that is gone
            # Stale delivery: a message of a connection the controller no longer has.
            before = self.controller.state.digest()
            cmds = self._ctrl(E.MessageFromAgent(conn=conn, message=msg, now=self.now, token=self._token()))
            if cmds or self.controller.state.digest() != before:
                self._violate("INV-STALE-IGNORED", f"message {msg.TYPE} of closed conn {conn} caused {cmds}")
            return
        if not self.ctrl_joined[conn]:
            if isinstance(msg, M.Join):
                self.ctrl_joined[conn] = True
                placed = self.controller.placed_on(msg.agent)
                gated = self.controller.start_gate is not None
                cmds = self._ctrl(E.AgentJoined(conn=conn, join=msg, token=self._token(), now=self.now))
                welcomes = [c.message for c in cmds if isinstance(c, E.Send) and isinstance(c.message, M.Welcome)]
                armed = bool(welcomes) and welcomes[0].token is not None
                if welcomes and armed != bool(placed or msg.running or gated):
                    self._violate("INV-ROUND-TRIGGER", f"join of {msg.agent} with {placed} placed, "
                                                       f"{msg.running} running, start gate closed={gated}: "
                                                       f"round armed={armed}")
            else:
                # The daemon insists on a Join first: it refuses and closes the connection.
                self.ctrl_open[conn] = False
                if self.agent_open.get(conn):
                    self._enqueue(item.agent, conn, None)
            return
        sess = self.controller.sessions.get(item.agent)
        stale_page = isinstance(msg, M.ResyncReport) and not (
            sess is not None and sess.conn == conn and sess.round is not None and sess.round.token == msg.token)
        before = self.controller.state.digest() if stale_page else None
        cmds = self._ctrl(E.MessageFromAgent(conn=conn, message=msg, now=self.now, token=self._token()))
        if stale_page and (self.controller.state.digest() != before or any(
                not (isinstance(c, E.Send) and isinstance(c.message, M.Error)) for c in cmds)):
            # A page of a round that is not open on this live connection is discarded (an error reply only).
            self._violate("INV-STALE-IGNORED", f"page of a stale round from {item.agent} caused {cmds}")

    def _deliver_to_agent(self, item: Wire) -> None:
        side = self.sides[item.to]
        if side.agent is None:
            return  # the agent process is gone: nobody reads this socket
        if item.data is None:
            if side.conn == item.conn:
                self._agent_drops_conn(side)
            return
        if side.conn is not None and side.conn != item.conn:
            return  # the socket of an older connection: it is closed, its data is gone
        msg = M.from_wire(item.data, to="agent")
        if side.conn is None:
            # Stale delivery to a disconnected agent: it must change nothing.
            cmds = self._agent(side, E.MessageFromController(message=msg, now=self.now))
            if cmds:
                self._violate("INV-STALE-IGNORED", f"{msg.TYPE} to disconnected {side.name} caused {cmds}")
            return
        if isinstance(msg, M.ResyncQuery):
            self.queries.setdefault((side.name, msg.token), {})[msg.page] = msg.jobs
        self._agent(side, E.MessageFromController(message=msg, now=self.now))

    def _deliver_all(self, limit: int = 400) -> None:
        for _ in range(limit):
            heads = self._heads()
            if not heads:
                return
            self._deliver(heads[0])

    # ---- plumbing: scheduler, time, crashes ----------------------------------------

    def _drain_notes(self) -> None:
        notes, self.notes = self.notes, []
        for note in notes:
            self.scheduler.notify(note)

    def _schedule(self, limit: int | None) -> None:
        self._drain_notes()
        before = self.scheduler.reservations
        for job, agent in self.scheduler.place(limit, now=self.now):
            self._ctrl(E.DispatchProposed(job=job, agent=agent, now=self.now))
        if self.scheduler.reservations is not before:  # a pass that ran (not one with nothing free)
            self._check_backfill_promise()

    def _promised_start(self, job: Any, agent: str, also: Any = None) -> float:
        """When ``job``'s ask fits on ``agent`` if every job running there (the controller's
        records; and ``also``, started now) ends at its time limit; inf if never."""
        state = self.controller.state
        cpus, mem, gpus, gres = state.agents[agent].free()
        started = [j for j in state.jobs.values() if j.state is JobState.RUNNING and j.agent == agent]
        running = [(float("inf") if j.spec.time_limit is None
                    else (self.now if j.started_at is None else j.started_at) + j.spec.time_limit,
                    (j.spec.slots, j.spec.mem, j.spec.gpus, j.spec.gres)) for j in started]
        if also is not None:
            cpus, gpus = cpus - also.spec.slots, gpus - also.spec.gpus
            if mem is not None and also.spec.mem is not None:
                mem -= also.spec.mem
            for kind, count in also.spec.gres:
                gres[kind] = gres.get(kind, 0) - count
            end = float("inf") if also.spec.time_limit is None else self.now + also.spec.time_limit
            running.append((end, (also.spec.slots, also.spec.mem, also.spec.gpus, also.spec.gres)))
        return soonest((job.spec.slots, job.spec.mem, job.spec.gpus, job.spec.gres), (cpus, mem, gpus, gres),
                       running, self.now)

    def _check_backfill_promise(self) -> None:
        """INV-BACKFILL-PROMISE, right after a pass's proposals reached the controller: each job
        the pass gave a reservation can still start on its agent by the promised time, if every
        job running there (the controller's records) ends at its time limit."""
        state = self.controller.state
        for job, r in self.scheduler.reservations.items():
            rec = state.jobs.get(job)
            if rec is None or rec.state is not JobState.PENDING or r.agent not in state.agents:
                continue  # it started (or left): nothing left to delay
            at = self._promised_start(rec, r.agent)
            if at > r.start:
                self._violate("INV-BACKFILL-PROMISE", f"job {job} was promised {r.start} on {r.agent}, "
                                                      f"this pass's proposals delay it to {at}")

    def _delays_a_promise(self, job: Any, agent: str) -> bool:
        """Backfill: starting ``job`` on ``agent`` now would delay the start the latest pass
        promised a job queued before it there (so a quiet pass rightly leaves it pending)."""
        state = self.controller.state
        for other, r in self.scheduler.reservations.items():
            rec = state.jobs.get(other)
            if (r.agent == agent and other != job.id and rec is not None and rec.state is JobState.PENDING
                    and self._promised_start(rec, agent, also=job) > r.start):
                return True
        return False

    def _fire_due_timers(self) -> None:
        if self.grace_timer is not None and self.grace_timer <= self.now:
            self.grace_timer = None
            self._ctrl(E.StartGraceEnded(now=self.now))
        for (agent, token), deadline in sorted(self.timers.items(), key=lambda kv: kv[1]):
            if deadline <= self.now and (agent, token) in self.timers:
                self._ctrl(E.RoundDeadlineExpired(agent=agent, token=token, now=self.now))

    def _advance(self, dt: float, jitter: float, fire: bool) -> None:
        self.now += dt
        for p in self.procs:
            if not (p.alive and p.dying):
                continue
            p.dying -= 1
            if p.dying == 0:  # its kill grace is over
                p.alive, p.exit_code, p.signal, p.finished_at = False, None, KILL_SIGNAL, self.now
                side = self.sides[p.agent]
                if side.agent is not None:
                    self._agent(side, self._exited(p))
                else:
                    side.pending_exits.append(p)
        for name in self.names:
            side = self.sides[name]
            if side.agent is not None:
                self._agent(side, E.Tick(now=self.now, jitter=jitter))
        if fire:
            self._fire_due_timers()
        self._ctrl(E.Tick(now=self.now))

    def _restart_agent(self, side: Side, lost: list[bool], slots: int | None = None) -> None:
        assert side.agent is None
        if slots is not None and slots != side.config.slots:
            # The operator reconfigured the machine: it joins with another slot count.
            side.config = replace(side.config, slots=slots)
        durable: dict[str, Any] = {"cluster": side.cluster} if side.cluster is not None else {}
        side.agent = Agent(side.config, records=list(side.records.values()), outbox=list(side.outbox.values()),
                           **durable)
        pending, side.pending_exits = side.pending_exits, []
        running = sorted(k for k, r in side.records.items() if r.status is LocalStatus.RUNNING)
        lost_keys = {k for k, flag in zip(running, lost) if flag}
        for p in self.procs:
            if p.agent == side.name and (p.job, p.attempt) in lost_keys and (p.alive or p in pending):
                # The supervisor's record is gone: whatever became of it, nobody will know.
                p.alive, p.lost = False, True
        for p in pending:
            if not p.lost:
                self._agent(side, self._exited(p))
        for job, attempt in sorted(lost_keys):
            self._agent(side, E.ProcessLost(job=job, attempt=attempt, now=self.now))

    # ---- rules: work ----------------------------------------------------------------

    def _submit(self, slots: int, command: tuple, retries: int = 0, caller: Caller | None = None,
                asks: dict | None = None, when: tuple | None = None) -> None:
        name = f"job{len(self.controller.state.jobs) + 1}"
        more: dict[str, Any] = {}
        if when is not None:  # version 8: (begin offset or None, singleton): the singletons share a name
            offset, one_at_a_time = when
            if offset is not None:
                more["begin"] = self.now + offset
            if one_at_a_time:
                name, more["singleton"] = "solo", True
        spec = JobSpec(name=name, command=tuple(command), slots=slots, retries=retries, **(asks or {}), **more)
        self.submissions += 1
        uid = f"{self.submissions:016x}"
        self.owners[uid] = owner_of(caller)
        # queue_anyway: the machine explores jobs that wait for an agent restarted with more slots.
        event = E.SubmitJob(spec=spec, now=self.now, uid=uid, queue_anyway=True, caller=caller)
        if spec.nice < 0 and caller is not None and not caller.operator:  # a negative nice is an operator's
            before, logged = self.controller.state.digest(), len(self.log)
            try:
                self._ctrl(event)
            except PermissionDenied:
                if (self.controller.state.digest(), len(self.log)) != (before, logged):
                    self._violate("INV-PERMISSION", f"a refused submit by {caller.user} changed the state")
                return
            self._violate("INV-PERMISSION", f"{caller.user} submitted with nice {spec.nice}")
            return
        self._ctrl(event)

    @rule(slots=st.lists(st.integers(1, 2), min_size=1, max_size=3),
          command=st.lists(st.text("abcxyz/-", min_size=1, max_size=4), min_size=1, max_size=2),
          retries=st.sampled_from((0, 0, 1, 2)), caller=CALLER, asks=st.sampled_from(JOB_ASKS),
          when=st.sampled_from(WHEN))
    def submit(self, slots, command, retries, caller=None, asks=None, when=None):
        for n in slots:
            self._submit(n, tuple(command), retries, caller, asks, when)

    @rule(first=st.sampled_from((5.0, 30.0, 90.0)), later=st.sampled_from((None, 10.0, 200.0)), caller=CALLER)
    def submit_wide(self, first, later, caller=None):
        """Issue #22: backfill's case: a short job, then one as wide as the widest agent (it waits
        for that agent to empty: the blocked job a pass reserves a start for), then one slot more
        (which may start now only if it does not delay that start)."""
        widest = max((a.slots for a in self.controller.state.agents.values()), default=3)
        if self.cconf.user_limits.max_cpus is not None:  # a job past the per-user limit is refused
            widest = min(widest, self.cconf.user_limits.max_cpus)
        self._submit(1, ("short",), 0, caller, {"time_limit": first})
        self._submit(max(widest, 1), ("wide",), 0, caller, {"time_limit": 60.0})
        self._submit(1, ("small",), 0, caller, None if later is None else {"time_limit": later})

    @precondition(lambda self: self.controller.state.jobs)
    @rule(i=INDEX, action=st.sampled_from(("hold", "release", "requeue")), caller=CALLER)
    def user_action(self, i, action, caller=None):
        """A user's hold, release or requeue of any job: refused (changing nothing) where it does not
        apply, or where the caller may not (INV-PERMISSION)."""
        jobs = list(self.controller.state.jobs.values())
        job = jobs[i % len(jobs)]
        event = {"hold": E.HoldJob, "release": E.ReleaseJob, "requeue": E.RequeueJob}[action](
            job=job.id, now=self.now, caller=caller)
        before = self.controller.state.digest()
        try:
            allowed = self._client_op(event, action, job)
        except LocalProtocolError:
            assert self.controller.state.digest() == before, f"a refused {action} of {job.id} changed the state"
        else:
            if allowed and action == "requeue":  # a new run: its next terminal values are new ones
                self.terminal_seen.pop(job.id, None)

    @precondition(lambda self: self.controller.state.jobs)
    @rule(i=INDEX, priority=st.sampled_from(PRIORITY_ADJUSTS), caller=CALLER)
    def prioritize(self, i, priority, caller=None):
        """An operator's priority adjustment of a job (``reckon update JOB --priority``): a user's is
        refused (INV-PERMISSION), one of an ended job is refused and changes nothing; an accepted
        one moves the job in the scheduler's queue (INV-SCHEDULER-VIEW, INV-PRIORITY-ORDER)."""
        jobs = list(self.controller.state.jobs.values())
        job = jobs[i % len(jobs)]
        before = self.controller.state.digest()
        try:
            self._client_op(E.UpdateJob(job=job.id, priority=priority, now=self.now, caller=caller), "prioritize", job)
        except LocalProtocolError:
            assert job.terminal, f"a priority adjustment of {job.state.value} job {job.id} refused"
            assert self.controller.state.digest() == before, f"a refused adjustment of {job.id} changed the state"

    @precondition(lambda self: self.controller.state.jobs)
    @rule(i=INDEX, running_only=st.booleans(), caller=CALLER)
    def cancel(self, i, running_only, caller=None):
        jobs = list(self.controller.state.jobs.values())
        if running_only:
            jobs = [j for j in jobs if j.state is JobState.RUNNING] or jobs
        job = jobs[i % len(jobs)]
        was_terminal = job.terminal
        try:
            allowed = self._client_op(E.CancelJob(job=job.id, now=self.now, caller=caller), "cancel", job)
        except LocalProtocolError:
            assert was_terminal, f"cancel of non-terminal job {job.id} refused"
        else:
            assert not allowed or not was_terminal, f"cancel of terminal job {job.id} accepted"

    @precondition(lambda self: any(j.state is JobState.RUNNING for j in self.controller.state.jobs.values()))
    @rule(i=INDEX, caller=CALLER)
    def requeue_running(self, i, caller=None):
        """A user's requeue of a RUNNING job (version 7, ``scontrol requeue``): its attempt is stopped as
        for a cancel and the job runs again (INV-REQUEUE-ONCE); refused only while a cancel is asked."""
        jobs = [j for j in self.controller.state.jobs.values() if j.state is JobState.RUNNING]
        job = jobs[i % len(jobs)]
        cancelling = job.cancel_requested
        before = self.controller.state.digest()
        try:
            self._client_op(E.RequeueJob(job=job.id, now=self.now, caller=caller), "requeue", job)
        except LocalProtocolError:
            assert cancelling, f"requeue of running job {job.id} refused without a cancel"
            assert self.controller.state.digest() == before, f"a refused requeue of {job.id} changed the state"

    @precondition(lambda self: self.controller.state.agents)
    @rule(i=INDEX, caller=CALLER)
    def drain_or_resume(self, i, caller=None):
        """The operator drains a node, or resumes a drained one (``reckon drain``/``resume``); a user
        who is no operator is refused (INV-PERMISSION)."""
        names = sorted(self.controller.state.agents)
        name = names[i % len(names)]
        drained = self.controller.state.agents[name].drained
        event = (E.ResumeAgent if drained else E.DrainAgent)(agent=name, now=self.now, caller=caller)
        self._client_op(event, "resume" if drained else "drain", node=name)

    @precondition(lambda self: self.controller.state.partitions)
    @rule(i=INDEX, key=st.sampled_from(("state", "nodes", "default")), caller=CALLER)
    def partition_change(self, i, key, caller=None):
        """The operator changes a partition at run time (``reckon partition set``): takes it down or
        up, moves its agents, or makes it the default; a user who is no operator is refused."""
        names = sorted(self.controller.state.partitions)
        part = self.controller.state.partitions[names[i % len(names)]]
        value = {"state": "UP" if part.state == "DOWN" else "DOWN",
                 "nodes": (AGENT_NAMES[i % len(AGENT_NAMES)],) if part.nodes != (AGENT_NAMES[i % 3],) else ("a*",),
                 "default": True}[key]
        self._client_op(SetPartition(name=part.name, changes=((key, value),), now=self.now, caller=caller),
                        "partition")

    @rule(limit=st.none() | st.integers(1, 2), defer=st.booleans())
    def scheduler_pass(self, limit, defer):
        """Place pending jobs; with ``defer`` the proposals reach the controller later, maybe stale."""
        if not defer:
            self._schedule(limit)
            return
        self._drain_notes()
        self.proposals.extend(self.scheduler.place(limit, now=self.now))

    @precondition(lambda self: self.proposals)
    @rule(i=INDEX)
    def late_proposal(self, i):
        job, agent = self.proposals.pop(i % len(self.proposals))
        self._ctrl(E.DispatchProposed(job=job, agent=agent, now=self.now))

    @rule()
    def work(self):
        """No fault: deliver everything, schedule, deliver again (a fast way to busy states)."""
        self._deliver_all()
        self._schedule(None)
        self._deliver_all()

    @precondition(lambda self: any(p.alive for p in self.procs))
    @rule(i=INDEX, outcome=st.sampled_from(OUTCOMES), oom=st.sampled_from((False, False, False, True)))
    def process_ends(self, i, outcome, oom=False):
        alive = [p for p in self.procs if p.alive]
        p = alive[i % len(alive)]
        p.alive = False
        p.exit_code, p.signal = (None, KILL_SIGNAL) if oom else outcome
        p.oom = oom
        p.finished_at = self.now
        side = self.sides[p.agent]
        if side.agent is not None:
            self._agent(side, self._exited(p))
        else:
            side.pending_exits.append(p)

    @precondition(lambda self: any(p.alive and self.sides[p.agent].agent is not None for p in self.procs))
    @rule(i=INDEX)
    def supervisor_lost(self, i):
        """A job's supervisor vanishes under a running agent: the outcome can never be known."""
        alive = [p for p in self.procs if p.alive and self.sides[p.agent].agent is not None]
        p = alive[i % len(alive)]
        p.alive, p.lost = False, True
        self._agent(self.sides[p.agent], E.ProcessLost(job=p.job, attempt=p.attempt, now=self.now))

    # ---- rules: the network ----------------------------------------------------------

    @precondition(lambda self: self.wire)
    @rule(i=INDEX, keep_copy=st.booleans())
    def deliver(self, i, keep_copy):
        """Deliver the oldest message of some connection; with ``keep_copy`` a duplicate stays in flight."""
        item = self._heads()[i % len(self._heads())]
        if keep_copy and item.data is not None:
            self.uid += 1
            self.wire.append(Wire(to=item.to, conn=item.conn, agent=item.agent, data=copy.deepcopy(item.data),
                                  uid=self.uid))
        self._deliver(item)

    @precondition(lambda self: self.wire)
    @rule(n=st.integers(1, 8))
    def deliver_many(self, n):
        for _ in range(n):
            heads = self._heads()
            if not heads:
                break
            self._deliver(heads[0])

    @precondition(lambda self: self.wire)
    @rule()
    def settle(self):
        self._deliver_all()

    @precondition(lambda self: self.wire)
    @rule(i=INDEX)
    def deliver_out_of_order(self, i):
        self._deliver(self.wire[i % len(self.wire)])

    @precondition(lambda self: any(w.data is not None for w in self.wire))
    @rule(i=INDEX)
    def drop(self, i):
        items = [w for w in self.wire if w.data is not None]
        self.wire.remove(items[i % len(items)])

    @precondition(lambda self: any(w.data is not None for w in self.wire))
    @rule(i=INDEX, late=st.booleans())
    def duplicate(self, i, late):
        """A copy right behind the original, or a late one behind everything now in flight."""
        items = [w for w in self.wire if w.data is not None]
        item = items[i % len(items)]
        self.uid += 1
        twin = Wire(to=item.to, conn=item.conn, agent=item.agent, data=copy.deepcopy(item.data), uid=self.uid)
        self.wire.insert(len(self.wire) if late else self.wire.index(item) + 1, twin)

    @precondition(lambda self: any(self.agent_open.get(conn) for conn, _ in self.last_report.values()))
    @rule(i=INDEX)
    def report_again(self, i):
        """Req 6.2: a report is presented to the controller again (a retry), on the same connection."""
        live = sorted(name for name, (conn, _) in self.last_report.items() if self.agent_open.get(conn))
        conn, pages = self.last_report[live[i % len(live)]]
        for data in pages:
            self._enqueue("controller", conn, copy.deepcopy(data))

    @precondition(lambda self: any(s.conn is not None for s in self.sides.values()))
    @rule(i=INDEX, lose_in_flight=st.booleans())
    def disconnect(self, i, lose_in_flight):
        sides = [s for s in self.sides.values() if s.conn is not None]
        side = sides[i % len(sides)]
        conn = side.conn
        if lose_in_flight:
            self.wire = [w for w in self.wire if w.conn != conn]
        self._agent_drops_conn(side)

    @precondition(lambda self: any(s.agent is not None and s.conn is None for s in self.sides.values()))
    @rule(i=INDEX, deliver_join=st.booleans(), then_schedule=st.booleans())
    def rejoin(self, i, deliver_join, then_schedule):
        """Connect; optionally the Join arrives at once, and the scheduler runs while its round is open."""
        sides = [s for s in self.sides.values() if s.agent is not None and s.conn is None]
        side = sides[i % len(sides)]
        conn = self._connect(side)
        if deliver_join:
            joins = [w for w in self.wire if w.to == "controller" and w.conn == conn]
            if joins:
                self._deliver(joins[0])
            if then_schedule:
                self._schedule(None)

    # ---- rules: crashes ----------------------------------------------------------------

    @rule(keep_stale=st.booleans(), snapshot_at=st.none() | INDEX)
    def controller_crash(self, keep_stale, snapshot_at):
        """The controller dies: every connection and timer is gone; it recovers from its log."""
        for conn, is_open in list(self.ctrl_open.items()):
            if is_open:
                self.ctrl_open[conn] = False
                if self.agent_open.get(conn):
                    self._enqueue(self.conn_agent[conn], conn, None)
        if not keep_stale:
            self.wire = [w for w in self.wire if w.to != "controller"]
        self.timers.clear()
        self.applied_tokens.extend(self.controller.applied_rounds)
        snapshot = None
        rest = self.log
        if snapshot_at is not None:
            k = snapshot_at % (len(self.log) + 1)
            snapshot = json.loads(json.dumps(S.snapshot(S.replay(self.log[:k]))))
            rest = self.log[k:]
        self.controller = Controller.from_log(list(rest), self.cconf, snapshot=snapshot)
        self.scheduler = Scheduler(self.cconf.user_limits, policy=self.SCHEDULER_POLICY)
        self.notes = []
        self.proposals = []
        self._ctrl_commands(self.controller.initial_notes())
        self._controller_starts()

    @precondition(lambda self: len(self.log) > 1)
    @rule(keep=INDEX)
    def controller_rollback(self, keep):
        """The operator restores an older copy of the controller's state: a prefix of its log
        (never before the history's first fact).  Agents still hold what the lost facts placed."""
        self._rollback(keep)

    def _rollback(self, keep: int, lose_mark: bool = False) -> None:
        """``lose_mark``: the id mark file is lost with it (copied without it, or an old one): ids the
        lost facts issued may be issued again (the controller warns); INV-JOB-ID-UNIQUE no longer
        holds for them, and the agents' submission uids are what keeps two submissions apart."""
        for conn, is_open in list(self.ctrl_open.items()):
            if is_open:
                self.ctrl_open[conn] = False
                if self.agent_open.get(conn):
                    self._enqueue(self.conn_agent[conn], conn, None)
        self.wire = [w for w in self.wire if w.to != "controller"]
        self.timers.clear()
        self.applied_tokens.extend(self.controller.applied_rounds)
        old = self.controller.state
        for side in self.sides.values():  # what the lost history acknowledged, the restored one may not know
            self.void_acks |= {(side.name, r.job, r.attempt, r.uid) for r in side.records.values()
                               if r.status is LocalStatus.FINISHED and r.acked}
            keys = [(w.data["job"], w.data["attempt"]) for w in self.wire  # and its acks still on their way
                    if w.to == side.name and w.data and w.data.get("type") == M.Ack.TYPE]
            if side.agent is not None and any(w.to == side.name and w.data and w.data.get("type") == M.ResyncDone.TYPE
                                              for w in self.wire):
                keys += side.agent._reported
            self.void_acks |= {(side.name, job, attempt, getattr(side.records.get((job, attempt)), "uid", None))
                               for job, attempt in keys}
        k = 1 + keep % len(self.log)
        for fact in self.log[k:]:
            if isinstance(fact, TERMINAL_FACTS):
                self.lost_terminal.add((fact.job, old.jobs[fact.job].uid))
        self.log = self.log[:k]
        if lose_mark:
            self.id_mark_file = 0
            self.issued_ids = {f.job for f in self.log if isinstance(f, F.JobSubmitted)}
        self.durable = S.replay(list(self.log))
        self.terminal_seen = {}  # the restored history's terminal jobs are the stable ones from here on
        self.controller = Controller.from_log(list(self.log), self.cconf)
        self.scheduler = Scheduler(self.cconf.user_limits, policy=self.SCHEDULER_POLICY)
        self.notes = []
        self.proposals = []
        self._ctrl_commands(self.controller.initial_notes())
        self._controller_starts()

    @precondition(lambda self: any(s.agent is not None for s in self.sides.values()))
    @rule(i=INDEX, restart_now=st.booleans(), lost=st.lists(st.booleans(), max_size=4),
          slots=st.none() | st.integers(1, 3))
    def agent_crash(self, i, restart_now, lost, slots):
        """An agent process dies; its job processes keep running under their supervisors."""
        sides = [s for s in self.sides.values() if s.agent is not None]
        side = sides[i % len(sides)]
        side.agent = None
        if side.conn is not None:
            self._agent_drops_conn(side)
        if restart_now:
            self._restart_agent(side, lost, slots)

    @precondition(lambda self: any(s.agent is None for s in self.sides.values()))
    @rule(i=INDEX, lost=st.lists(st.booleans(), max_size=4), slots=st.none() | st.integers(1, 3))
    def agent_restart(self, i, lost, slots):
        sides = [s for s in self.sides.values() if s.agent is None]
        self._restart_agent(sides[i % len(sides)], lost, slots)

    # ---- rules: time -------------------------------------------------------------------

    @rule(dt=st.sampled_from(TIME_STEPS), jitter=st.floats(0.0, 0.99), fire=st.booleans())
    def advance_time(self, dt, jitter, fire):
        self._advance(dt, jitter, fire)

    @precondition(lambda self: any(d <= self.now for d in self.timers.values())
                  or (self.grace_timer is not None and self.grace_timer <= self.now))
    @rule()
    def fire_timers(self):
        self._fire_due_timers()

    @precondition(lambda self: self.ended_timers)
    @rule(i=INDEX)
    def fire_stale_timer(self, i):
        agent, token = self.ended_timers[i % len(self.ended_timers)]
        before = self.controller.state.digest()
        cmds = self._ctrl(E.RoundDeadlineExpired(agent=agent, token=token, now=self.now))
        if cmds or self.controller.state.digest() != before:
            self._violate("INV-STALE-IGNORED", f"deadline of an ended round caused {cmds}")

    # ---- invariants --------------------------------------------------------------------

    @invariant()
    def inv_terminal_stable(self):
        """INV-TERMINAL-STABLE: a terminal job's state, exit code, signal and finish time never change."""
        for job in self.controller.state.jobs.values():
            seen = self.terminal_seen.get(job.id)
            now = (job.state, job.exit_code, job.signal, job.finished_at)
            if seen is not None:
                assert now == seen, f"INV-TERMINAL-STABLE: job {job.id} went from {seen} to {now}"
            elif job.terminal:
                self.terminal_seen[job.id] = now
        missing = set(self.terminal_seen) - set(self.controller.state.jobs)
        assert not missing, f"INV-TERMINAL-STABLE: terminal jobs {sorted(missing)} vanished"

    @invariant()
    def inv_facts_no_duplicate(self):
        """INV-FACTS-NO-DUPLICATE: every logged fact applied; one terminal fact per job; one placement per attempt."""
        assert self.controller.state.facts_applied == len(self.log), (
            f"INV-FACTS-NO-DUPLICATE: {self.controller.state.facts_applied} facts applied, log holds {len(self.log)}")
        # Per attempt: a retried or requeued job ends once per attempt (a JobCancelled has no attempt).
        terminal: dict[tuple[str, int | str], int] = defaultdict(int)
        placed: dict[tuple[str, int], int] = defaultdict(int)
        restarts: dict[str, int] = defaultdict(int)
        for fact in self.log:
            if isinstance(fact, F.JobRestarted):
                restarts[fact.job] += 1
            if isinstance(fact, TERMINAL_FACTS):
                terminal[(fact.job, getattr(fact, "attempt", f"run {restarts[fact.job]}"))] += 1
            elif isinstance(fact, (F.JobDispatched, F.JobAdopted)):
                placed[(fact.job, fact.attempt)] += 1
        dup_t = {j: n for j, n in terminal.items() if n > 1}
        dup_p = {k: n for k, n in placed.items() if n > 1}
        assert not dup_t, f"INV-FACTS-NO-DUPLICATE: several terminal facts for {dup_t}"
        assert not dup_p, f"INV-FACTS-NO-DUPLICATE: several placements of {dup_p}"

    @invariant()
    def inv_retries_bounded(self):
        """INV-RETRIES-BOUNDED: a job is retried at most ``retries`` times per run, only after a failed
        attempt, and a failed job that was not cancelled used every retry it had."""
        finished: dict[str, list[F.JobFinished]] = defaultdict(list)
        run_start: dict[str, int] = {}
        requeued = {(f.job, f.attempt) for f in self.log if isinstance(f, F.JobRequeueRequested)}
        for fact in self.log:
            if isinstance(fact, F.JobFinished) and (fact.job, fact.attempt) not in requeued:  # a requeue, not a retry
                finished[fact.job].append(fact)
            elif isinstance(fact, F.JobRestarted):
                run_start[fact.job] = fact.attempt + 1  # a user's requeue starts a new run
        for job in self.controller.state.jobs.values():
            assert job.retried <= job.spec.retries, (
                f"INV-RETRIES-BOUNDED: job {job.id} retried {job.retried} times, allowed {job.spec.retries}")
            # A finish of an earlier attempt of this run that did not end the job was a retry.
            retried = [f for f in finished[job.id] if run_start.get(job.id, 1) <= f.attempt < job.attempt]
            assert len(retried) == job.retried, (
                f"INV-RETRIES-BOUNDED: job {job.id} counts {job.retried} retries, the log shows {len(retried)}")
            bad = [f.attempt for f in retried if f.signal is None and f.exit_code == 0]
            assert not bad, f"INV-RETRIES-BOUNDED: job {job.id} retried after successful attempt(s) {bad}"
            if job.state is JobState.FAILED and not job.cancel_requested and job.reason is None:
                assert job.retried == job.spec.retries, (
                    f"INV-RETRIES-BOUNDED: job {job.id} FAILED after {job.retried} of {job.spec.retries} retries")

    @invariant()
    def inv_requeue_once(self):
        """INV-REQUEUE-ONCE: a user's requeue of a RUNNING attempt requeues the job once, and the
        stopped attempt's exit is never the job's outcome (unless a cancel asked after it ended it
        CANCELLED); ``requeues`` counts exactly the lost attempts, the restarts and these."""
        asked: set[tuple[str, int]] = set()
        cancelling: set[str] = set()
        counted: dict[str, int] = defaultdict(int)
        for fact in self.log:
            kind = type(fact)
            if kind is F.JobRequeueRequested:
                asked.add((fact.job, fact.attempt))
            elif kind is F.JobCancelRequested:
                cancelling.add(fact.job)
            elif kind is F.JobRestarted:
                cancelling.discard(fact.job)
                counted[fact.job] += 1
            elif kind is F.JobRequeued:
                counted[fact.job] += 1
            elif kind is F.JobFinished and (fact.job, fact.attempt) in asked and fact.job not in cancelling:
                counted[fact.job] += 1
        for job in self.controller.state.jobs.values():
            if job.terminal and job.state is not JobState.CANCELLED and (job.id, job.attempt) in asked:
                assert False, (f"INV-REQUEUE-ONCE: job {job.id} ended {job.state.value} with the outcome of "
                               f"attempt {job.attempt}, which a user requeued")
            assert job.requeues == counted[job.id], (
                f"INV-REQUEUE-ONCE: job {job.id} counts {job.requeues} requeues, the log shows {counted[job.id]}")
            assert not job.requeue_requested or job.state is JobState.RUNNING, (
                f"INV-REQUEUE-ONCE: job {job.id} is {job.state.value} with a requeue request")

    @invariant()
    def inv_fact_codec(self):
        """INV-FACT-CODEC: every fact reads back from its stored form as itself."""
        self._take("INV-FACT-CODEC")

    @invariant()
    def inv_message_codec(self):
        """INV-MESSAGE-CODEC: every message sent arrives, through the wire codec, as itself."""
        self._take("INV-MESSAGE-CODEC")

    @invariant()
    def inv_replay_equals_live(self):
        """INV-REPLAY-EQUALS-LIVE: replaying the fact log gives the live state."""
        live = self.controller.state.digest()
        assert S.replay(list(self.log)).digest() == live, "INV-REPLAY-EQUALS-LIVE: replayed state differs from live"
        assert self.durable.digest() == live, "INV-REPLAY-EQUALS-LIVE: incrementally applied log differs from live"

    @invariant()
    def inv_snapshot_equals_live(self):
        """INV-SNAPSHOT-EQUALS-LIVE: restore(snapshot(state)) equals the state it was taken of."""
        state = self.controller.state
        snap = json.loads(json.dumps(S.snapshot(state)))
        restored = S.restore(snap)
        restored.validate_state()  # restore rebuilds the indexes its own way (not through apply)
        assert restored.digest() == state.digest(), "INV-SNAPSHOT-EQUALS-LIVE: restored snapshot differs"
        assert restored.facts_applied == state.facts_applied, "INV-SNAPSHOT-EQUALS-LIVE: fact count differs"

    @invariant()
    def inv_true_outcome(self):
        """INV-TRUE-OUTCOME: a recorded (and a reported) outcome is what the world observed for that attempt."""
        self._take("INV-TRUE-OUTCOME")
        placed = self._placements()
        for job in self.controller.state.jobs.values():
            if job.exit_code is None and job.signal is None:
                # No outcome.  A job cancelled before it ran has its end time only: the cancel's.
                if job.finished_at is not None:
                    cancels = [f.cancelled_at for f in self.log if isinstance(f, F.JobCancelled) and f.job == job.id]
                    assert job.state is JobState.CANCELLED and cancels and job.finished_at == cancels[-1], (
                        f"INV-TRUE-OUTCOME: job {job.id} ({job.state.value}) ended at {job.finished_at} "
                        f"with no outcome; its cancels were at {cancels}")
                continue
            where = placed.get((job.id, job.attempt))
            truths = [p.outcome for p in self.procs
                      if p.ended and (p.agent, p.job, p.attempt) == (where, job.id, job.attempt)]
            got = (job.exit_code, job.signal, job.finished_at)
            assert got in truths, (
                f"INV-TRUE-OUTCOME: job {job.id} attempt {job.attempt} recorded {got}, world observed {truths}")
            assert job.terminal, f"INV-TRUE-OUTCOME: job {job.id} has an outcome but is {job.state.value}"
            # Its usage and an OOM kill are the same process's (issue #20 accounting).
            ends = [p for p in self.procs if p.ended and (p.agent, p.job, p.attempt) == (where, job.id, job.attempt)
                    and p.outcome == got]
            assert job.usage in [p.usage for p in ends], (
                f"INV-TRUE-OUTCOME: job {job.id} attempt {job.attempt} recorded usage {job.usage}, "
                f"world measured {[p.usage for p in ends]}")
            if job.state is JobState.FAILED and any(p.oom for p in ends):
                assert job.reason == "oom", f"INV-TRUE-OUTCOME: job {job.id} was OOM-killed, reason {job.reason!r}"

    @invariant()
    def inv_outcome_owner(self):
        """INV-OUTCOME-OWNER: an outcome is only ever applied to the submission whose process produced it."""
        placed = self._placements()
        for job in self.controller.state.jobs.values():
            if job.exit_code is None and job.signal is None:  # no outcome
                continue
            where = placed.get((job.id, job.attempt))
            got = (job.exit_code, job.signal, job.finished_at)
            # Whose process, not which values: those are INV-TRUE-OUTCOME's.
            owners = [p for p in self.procs if p.ended and p.runs_for(job) and (p.agent, p.attempt) == (where, job.attempt)]
            assert owners, (f"INV-OUTCOME-OWNER: job {job.id} (uid {job.uid}) attempt {job.attempt} recorded {got}, "
                            f"but no process of that submission ended there")

    @staticmethod
    def _current(p: Proc, placed: dict[tuple[str, int], str]) -> bool:
        """Whether the current history placed ``p``'s attempt on its agent.  Always true without a
        rollback; after one, a process started by a lost dispatch may run next to the same
        attempt placed again elsewhere (the restored state cannot know): it is killed when its
        agent rejoins (INV-LIVENESS-AGREE), and never gives its outcome to another submission."""
        return placed.get((p.job, p.attempt)) == p.agent

    def _placements(self) -> dict[tuple[str, int], str]:
        """(job, attempt) -> the agent the log placed it on."""
        return {(f.job, f.attempt): f.agent for f in self.log if isinstance(f, (F.JobDispatched, F.JobAdopted))}

    @invariant()
    def inv_true_start_time(self):
        """INV-TRUE-START-TIME: a recorded start time is when a process of that attempt really started."""
        placed = self._placements()
        for job in self.controller.state.jobs.values():
            if job.started_at is None:
                continue
            where = placed.get((job.id, job.attempt))
            truths = [p.started_at for p in self.procs
                      if (p.agent, p.attempt) == (where, job.attempt) and p.runs_for(job)]
            assert job.started_at in truths, (
                f"INV-TRUE-START-TIME: job {job.id}/{job.attempt} started_at {job.started_at}, world {truths}")

    @invariant()
    def inv_dispatch_gated(self):
        """INV-DISPATCH-GATED: a Dispatch goes only to a connected agent with no round open."""
        self._take("INV-DISPATCH-GATED")

    @invariant()
    def inv_start_hold(self):
        """INV-START-HOLD: after a controller start with PENDING jobs, no Dispatch until every agent the
        recovered state knew has rejoined and answered its round, or the start grace is over."""
        self._take("INV-START-HOLD")

    @invariant()
    def inv_job_id_unique(self):
        """INV-JOB-ID-UNIQUE: no job id is issued twice, across restarts and rollbacks of the state,
        and none above the id mark outside the database."""
        self._take("INV-JOB-ID-UNIQUE")

    @invariant()
    def inv_commit_before_effect(self):
        """INV-COMMIT-BEFORE-EFFECT: acks and dispatches leave only after the facts behind them are durable."""
        self._take("INV-COMMIT-BEFORE-EFFECT")

    @invariant()
    def inv_scheduler_view(self):
        """INV-SCHEDULER-VIEW: once notifications drain, the scheduler's view is the controller's."""
        sched = copy.deepcopy(self.scheduler)
        for note in self.notes:
            sched.notify(note)
        got, want = sched.view(), self.controller.scheduler_view()
        assert got == want, f"INV-SCHEDULER-VIEW: scheduler sees {got}, controller says {want}"

    @invariant()
    def inv_priority_order(self):
        """INV-PRIORITY-ORDER: the queue (the controller's order, which INV-SCHEDULER-VIEW holds the
        scheduler's to) puts no job behind one whose adjustment minus nice is lower by more than all
        the factors' weights together: each weighted factor lies in [0, its weight], so nothing but
        a nice or adjustment that went unheeded can order them so.  Judged from the records alone,
        not from the priorities the controller computed."""
        c = self.cconf.priority
        weights = c.weight_age + c.weight_fairshare + c.weight_partition + c.weight_jobsize
        jobs = self.controller.state.jobs
        lowest = None  # (adjustment - nice, job) the lowest ahead so far
        for job_id in self.controller.scheduler_view()[0]:
            job = jobs[job_id]
            base = job.priority_adjust - job.spec.nice
            if lowest is not None and base - lowest[0] > weights:
                raise AssertionError(
                    f"INV-PRIORITY-ORDER: job {job_id} (adjustment {job.priority_adjust}, nice {job.spec.nice}) "
                    f"is queued behind job {lowest[1]} (adjustment minus nice {lowest[0]}), more than the "
                    f"factors' weights ({weights}) apart")
            if lowest is None or base < lowest[0]:
                lowest = (base, job_id)

    @invariant()
    def inv_slots_accounted(self):
        """INV-SLOTS-ACCOUNTED: an agent's used slots and running set are exactly its RUNNING jobs."""
        state = self.controller.state
        for name, info in state.agents.items():
            mine = {j.id for j in state.jobs.values() if j.state is JobState.RUNNING and j.agent == name}
            assert info.running == mine, f"INV-SLOTS-ACCOUNTED: {name} running set {info.running}, jobs {mine}"
            used = sum(state.jobs[j].spec.slots for j in mine)
            assert info.used == used, f"INV-SLOTS-ACCOUNTED: {name} used {info.used}, its RUNNING jobs use {used}"

    def _validate_state(self) -> None:
        try:
            self.controller.state.validate_state()
        except ModelCorrupted as exc:
            raise AssertionError(f"INV-STATE-VALID: {exc}") from exc

    @invariant()
    def inv_state_valid(self):
        """INV-STATE-VALID: every derived index of the controller's state equals a recompute from its records."""
        self._validate_state()

    @invariant()
    def inv_digest_current(self):
        """INV-DIGEST-CURRENT: the kept running-set digests equal a recount from scratch."""
        for name in self.names:
            agent = self.sides[name].agent
            if agent is None:
                continue
            held = agent.held()
            kept = (agent.records.held_count, agent.records.held_digest)
            assert kept == (len(held), M.running_digest(held)), (
                f"INV-DIGEST-CURRENT: {name} keeps {kept} for its held set {sorted(held)}")
        state = self.controller.state
        for name, info in state.agents.items():
            if info.digest is not None:
                placed = self.controller.placed_on(name).items()
                assert info.digest == M.running_digest(placed), (
                    f"INV-DIGEST-CURRENT: the controller keeps {info.digest} for {name}'s placement {sorted(placed)}")

    @invariant()
    def inv_ack_means_recorded(self):
        """INV-ACK-MEANS-RECORDED: an outcome an agent holds as acknowledged is recorded by the controller."""
        for name in self.names:
            agent = self.sides[name].agent
            if agent is None:
                continue
            for (job_id, attempt), record in agent.records.items():
                if record.status is not LocalStatus.FINISHED or not record.acked:
                    continue
                job = self.controller.state.jobs.get(job_id)
                if job is not None and ((job.id, job.uid) in self.lost_terminal
                                        or (name, job_id, attempt, record.uid) in self.void_acks):
                    continue  # acknowledged by a history the operator rolled back: the ack is void
                assert job is None or not (job.state is JobState.RUNNING and job.attempt == attempt
                                           and job.agent == name
                                           and (record.uid is None or job.uid is None or record.uid == job.uid)), (
                    f"INV-ACK-MEANS-RECORDED: {name} holds {job_id}/{attempt} as acknowledged, "
                    f"but the controller still runs that attempt there")

    @invariant()
    def inv_capacity(self):
        """INV-CAPACITY: a dispatch never makes an agent use more than its slots.

        Checked when each JobDispatched is appended, and at every step for every
        agent whose registered slot count never went down (a join with fewer
        slots, e.g. a reconfigured machine or a late Join of an older
        connection): its dispatched jobs fit, and so does everything it runs
        unless some of it was adopted (adoption records what an agent really
        runs, it is not a placement decision).
        """
        self._take("INV-CAPACITY")
        state = self.controller.state
        how: dict[tuple[str, int], type] = {}
        registered: dict[str, int] = {}
        shrunk: set[str] = set()
        for fact in self.log:
            if isinstance(fact, (F.JobDispatched, F.JobAdopted)):
                how[(fact.job, fact.attempt)] = type(fact)
            elif isinstance(fact, F.AgentRegistered):
                if fact.slots < registered.get(fact.agent, 0):
                    shrunk.add(fact.agent)
                registered[fact.agent] = fact.slots
        for name, info in state.agents.items():
            if name in shrunk:
                continue
            jobs = [state.jobs[j] for j in info.running]
            dispatched = sum(j.spec.slots for j in jobs if how.get((j.id, j.attempt)) is F.JobDispatched)
            assert dispatched <= info.slots, f"INV-CAPACITY: {name} has {dispatched} dispatched slots of {info.slots}"
            if all(how.get((j.id, j.attempt)) is F.JobDispatched for j in jobs):
                assert info.used <= info.slots, f"INV-CAPACITY: {name} uses {info.used} of {info.slots}"

    @invariant()
    def inv_no_overcommit(self):
        """INV-NO-OVERCOMMIT: every agent's RUNNING jobs fit its CPUs, memory, GPUs and gres
        (tests/model/resource_checks.py, independent of the model's own fit)."""
        found = resource_checks.no_overcommit(self.controller.state, self.log)
        assert not found, "; ".join(found)

    @invariant()
    def inv_fairshare_replay(self):
        """INV-FAIRSHARE-REPLAY: fair share's usage as the log applied gives it, and as the facts alone
        give it (tests/model/usage_check.py: every ended attempt charged, however it ended);
        priorities of PENDING jobs only."""
        usage = self.controller.state.usage
        assert self.durable.usage.key() == usage.key(), "INV-FAIRSHARE-REPLAY: the applied log's usage differs from live"
        found = usage_check.differences(self.log, usage, self.now)
        assert not found, "; ".join(found)
        jobs = self.controller.state.jobs
        left = [j for j in self.controller.volatile.priorities if jobs[j].state is not JobState.PENDING]
        assert not left, f"INV-FAIRSHARE-REPLAY: jobs {left} left PENDING and kept their priority"

    @invariant()
    def inv_gpu_once(self):
        """INV-GPU-ONCE: no GPU held by two RUNNING jobs of one agent; gpu_ids as the placing fact says."""
        found = resource_checks.gpu_once(self.controller.state, self.log)
        assert not found, "; ".join(found)

    @invariant()
    def inv_single_owner(self):
        """INV-SINGLE-OWNER: a RUNNING job belongs to exactly one agent, any other job to none."""
        state = self.controller.state
        for job in state.jobs.values():
            owners = [n for n, info in state.agents.items() if job.id in info.running]
            if job.state is JobState.RUNNING:
                assert job.agent is not None and owners == [job.agent], (
                    f"INV-SINGLE-OWNER: RUNNING job {job.id} has agent {job.agent}, owners {owners}")
            else:
                assert job.agent is None and not owners, (
                    f"INV-SINGLE-OWNER: {job.state.value} job {job.id} has agent {job.agent}, owners {owners}")

    @invariant()
    def inv_name_handover(self):
        """INV-NAME-HANDOVER: a name passes to another identity only with nothing placed on it (or once forgotten)."""
        holder: dict[str, str | None] = {}
        placed: dict[str, set[str]] = defaultdict(set)
        where: dict[str, str] = {}
        for fact in self.log:
            if isinstance(fact, F.AgentRegistered):
                old = holder.get(fact.agent)
                assert old is None or fact.identity in (None, old) or not placed[fact.agent], (
                    f"INV-NAME-HANDOVER: {fact.agent} passed from {old} to {fact.identity} "
                    f"with {sorted(placed[fact.agent])} placed")
                holder[fact.agent] = fact.identity
            elif isinstance(fact, F.AgentForgotten):
                holder.pop(fact.agent, None)
            elif isinstance(fact, (F.JobDispatched, F.JobAdopted)):
                placed[fact.agent].add(fact.job)
                where[fact.job] = fact.agent
            elif isinstance(fact, (F.JobFinished, F.JobCancelConfirmed, F.JobRequeued)):
                placed[where.pop(fact.job)].discard(fact.job)

    @invariant()
    def inv_single_process(self):
        """INV-SINGLE-PROCESS: at most one world process runs the current attempt of a job."""
        self._take("INV-SINGLE-PROCESS")
        placed = self._placements()
        for job in self.controller.state.jobs.values():
            n = sum(1 for p in self.procs if p.alive and p.attempt == job.attempt and p.runs_for(job)
                    and self._current(p, placed))
            assert n <= 1, f"INV-SINGLE-PROCESS: {n} processes run job {job.id} attempt {job.attempt}"

    @invariant()
    def inv_round_ends(self):
        """INV-ROUND-ENDS: an open round has a connected agent and an armed timer."""
        for name, sess in self.controller.sessions.items():
            if sess.round is None:
                continue
            assert sess.conn is not None and self.ctrl_open.get(sess.conn), (
                f"INV-ROUND-ENDS: {name} has an open round but no connection")
            deadline = self.timers.get((name, sess.round.token))
            assert deadline is not None, f"INV-ROUND-ENDS: {name}'s open round has no timer"
            assert deadline == sess.round.deadline <= self.now + self.cconf.round_timeout, (
                f"INV-ROUND-ENDS: {name}'s round timer {deadline} is not its deadline {sess.round.deadline}")
            assert sess.round.open, f"INV-ROUND-ENDS: {name}'s current round is {sess.round.state.value}"

    @invariant()
    def inv_report_applied_once(self):
        """INV-REPORT-APPLIED-ONCE: a reassembled report is applied at most once per round token."""
        tokens = self.controller.applied_rounds
        assert len(set(tokens)) == len(tokens), "INV-REPORT-APPLIED-ONCE: a round's report was applied twice"
        everything = self.applied_tokens + tokens
        assert len(set(everything)) == len(everything), (
            "INV-REPORT-APPLIED-ONCE: a round's report was applied by two controller lives")

    @invariant()
    def inv_page_size(self):
        """INV-PAGE-SIZE: every query and report page holds at most the configured page size."""
        self._take("INV-PAGE-SIZE")

    @invariant()
    def inv_query_complete(self):
        """INV-QUERY-COMPLETE: a query names every job placed on the agent, exactly once, across its pages."""
        self._take("INV-QUERY-COMPLETE")

    @invariant()
    def inv_report_complete(self):
        """INV-REPORT-COMPLETE: a report answers every queried job exactly once, across its pages."""
        self._take("INV-REPORT-COMPLETE")

    @invariant()
    def inv_outbox_durable(self):
        """INV-OUTBOX-DURABLE: a finished, unacked job is in the agent's durable outbox."""
        for side in self.sides.values():
            if side.agent is not None:
                assert side.agent.records == side.records, f"INV-OUTBOX-DURABLE: {side.name} records not on disk"
                assert set(side.agent.outbox) == set(side.outbox), (
                    f"INV-OUTBOX-DURABLE: {side.name} outbox {sorted(side.agent.outbox)} on disk {sorted(side.outbox)}")
            for key, rec in side.records.items():
                if rec.status is LocalStatus.FINISHED and not rec.acked:
                    assert key in side.outbox, f"INV-OUTBOX-DURABLE: {side.name} finished {key} unacked, not in outbox"
                    assert side.outbox[key] == rec.report(), f"INV-OUTBOX-DURABLE: {side.name} outbox {key} differs"

    @invariant()
    def inv_refusal_retry(self):
        """INV-REFUSAL-RETRY: the agent's answer to each controller error fits what the controller does."""
        self._take("INV-REFUSAL-RETRY")

    @invariant()
    def inv_no_wrong_kill(self):
        """INV-NO-WRONG-KILL: the controller never kills the live, uncancelled current attempt of a job."""
        self._take("INV-NO-WRONG-KILL")

    @invariant()
    def inv_requeue_not_running(self):
        """INV-REQUEUE-NOT-RUNNING: a connected agent's attempt is requeued only when it does not run it."""
        self._take("INV-REQUEUE-NOT-RUNNING")

    @invariant()
    def inv_no_invented_work(self):
        """INV-NO-INVENTED-WORK: an agent starts a process only for a (job, attempt) dispatched to it."""
        self._take("INV-NO-INVENTED-WORK")

    @invariant()
    def inv_round_trigger(self):
        """INV-ROUND-TRIGGER: a join arms a round exactly when jobs are placed there, the agent runs some,
        or the start gate is closed."""
        self._take("INV-ROUND-TRIGGER")

    @invariant()
    def inv_resync_holds_back(self):
        """INV-RESYNC-HOLDS-BACK: an agent sends no heartbeat, start or completion until its report is out."""
        self._take("INV-RESYNC-HOLDS-BACK")

    @invariant()
    def inv_permission(self):
        """INV-PERMISSION: a client operation is refused exactly when the permission rule says so, and a
        refusal changes nothing."""
        self._take("INV-PERMISSION")

    @invariant()
    def inv_owner(self):
        """INV-OWNER: every job belongs to the caller of its submit (None: token mode), forever."""
        if not self.ready:
            return
        for job in self.controller.state.jobs.values():
            if job.uid in self.owners:
                assert job.owner == self.owners[job.uid], (
                    f"INV-OWNER: job {job.id} belongs to {job.owner}, its submit's caller gave {self.owners[job.uid]}")

    @invariant()
    def inv_user_limit(self):
        """INV-USER-LIMIT: no dispatch starts a job past its owner's per-user limits."""
        self._take("INV-USER-LIMIT")

    @invariant()
    def inv_backfill_promise(self):
        """INV-BACKFILL-PROMISE: no job a pass starts delays the start it promised a blocked job."""
        self._take("INV-BACKFILL-PROMISE")

    @invariant()
    def inv_partition(self):
        """INV-PARTITION: a job is dispatched only to an agent of its partition, while that
        partition starts jobs (UP or DRAIN)."""
        self._take("INV-PARTITION")

    @invariant()
    def inv_begin_time(self):
        """INV-BEGIN-TIME: no job is dispatched before its begin time (--begin)."""
        self._take("INV-BEGIN-TIME")

    @invariant()
    def inv_singleton(self):
        """INV-SINGLETON: a singleton job is dispatched only while no other job of its name and owner
        runs and none submitted before it is pending."""
        self._take("INV-SINGLETON")

    @invariant()
    def inv_drained_not_dispatched(self):
        """INV-DRAINED-NOT-DISPATCHED: no job is dispatched to an agent the operator drained."""
        self._take("INV-DRAINED-NOT-DISPATCHED")

    @invariant()
    def inv_cancelled_not_dispatched(self):
        """INV-CANCELLED-NOT-DISPATCHED: a job whose cancel was requested is never dispatched again."""
        self._take("INV-CANCELLED-NOT-DISPATCHED")

    @invariant()
    def inv_stale_ignored(self):
        """INV-STALE-IGNORED: input of a closed connection or an ended round changes nothing."""
        self._take("INV-STALE-IGNORED")

    # ---- liveness ----------------------------------------------------------------------

    def _quiet(self) -> bool:
        if self.wire:
            return False
        for name in self.names:
            side = self.sides[name]
            agent = side.agent
            if agent is None or side.conn is None or agent.session is not SessionState.OPERATING or agent.outbox:
                return False
            sess = self.controller.sessions.get(name)
            if sess is None or sess.round is not None or sess.conn != side.conn:
                return False
            if sorted(agent.held()) != sorted(self.controller.placed_on(name).items()):
                return False
        return True

    def _pending_that_fits(self) -> bool:
        state = self.controller.state
        return any(self._may_start(job) and not info.drained and resource_checks.would_fit(state, name, job)
                   and may_run_on(state.partitions, job.spec, name) and not self._delays_a_promise(job, name)
                   for job in state.jobs.values() for name, info in state.agents.items())

    def _may_start(self, job: Any) -> bool:
        """Ready, and not waiting for its owner's per-user limits (which a quiet cluster may hold it to),
        nor for its partition (down, or its limits lowered below it: issue #22)."""
        state = self.controller.state
        return (ready(state, job, self.now) and user_limit_refusal(state, self.cconf.user_limits, job) is None
                and startable(state.partitions, job))

    # The invariants that compare the whole state with a rebuilt copy (a snapshot, a replay of
    # every fact, the scheduler's own view): three quarters of a check's cost.  A settling run
    # checks the others after every round and these once it has settled.
    WHOLE_STATE_INVARIANTS = frozenset({"inv_snapshot_equals_live", "inv_replay_equals_live", "inv_scheduler_view"})

    def _check_all_invariants(self, *, whole_state: bool = True) -> None:
        names = type(self).__dict__.get("_inv_names")
        if names is None:
            names = tuple(name for name in sorted(dir(type(self))) if name.startswith("inv_"))
            type(self)._inv_names = names
        for name in names:
            if whole_state or name not in self.WHOLE_STATE_INVARIANTS:
                getattr(self, name)()

    def teardown(self):
        """INV-LIVENESS-QUIET, INV-LIVENESS-OUTCOME, INV-LIVENESS-AGREE, INV-LIVENESS-SCHEDULES.

        Once faults stop, everything settles on the truth.
        """
        if not getattr(self, "ready", False) or sys.exc_info()[0] is not None:
            return  # the run already failed (or never started): report that, not this
        for name in self.names:
            side = self.sides[name]
            if side.agent is None:
                self._restart_agent(side, [])
        for name in self.names:  # a fresh connection each: whatever was lost in flight is behind us
            side = self.sides[name]
            if side.conn is not None:
                self._agent_drops_conn(side)
            self._connect(side)
        step = 1.0 + max(max(s.config.retry_max * 1.25, s.config.heartbeat_interval) for s in self.sides.values())
        for _ in range(40):
            self._deliver_all()
            for name in self.names:
                side = self.sides[name]
                if side.conn is None:
                    self._connect(side)
            self._deliver_all()
            self._drain_notes()
            self._check_all_invariants(whole_state=False)
            if self._quiet():
                break
            self._advance(step, 0.0, True)
        else:
            raise AssertionError("INV-LIVENESS-QUIET: the system did not settle once faults stopped")
        self._check_all_invariants()
        state = self.controller.state
        for name in self.names:
            side = self.sides[name]
            assert not side.agent.outbox and not side.outbox, f"INV-LIVENESS-QUIET: {name}'s outbox is not empty"
            assert self.controller.sessions[name].round is None, f"INV-LIVENESS-QUIET: {name} has an open round"
        for job in state.jobs.values():
            placed = self._placements()
            ends = [p for p in self.procs if p.ended and p.attempt == job.attempt and p.runs_for(job)
                    and self._current(p, placed)]
            if not ends or (job.id, job.uid) in self.lost_terminal:
                # (The second: a rollback voided the recorded end; the restored history may
                # run the job again or cancel it without an outcome, never give it another's.)
                continue
            assert job.terminal, (
                f"INV-LIVENESS-OUTCOME: job {job.id} attempt {job.attempt} ended in the world but is {job.state.value}")
            got = (job.exit_code, job.signal, job.finished_at)
            if job.exit_code is None and job.signal is None:
                assert job.state is JobState.CANCELLED and job.cancel_requested and self.cconf.lost_after, (
                    f"INV-LIVENESS-OUTCOME: job {job.id} ended in the world, recorded without an outcome")
            else:
                assert got in [p.outcome for p in ends], f"INV-LIVENESS-OUTCOME: job {job.id} recorded {got}"
        gate = self.controller.start_gate
        if gate is not None:
            # Every agent is back and reconciled: only a start that knew no agent still holds.
            assert not gate.known, f"INV-LIVENESS-SCHEDULES: dispatch still held for {sorted(gate.waiting)}"
            self._advance(self.start_grace, 0.0, True)  # its grace ends, as time passes
            assert self.controller.start_gate is None, "INV-LIVENESS-SCHEDULES: the start grace never ended"
        # Req 5.2 / 7.2: with the cluster quiet, a scheduler pass places every
        # pending job that fits somewhere: nothing is withheld by a stale view.
        # After a rollback an agent may refuse a dispatch (it holds the attempt for another
        # submission): the job is requeued and placed again by the next pass.
        for _ in range(10):
            self._schedule(None)
            self._deliver_all()
            if not self._pending_that_fits():
                break
        state = self.controller.state
        for job in state.jobs.values():
            if not self._may_start(job):  # a held job waits for its release, another for its owner's limit
                continue
            for name, info in state.agents.items():
                # A drained agent takes none; the fit is in every dimension (CPUs, memory, GPUs, gres);
                # an agent outside the job's partition takes none either.
                assert (info.drained or not resource_checks.would_fit(state, name, job)
                        or not may_run_on(state.partitions, job.spec, name) or self._delays_a_promise(job, name)), (
                    f"INV-LIVENESS-SCHEDULES: pending job {job.id} ({job.spec.resources_text()}) fits on {name} "
                    f"({info.used}/{info.slots} used) but was not dispatched")
        for p in self.procs:
            if p.alive:
                job = state.jobs.get(p.job)
                assert (job is not None and job.state is JobState.RUNNING and job.attempt == p.attempt
                        and job.agent == p.agent and p.runs_for(job)), (
                    f"INV-LIVENESS-AGREE: process {p.job}/{p.attempt} on {p.agent} runs, controller has "
                    f"{job and (job.state.value, job.attempt, job.agent)}")


# `make test` runs the first CI_SHORT_EXAMPLES examples of the ci draw (about 10 s on 2 shared cores);
# `make test-long` the whole draw (the profile's 300), `make fuzz` new ones.
CI_SHORT_EXAMPLES = 100


def test_reckon_machine():
    fuzz = os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz"
    run_state_machine_as_test(ReckonMachine, settings=settings() if fuzz else settings(max_examples=CI_SHORT_EXAMPLES))


@pytest.mark.long
def test_reckon_machine_whole_draw():
    if os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz":
        pytest.skip("`make fuzz` draws its examples in test_reckon_machine")
    run_state_machine_as_test(ReckonMachine, settings=settings())
