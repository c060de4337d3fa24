"""Leadership under faults: two or three controllers, a lease clock, a simulated PostgreSQL.

``LeadershipMachine`` (a Hypothesis ``RuleBasedStateMachine``) runs the real
``model.leadership.Leadership`` of each controller process against ``Db``, a
simulation of what daemon/store/postgres.py asks of PostgreSQL: the ``leader``
row (epoch, holder, ``expires_at`` on the *database's* clock), ``try_lead``
(free when no one led yet, when the lease expired, or when the holder's
session advisory lock is free), the renewal (``now() + lease`` when the epoch
is still ours) and the fenced append (nothing is inserted unless the row still
names the epoch).  Each controller runs the shell the daemon runs
(daemon/controller/leadership.py, ha.py): standbys ask to lead; the leader
ticks its model, sends the renewals it asks for, commits batches, and releases
a batch's effects only after its commit returned and ``may_release`` holds;
any ``StepDown`` ends the process (its session with it).

Faults: time passes on the database's clock in steps from a tenth of a lease
to more than a lease; each host's monotonic clock runs at its own rate (within
the clock-rate bound: at least 0.8 of the database's, docs/ha.md) and may
change rate; requests and answers on each database connection are delayed
arbitrarily (one request at a time per connection, in order, as the store's
one thread does); processes freeze (SIGSTOP: the clock runs on, nothing is
handled) and resume, crash (SIGKILL: the session ends, its advisory lock
frees) and restart; a live process's session ends under it (the database
dropped the connection: what was on its way on it is lost, its next request
fails).

The invariants (docs/invariants.md, "Leadership"), checked after every step:
``INV-HA-ONE-LEADER-PER-EPOCH``, ``INV-HA-FACTS-ORDERED``,
``INV-HA-NO-STALE-EFFECT``, ``INV-HA-STEPS-DOWN``; ``teardown`` stops the
faults and checks ``INV-LIVENESS-HA-LEADS``.  The bite tests at the end put a
known bug back, one at a time, and watch the machine catch it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import hypothesis.strategies as st
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test,
)

from reckon.model import leadership as L

LEASE = 4.0
CONFIG = L.LeaseConfig(lease=LEASE)
POLL = LEASE / 5  # a standby's poll interval (daemon/controller/ha.py), on its own clock
# Seconds of a host's monotonic clock per second of the database's.  The bound the design assumes
# (docs/ha.md): never below 1 - MARGIN = 0.75; these stay at or above 0.8.
RATES = (0.8, 1.0, 1.25)
STEPS = (0.1, 0.25, 0.5, 1.0)  # database seconds per step of the daemons at work (renewals are due every 1 s)
JUMPS = (1.0, 2.5, 4.5)  # database seconds in which no process runs: up to more than a lease
NAMES = ("c1", "c2", "c3")
SETTLE_STEP = 0.2  # database seconds per step once the faults stop
LEADS_WITHIN = 2 * LEASE + 2 * POLL / min(RATES)  # the liveness bound (INV-LIVENESS-HA-LEADS)
STAYS_FOR = 2 * LEASE  # ... and the leader then keeps leading this long


@dataclass
class Request:
    kind: str  # "lead", "renew" or "append"
    who: str  # the process (incarnation) that sent it
    asked_at: float  # the controller's clock when it decided to send it
    epoch: int | None = None  # renew, append: the epoch it is for
    batch: int = 0  # append: which batch


FAILED = "failed"  # the answer to a request on a connection whose session ended


@dataclass
class Conn:
    """One database session: requests go one at a time, in order (the store's one thread)."""

    session: int
    queue: list[Request] = field(default_factory=list)  # not yet sent
    at_db: Request | None = None  # sent, not yet processed by the database
    answer: tuple[Request, object] | None = None  # processed; the answer is on its way back
    dead: bool = False  # the database ended this session (the process may not know yet)
    closing: bool = False  # the process exited: the session ends once what it sent has arrived
    hold_out: bool = False  # requests are held up on the way to the database (slow network, partition)
    hold_in: bool = False  # answers are held up on the way back
    late: bool = False  # the request on its way lands only after a newer epoch's first fact
    delay_next_commit: bool = False  # the next append sent will be ``late``

    @property
    def busy(self) -> bool:
        return self.at_db is not None or self.answer is not None

    def send_next(self) -> None:
        if not self.busy and self.queue:
            request = self.queue.pop(0)
            if self.dead:
                self.answer = (request, FAILED)
            else:
                self.at_db = request
                if request.kind == "append" and self.delay_next_commit:
                    self.late, self.delay_next_commit = True, False


@dataclass
class Db:
    """What daemon/store/postgres.py relies on PostgreSQL for, on the database's clock ``now``."""

    now: float = 0.0
    epoch: int = 0
    holder: str = ""
    expires_at: float = -math.inf
    locks: dict[int, int] = field(default_factory=dict)  # epoch -> the session holding its advisory lock
    sessions: set[int] = field(default_factory=set)  # live sessions
    log: list[tuple[int, str, int]] = field(default_factory=list)  # (epoch, incarnation, batch) per fact

    def try_lead(self, session: int, who: str, mine: int | None) -> int | None:
        """postgres._try_lead: take the next epoch if the current one is free."""
        holder_session = self.locks.get(self.epoch)
        lock_free = holder_session not in self.sessions or holder_session == session  # advisory locks nest
        if not (self.epoch == 0 or self.expires_at <= self.now or (self.epoch != mine and lock_free)):
            return None
        new = self.epoch + 1
        if self.locks.get(new) in self.sessions - {session}:
            return None  # another controller is taking this very epoch
        self.locks[new] = session
        self.epoch, self.holder, self.expires_at = new, who, self.now + LEASE
        return new

    def renew(self, epoch: int) -> bool:
        """postgres._renew: the lease ends ``lease`` after the database's now, if the epoch is still ours."""
        if self.epoch != epoch:
            return False
        self.expires_at = self.now + LEASE
        return True

    def append(self, epoch: int, who: str, batch: int) -> bool:
        """postgres._APPEND: the fence; two facts per batch."""
        if self.epoch != epoch:
            return False
        self.log.extend([(epoch, who, batch)] * 2)
        return True

    def end_session(self, session: int) -> None:
        self.sessions.discard(session)  # its advisory locks free with it


@dataclass
class Proc:
    """One controller host: its clock, and the controller process on it (if one runs)."""

    name: str
    rate: float
    clock: float  # the host's monotonic clock
    generation: int = 0
    model: L.Leadership | None = None  # None: no process runs
    conn: Conn | None = None
    frozen: bool = False
    committing: bool = False
    batches: int = 0
    last_poll: float = -math.inf
    down: bool = False  # crashed: stays down until the restart rule (an exit after stepping down is restarted)

    @property
    def incarnation(self) -> str:
        return f"{self.name}.{self.generation}"

    @property
    def running(self) -> bool:
        return self.model is not None and not self.frozen


PICK = st.integers(min_value=0, max_value=5)  # which of the processes a rule may act on (modulo their number)


class LeadershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.db = Db()
        self.procs: list[Proc] = []
        self.closing: list[Conn] = []  # connections of exited processes with a request still on its way
        self.sessions = 0
        self.violations: dict[str, list[str]] = defaultdict(list)
        self.released: list[tuple[float, str, int]] = []  # (database time, incarnation, epoch) per effect

    @initialize(n=st.integers(2, 3), rates=st.lists(st.sampled_from(RATES), min_size=3, max_size=3),
                clocks=st.lists(st.sampled_from([0.0, 1000.0, 7.5]), min_size=3, max_size=3))
    def setup(self, n, rates, clocks):
        self.procs = [Proc(name=NAMES[i], rate=rates[i], clock=clocks[i]) for i in range(n)]
        for proc in self.procs:
            self._start(proc)
        first = self.procs[0]  # start from a cluster with a leader
        self._poll(first)
        self._db_receives(first.conn)
        self._answer_arrives(first)

    # ---- plumbing ------------------------------------------------------------------

    def _violate(self, inv_id: str, text: str) -> None:
        self.violations[inv_id].append(text)

    def _take(self, inv_id: str) -> None:
        found, self.violations[inv_id] = self.violations[inv_id], []
        assert not found, f"{inv_id}: " + "; ".join(found[:3])

    def _start(self, proc: Proc) -> None:
        self.sessions += 1
        proc.down = False
        proc.generation += 1
        proc.model = L.Leadership(CONFIG)
        proc.conn = Conn(session=self.sessions)
        proc.frozen = proc.committing = False
        proc.last_poll = -math.inf
        self.db.sessions.add(self.sessions)

    def _exit(self, proc: Proc) -> None:
        """The process is gone (it stepped down, or was killed): its connection closes behind what it sent."""
        conn = proc.conn
        assert conn is not None
        conn.queue.clear()
        conn.answer = None
        conn.closing = True
        if conn.at_db is None or conn.dead:
            self.db.end_session(conn.session)
        else:
            self.closing.append(conn)
        proc.model = proc.conn = None
        proc.frozen = proc.committing = False

    def _send(self, proc: Proc, request: Request) -> None:
        assert proc.conn is not None
        proc.conn.queue.append(request)
        proc.conn.send_next()

    def _handle(self, proc: Proc, event: object) -> None:
        """Feed the model one event and carry out its commands, as the daemon's shell does."""
        assert proc.model is not None
        was_leading = proc.model.role is L.Role.LEADING
        commands = proc.model.handle(event)
        stepped = [c for c in commands if isinstance(c, L.StepDown)]
        told = isinstance(event, (L.CommitRefused, L.DatabaseLost)) or (
            isinstance(event, L.RenewResult) and not event.ok)
        if was_leading and told and (not stepped or proc.model.role is L.Role.LEADING):
            self._violate("INV-HA-STEPS-DOWN", f"{proc.incarnation} was told {event!r} and did not step down")
        for cmd in commands:
            if isinstance(cmd, L.SendRenew):
                self._send(proc, Request(kind="renew", who=proc.incarnation, asked_at=cmd.asked_at,
                                         epoch=proc.model.epoch))
        if stepped:
            self._exit(proc)

    def _release(self, proc: Proc) -> None:
        """A batch's commit returned: the shell's ``check`` (tick, then ``may_release``), then the effects."""
        assert proc.model is not None
        epoch = proc.model.epoch
        self._handle(proc, L.Tick(now=proc.clock))
        if proc.model is None or not proc.model.may_release(proc.clock):
            if proc.model is not None:  # the shell raises SteppedDown whatever the model said
                self._exit(proc)
            return
        assert epoch is not None
        self.released.append((self.db.now, proc.incarnation, epoch))
        if self.db.epoch != epoch:
            self._violate("INV-HA-NO-STALE-EFFECT",
                          f"{proc.incarnation} released the effects of a batch of epoch {epoch} at database time "
                          f"{self.db.now:g}, after epoch {self.db.epoch} was handed to {self.db.holder}")

    # ---- what each rule may act on (a rule only runs when it has something to do) -------------

    def _standbys(self) -> list[Proc]:
        return [p for p in self.procs if p.running and p.model.role is L.Role.STANDBY
                and not p.conn.busy and not p.conn.queue]

    def _leaders(self) -> list[Proc]:
        return [p for p in self.procs if p.running and p.model.role is L.Role.LEADING and not p.committing]

    def _running(self) -> list[Proc]:
        return [p for p in self.procs if p.running]

    def _requests_out(self) -> list[Conn]:
        return [p.conn for p in self.procs if p.conn is not None and p.conn.at_db is not None] + self.closing

    def _answers_out(self) -> list[Proc]:
        return [p for p in self.procs if p.running and p.conn.answer is not None]

    def _live(self) -> list[Proc]:
        return [p for p in self.procs if p.model is not None]

    def _gone(self) -> list[Proc]:
        return [p for p in self.procs if p.down]

    def _live_sessions(self) -> list[Proc]:
        return [p for p in self.procs if p.conn is not None and not p.conn.dead]

    @staticmethod
    def _pick(items: list, i: int):
        return items[i % len(items)]

    # ---- the daemons at work: time passes and every process does what is due -------------

    def _step(self, dt: float, order: list[int], work: bool) -> None:
        """``dt`` database seconds pass; then, process by process in ``order``: answers arrive, what
        reached the database is done there (its answer arrives next step), each process ticks its model, a standby whose poll
        is due asks to lead, a leader with ``work`` commits a batch.  Held connections wait; a
        process that stepped down is started again (by its supervisor) first."""
        self._advance(dt)
        procs = [self.procs[i] for i in order if i < len(self.procs)]
        for proc in procs:
            if proc.model is None and not proc.down:
                self._start(proc)  # its supervisor starts it again after it stepped down
        for proc in procs:  # answers of requests done in an earlier step: a round trip spans a step
            if proc.running and proc.conn.answer is not None and not proc.conn.hold_in:
                self._answer_arrives(proc)
        for conn in list(self.closing) + [p.conn for p in procs if p.conn is not None]:
            if conn.at_db is not None and not conn.hold_out and (not conn.late or self._overtaken(conn.at_db)):
                self._db_receives(conn)
        for proc in procs:
            if proc.running:
                self._tick(proc)
            if proc in self._standbys() and proc.clock - proc.last_poll >= POLL:
                self._poll(proc)
            if work and proc in self._leaders():
                self._commit(proc)

    @rule(dt=st.sampled_from(STEPS), order=st.permutations(range(3)), work=st.booleans())
    def step(self, dt, order, work):
        self._step(dt, order, work)

    # A rule registered k times is drawn k times as often: the daemons mostly just run.
    step_2 = step_3 = step_4 = step_5 = step_6 = step_7 = step_8 = step

    def _advance(self, dt: float) -> None:
        self.db.now += dt
        for proc in self.procs:
            proc.clock += proc.rate * dt  # a frozen process's monotonic clock runs on too

    def _poll(self, proc: Proc) -> None:
        """A standby asks to lead (daemon/controller/ha.py ``_stand_by``)."""
        proc.last_poll = proc.clock
        self._send(proc, Request(kind="lead", who=proc.incarnation, asked_at=proc.clock))

    def _tick(self, proc: Proc) -> None:
        self._handle(proc, L.Tick(now=proc.clock))

    def _commit(self, proc: Proc) -> None:
        """The leader's core loop commits a batch (its effects wait for the commit)."""
        proc.committing = True
        proc.batches += 1
        self._send(proc, Request(kind="append", who=proc.incarnation, asked_at=proc.clock,
                                 epoch=proc.model.epoch, batch=proc.batches))

    def _overtaken(self, request: Request) -> bool:
        """A newer epoch than the request's has committed facts."""
        return bool(self.db.log) and self.db.log[-1][0] > (request.epoch or 0)

    def _db_receives(self, conn: Conn) -> None:
        """The request on its way reaches the database and is done there, at the database's now."""
        request, conn.at_db = conn.at_db, None
        conn.late = False
        if request.kind == "lead":
            result: object = self.db.try_lead(conn.session, request.who, None)
        elif request.kind == "renew":
            result = self.db.renew(request.epoch)
        else:
            result = self.db.append(request.epoch, request.who, request.batch)
        if conn.closing:  # nobody reads the answer; the database now sees the connection close
            self.closing.remove(conn)
            self.db.end_session(conn.session)
        else:
            conn.answer = (request, result)

    def _answer_arrives(self, proc: Proc) -> None:
        (request, result), proc.conn.answer = proc.conn.answer, None
        now = proc.clock
        if result == FAILED:
            self._handle(proc, L.DatabaseLost(detail=f"the connection is gone ({request.kind})"))
        elif request.kind == "lead":
            self._handle(proc, L.TakeoverResult(epoch=result, asked_at=request.asked_at, now=now))
        elif request.kind == "renew":
            self._handle(proc, L.RenewResult(ok=result, asked_at=request.asked_at, now=now,
                                             detail="" if result else f"epoch {request.epoch} is over"))
        elif result:
            proc.committing = False
            self._release(proc)
        else:
            proc.committing = False
            self._handle(proc, L.CommitRefused(detail=f"epoch {request.epoch} is over"))
        if proc.conn is not None:
            proc.conn.send_next()

    # ---- single actions out of turn (a busy event loop, one message getting through) ----------

    @precondition(lambda self: self._requests_out())
    @rule(i=PICK)
    def db_receives(self, i):
        self._db_receives(self._pick(self._requests_out(), i))

    @precondition(lambda self: self._answers_out())
    @rule(i=PICK)
    def answer_arrives(self, i):
        self._answer_arrives(self._pick(self._answers_out(), i))

    @precondition(lambda self: self._leaders())
    @rule(i=PICK)
    def commit(self, i):
        self._commit(self._pick(self._leaders(), i))

    @rule(dt=st.sampled_from(JUMPS))
    def time_passes(self, dt):
        """Time passes and no process gets to run (all busy, or starved)."""
        self._advance(dt)

    # ---- faults ---------------------------------------------------------------------------

    @precondition(lambda self: self._live())
    @rule(i=PICK)
    def hold_requests(self, i):
        """One process's requests are held up on the way to the database (slow network, partition)."""
        self._pick(self._live(), i).conn.hold_out = True

    @precondition(lambda self: self._leading())
    @rule(i=PICK)
    def delay_commit(self, i):
        """A leader's next commit is delayed on its way to the database until a newer epoch's leader
        has committed (a retransmission that lands after a failover)."""
        self._pick(self._leading(), i).conn.delay_next_commit = True

    def _leading(self) -> list[Proc]:
        return [p for p in self.procs if p.model is not None and p.model.role is L.Role.LEADING
                and not p.conn.delay_next_commit]

    @precondition(lambda self: self._live())
    @rule(i=PICK)
    def hold_answers(self, i):
        """The database's answers to one process are held up on their way back."""
        self._pick(self._live(), i).conn.hold_in = True

    @precondition(lambda self: any(c.hold_out or c.hold_in or c.late for c in self._conns()))
    @rule(i=PICK)
    def let_go(self, i):
        conn = self._pick([c for c in self._conns() if c.hold_out or c.hold_in or c.late], i)
        conn.hold_out = conn.hold_in = conn.late = conn.delay_next_commit = False

    def _conns(self) -> list[Conn]:
        return [p.conn for p in self.procs if p.conn is not None] + self.closing

    @rule(i=PICK, rate=st.sampled_from(RATES))
    def clock_rate_changes(self, i, rate):
        self._pick(self.procs, i).rate = rate

    @precondition(lambda self: self._running())
    @rule(i=PICK)
    def freeze(self, i):
        self._pick(self._running(), i).frozen = True

    @precondition(lambda self: any(p.frozen for p in self.procs))
    @rule(i=PICK, answer_first=st.booleans())
    def resume(self, i, answer_first):
        """SIGCONT: with ``answer_first``, an answer that came while it was stopped is handled before
        anything else (before its clock is read for a tick)."""
        proc = self._pick([p for p in self.procs if p.frozen], i)
        proc.frozen = False
        if answer_first and proc.conn.answer is not None and not proc.conn.hold_in:
            self._answer_arrives(proc)

    @precondition(lambda self: self._live())
    @rule(i=PICK)
    def crash(self, i):
        """SIGKILL: the process is gone, and stays down until restarted."""
        proc = self._pick(self._live(), i)
        self._exit(proc)
        proc.down = True

    @precondition(lambda self: self._gone())
    @rule(i=PICK)
    def restart(self, i):
        self._start(self._pick(self._gone(), i))

    @precondition(lambda self: self._live_sessions())
    @rule(i=PICK)
    def session_ends(self, i):
        """The database drops a live process's connection: what was on its way on it is lost."""
        conn = self._pick(self._live_sessions(), i).conn
        conn.dead = True
        self.db.end_session(conn.session)
        lost = conn.at_db or (conn.answer[0] if conn.answer else None)
        conn.at_db = None
        conn.answer = (lost, FAILED) if lost is not None else None

    # ---- invariants (docs/invariants.md, "Leadership") ------------------------------------

    @invariant()
    def inv_ha_one_leader_per_epoch(self):
        """INV-HA-ONE-LEADER-PER-EPOCH: the facts of one epoch all come from one controller process,
        and no two live processes hold one epoch."""
        writers: dict[int, set[str]] = defaultdict(set)
        for epoch, who, _ in self.db.log:
            writers[epoch].add(who)
        shared = {e: sorted(w) for e, w in writers.items() if len(w) > 1}
        assert not shared, f"INV-HA-ONE-LEADER-PER-EPOCH: facts of one epoch from several controllers: {shared}"
        holders: dict[int, list[str]] = defaultdict(list)
        for proc in self.procs:
            if proc.model is not None and proc.model.role is L.Role.LEADING:
                holders[proc.model.epoch].append(proc.incarnation)
        both = {e: h for e, h in holders.items() if len(h) > 1}
        assert not both, f"INV-HA-ONE-LEADER-PER-EPOCH: several controllers lead one epoch: {both}"

    @invariant()
    def inv_ha_facts_ordered(self):
        """INV-HA-FACTS-ORDERED: no fact of an older epoch follows the first fact of a newer one in the log."""
        epochs = [epoch for epoch, _, _ in self.db.log]
        for seq, (before, after) in enumerate(zip(epochs, epochs[1:]), start=2):
            assert after >= before, f"INV-HA-FACTS-ORDERED: fact {seq} is of epoch {after}, after a fact of {before}"

    @invariant()
    def inv_ha_no_stale_effect(self):
        """INV-HA-NO-STALE-EFFECT: no controller releases an effect once the database has handed its epoch on;
        and (what could be released) a process whose session lives may release only while the database's
        lease on its epoch runs."""
        self._take("INV-HA-NO-STALE-EFFECT")
        for proc in self.procs:
            model = proc.model
            if model is None or proc.conn.dead or not model.may_release(proc.clock):
                continue
            assert model.epoch == self.db.epoch and self.db.now < self.db.expires_at, (
                f"INV-HA-NO-STALE-EFFECT: {proc.incarnation} may release effects of epoch {model.epoch} (its clock "
                f"{proc.clock:g}, deadline {model.valid_until:g}) at database time {self.db.now:g}, but the database's "
                f"epoch is {self.db.epoch} and its lease ends at {self.db.expires_at:g}")

    @invariant()
    def inv_ha_steps_down(self):
        """INV-HA-STEPS-DOWN: a leader told that its epoch is over, or that its database is lost, steps down."""
        self._take("INV-HA-STEPS-DOWN")

    # ---- liveness --------------------------------------------------------------------------

    def teardown(self):
        """INV-LIVENESS-HA-LEADS: once faults stop, some controller leads within ``LEADS_WITHIN`` (database
        seconds) and keeps leading for ``STAYS_FOR``: every process runs, requests are answered in the
        next step, everyone ticks, crashed processes restart."""
        if not self.procs:
            return
        for proc in self.procs:
            proc.frozen = False
        for conn in self._conns():
            conn.hold_in = conn.hold_out = conn.late = conn.delay_next_commit = False
        start = self.db.now
        leader, since = None, start  # the current leader, and since when it has led without a break
        while self.db.now - start < LEADS_WITHIN + STAYS_FOR:
            self._settle_step()
            self._check_safety()
            current = self._leader()
            if current != leader:
                leader, since = current, self.db.now
        assert leader is not None and since - start <= LEADS_WITHIN, (
            f"INV-LIVENESS-HA-LEADS: no controller led from within {LEADS_WITHIN:g} s of the faults stopping "
            f"for {STAYS_FOR:g} s without a break (now {self.db.now - start:g} s after; leader {leader} since "
            f"{since - start:g} s; database epoch {self.db.epoch}, held by {self.db.holder}, expires at "
            f"{self.db.expires_at - start:g} s; roles {[p.model.role.value if p.model else None for p in self.procs]})")

    def _check_safety(self) -> None:
        for inv in (self.inv_ha_one_leader_per_epoch, self.inv_ha_facts_ordered, self.inv_ha_no_stale_effect,
                    self.inv_ha_steps_down):
            inv()

    def _settle_step(self) -> None:
        """A fair step with no faults: crashed processes are started again, then everything that is due."""
        for proc in self.procs:
            if proc.down:
                self._start(proc)
        self._step(SETTLE_STEP, [0, 1, 2], work=True)

    def _leader(self) -> str | None:
        """The process that leads the database's epoch, on a live session, and may release effects now."""
        for proc in self.procs:
            model = proc.model
            if (model is not None and not proc.conn.dead and model.epoch == self.db.epoch
                    and model.may_release(proc.clock)):
                return proc.incarnation
        return None


TestLeadership = LeadershipMachine.TestCase
# `ci`: 100 examples of 50 steps (a few seconds); `fuzz` (RECKON_HYPOTHESIS_PROFILE=fuzz) keeps its own budget.
if settings._current_profile == "ci":
    TestLeadership.settings = settings(settings.get_profile("ci"), max_examples=100)


# ---- bite tests: put a known bug back, one at a time, and watch the machine catch it ---------------

BITE_SETTINGS = settings(
    settings.get_profile("ci"),
    max_examples=1000,  # an upper bound: each run stops at the first failure
    stateful_step_count=100,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
    print_blob=False,
)


def assert_bites(*inv_ids: str) -> None:
    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(LeadershipMachine, settings=BITE_SETTINGS)
    text = str(info.value)
    assert any(i in text for i in inv_ids), f"failed, but not by {inv_ids}: {text[:1500]}"


def test_bite_fence_removed(monkeypatch):
    """The append does not check the epoch (the ``FOR SHARE`` fence of postgres._APPEND is gone)."""

    def unfenced(self, epoch, who, batch):
        self.log.extend([(epoch, who, batch)] * 2)
        return True

    monkeypatch.setattr(Db, "append", unfenced)
    assert_bites("INV-HA-FACTS-ORDERED", "INV-HA-NO-STALE-EFFECT")


def test_bite_release_until_the_whole_lease(monkeypatch):
    """Effects are released until ``asked_at + lease``, with no room for a slower clock."""
    monkeypatch.setattr(L.LeaseConfig, "valid_for", property(lambda self: self.lease))
    assert_bites("INV-HA-NO-STALE-EFFECT")


def test_bite_release_not_checked(monkeypatch):
    """``may_release`` asks only whether the controller leads, not whether its lease may have passed."""
    monkeypatch.setattr(L.Leadership, "may_release", lambda self, now: self.role is L.Role.LEADING)
    assert_bites("INV-HA-NO-STALE-EFFECT")


def test_bite_deadline_measured_from_the_reply(monkeypatch):
    """A renewal's deadline counts from when its answer came back, not from when it was sent."""
    renewed = L.Leadership._on_renewed

    def from_reply(self, ev, out):
        renewed(self, ev, out)
        if ev.ok and self.role is L.Role.LEADING:
            self.valid_until = max(self.valid_until, ev.now + self.config.valid_for)

    monkeypatch.setattr(L.Leadership, "_on_renewed", from_reply)
    monkeypatch.setitem(L._HANDLERS, L.RenewResult, from_reply)
    assert_bites("INV-HA-NO-STALE-EFFECT")


def test_bite_takeover_without_a_new_epoch(monkeypatch):
    """A takeover keeps the epoch it found (postgres._try_lead without ``epoch + 1``)."""
    try_lead = Db.try_lead

    def same_epoch(self, session, who, mine):
        old = self.epoch
        taken = try_lead(self, session, who, mine)
        if taken is not None and old > 0:
            self.epoch = old
            self.locks[old] = session
            return old
        return taken

    monkeypatch.setattr(Db, "try_lead", same_epoch)
    assert_bites("INV-HA-ONE-LEADER-PER-EPOCH")


@pytest.mark.skipif(settings._current_profile == "ci",
                    reason="about 30 s to reach (a frozen leader handed a refusal before its first tick): "
                           "run with RECKON_HYPOTHESIS_PROFILE=fuzz")
def test_bite_deposed_leader_does_not_step_down(monkeypatch):
    """A refused renewal or commit leaves the controller leading (it drops the refusal)."""
    step_down = L.Leadership._step_down

    def stays(self, role, reason, out):
        if role is L.Role.DEPOSED:
            return
        step_down(self, role, reason, out)

    monkeypatch.setattr(L.Leadership, "_step_down", stays)
    assert_bites("INV-HA-STEPS-DOWN")
