"""A stronger random machine (issue #13): swarm testing, dedicated rules for the rare interleavings.

``SwarmMachine`` is ``test_stateful.ReckonMachine`` (same world, same ``inv_*``
checks) with three changes:

- **Swarm testing**: each example draws, at its start, which fault kinds and
  dedicated rules it may use (``SWARM``); the core rules (delivery, time,
  process ends, scheduling, rejoin/restart) are always on.  An example with
  few fault kinds goes deep into the ones it has instead of spreading thin.
- **Dedicated rules** that make the interleavings issue #13 measured as rare
  common: a stale round's page, query copy or ResyncDone delivered on a *live*
  connection (``stale_round_input``); a ResyncDone held back behind later
  traffic (``late_resync_done``); a new connection's Join reaching the
  controller before the old one's close (``rejoin_before_close``); a round
  deadline while the report's pages are in flight (``deadline_during_report``);
  a lost supervisor followed by a heartbeat (``lose_and_heartbeat``: arms an
  anti-entropy round); the controller losing its newest dispatch facts
  (``lose_last_dispatch``: the agent still runs the job, so it is adopted).
- **Judging anti-entropy on its own**: ``teardown`` first settles *in place*
  (faults stop, nobody reconnects, heartbeats and deadlines run): on every live
  connection the agent must end holding what the controller places there, or
  (if the connection was tampered with) the controller must have seen exactly
  this disagreement with a round (``session.unrepaired``).  Only then does the
  base teardown reconnect everyone and check liveness.  The kills an agent
  actually performs are checked too (INV-NO-WRONG-KILL at the agent).

``TALLY`` counts what the runs reached (JobAdopted facts, heartbeat rounds,
stale input delivered live, ...); ``coverage()`` measures it for any machine
class (docs/checking.md has the figures).  ``target()`` steers Hypothesis
towards more rounds and adoptions.
"""

from __future__ import annotations

import copy
from collections import Counter

import hypothesis.strategies as st
from hypothesis import target
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER, initialize, precondition, rule

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import SessionState
from reckon.model.jobs import JobState

from tests.model.test_stateful import INDEX, ReckonMachine, Wire

# Fault kinds an example may enable (each with probability 1/2, drawn at its start).
SWARM = (
    "submit", "cancel", "late_proposal", "supervisor_lost", "deliver_out_of_order", "drop", "duplicate",
    "report_again", "disconnect", "controller_crash", "controller_rollback", "agent_crash", "fire_stale_timer",
)
# Dedicated rules for the rare interleavings: eligible in every example (Hypothesis' own rule
# selection already switches rules off per example; a second switch made them rarer than before).
DEDICATED = (
    "stale_round_input", "late_resync_done", "stale_done_now", "rejoin_before_close", "deadline_during_report",
    "lose_and_heartbeat", "lose_last_dispatch", "drop_control",
)
# Rules that reorder, copy or lose messages of a live connection: a real WebSocket does none
# of that without closing, so such a connection is judged more leniently when settling in place.
TAMPERING = frozenset({"deliver_out_of_order", "drop", "duplicate", "report_again", "stale_round_input",
                       "late_resync_done", "stale_done_now", "drop_control"})
CONTROL_TYPES = frozenset({M.Dispatch.TYPE, M.Kill.TYPE, M.Ack.TYPE})
ROUND_TYPES = frozenset({M.ResyncReport.TYPE, M.ResyncQuery.TYPE, M.ResyncDone.TYPE})

# The base machine's set-up (the swarm's set-up replaces it and calls it first).
INITIALIZE_RULE_FUNCTION = getattr(ReckonMachine.setup, INITIALIZE_RULE_MARKER).function
TALLY: Counter = Counter()  # summed over every run since the last reset (see coverage())


class Tallied(ReckonMachine):
    """The base machine plus counters of what a run reached (no new rules, no new checks)."""

    def __init__(self) -> None:
        super().__init__()
        self.tally: Counter = Counter()
        self.lossy: set[int] = set()
        self.sent_round_input: list[Wire] = []  # every query, page and ResyncDone ever enqueued
        self.rolled_back = False  # a rollback or lost facts happened in this run
        self.log_peak = 0

    def _enqueue(self, to, conn, data):
        super()._enqueue(to, conn, data)
        if data is not None and data.get("type") in ROUND_TYPES:
            self.sent_round_input.append(self.wire[-1])

    def _append(self, fact):
        self.rolled_back = getattr(self, "rolled_back", False) or len(self.log) < getattr(self, "log_peak", 0)
        super()._append(fact)
        self.log_peak = len(self.log)
        self.tally[f"fact {type(fact).__name__}"] += 1

    def _ctrl(self, event):
        deadline_mid_report = False
        if isinstance(event, E.RoundDeadlineExpired):
            sess = self.controller.sessions.get(event.agent)
            if sess is not None and sess.round is not None and sess.round.token == event.token:
                deadline_mid_report = any(w.to == "controller" and w.data and w.data.get("type") == M.ResyncReport.TYPE
                                          and w.data.get("token") == event.token for w in self.wire)
        cmds = super()._ctrl(event)
        armed = any(isinstance(c, E.StartRoundTimer) for c in cmds)
        if armed and isinstance(event, E.MessageFromAgent) and isinstance(event.message, M.Heartbeat):
            self.tally["heartbeat rounds"] += 1
        elif armed and isinstance(event, E.AgentJoined):
            self.tally["join rounds"] += 1
        if deadline_mid_report and any(isinstance(c, E.RoundEnded) for c in cmds):
            self.tally["deadlines during a report"] += 1
        return cmds

    def _deliver(self, item):
        heads = self._heads()
        if item not in heads:
            self.lossy.add(item.conn)  # overtook an older message of its own connection
        kind = item.data.get("type") if item.data else None
        if kind in ROUND_TYPES:
            self._tally_round_input(item, kind)
        if kind == M.Join.TYPE and any(
                self.ctrl_open.get(c) and a == item.agent and c != item.conn for c, a in self.conn_agent.items()):
            self.tally["joins before the old close"] += 1
        super()._deliver(item)

    def _tally_round_input(self, item: Wire, kind: str) -> None:
        token = item.data.get("token")
        if item.to == "controller":
            sess = self.controller.sessions.get(item.agent)
            live = self.ctrl_open.get(item.conn) and sess is not None and sess.conn == item.conn
            if live and (sess.round is None or sess.round.token != token):
                self.tally["stale pages delivered live"] += 1
            return
        side = self.sides[item.to]
        if side.agent is None or side.conn != item.conn:
            return
        sess = self.controller.sessions.get(item.to)
        current = sess is not None and sess.round is not None and sess.round.token == token
        if kind == M.ResyncQuery.TYPE and not current and token == side.agent._answered:
            self.tally["stale query copies delivered live"] += 1
        elif kind == M.ResyncDone.TYPE and token != side.agent._answered:
            self.tally["stale ResyncDone delivered live"] += 1
            if side.agent._reported:
                self.tally["... while the agent awaits another round's ResyncDone for completions"] += 1

    def _agent_commands(self, side, cmds):
        for cmd in cmds:
            if isinstance(cmd, E.KillProcess) and any(
                    p.alive and p.agent == side.name and (p.job, p.attempt) == (cmd.job, cmd.attempt)
                    for p in self.procs):
                job = self.controller.state.jobs.get(cmd.job)
                if not (job is not None and job.state is JobState.RUNNING and job.agent == side.name
                        and job.attempt == cmd.attempt):
                    self.tally["orphan kills performed"] += 1
        return super()._agent_commands(side, cmds)

    def teardown(self):
        if getattr(self, "ready", False):
            for key, n in self.tally.items():
                TALLY[key] += n
            TALLY["runs"] += 1
            if currently_in_test_context():  # a directed run (a bite's trace) is no search to steer
                target(float(self.tally["heartbeat rounds"] + self.tally["join rounds"]), label="rounds armed")
                target(float(self.tally["fact JobAdopted"]), label="jobs adopted")
        super().teardown()


class SwarmMachine(Tallied):
    """Swarm testing over the fault kinds, dedicated rules for the rare interleavings."""

    @initialize(enabled=st.lists(st.booleans(), min_size=len(SWARM), max_size=len(SWARM)), busy=st.integers(0, 4),
                **getattr(ReckonMachine.setup, INITIALIZE_RULE_MARKER).arguments)
    def setup(self, enabled, busy, **cluster):
        """Which fault kinds and dedicated rules this example uses; ``busy`` more jobs start running
        (the rare interleavings all need running jobs: rounds ask about them, supervisors lose them)."""
        self.enabled = frozenset(name for name, on in zip(SWARM, enabled) if on)
        INITIALIZE_RULE_FUNCTION(self, **cluster)
        for _ in range(busy):
            self._submit(1, ("true",))
        self._schedule(None)
        self._deliver_all()
        self._advance(2.5, 0.0, False)  # the Started reports go out with a tick
        self._deliver_all()

    @precondition(lambda self: self.wire)
    @rule(i=INDEX, keep_copy=st.booleans())
    def deliver(self, i, keep_copy):  # the base rule, marking the connection a copy stays in flight on
        if keep_copy:
            self.lossy.add(self._heads()[i % len(self._heads())].conn)
        super().deliver(i, keep_copy)

    def _tamper(self, run) -> None:
        before = {w.uid: w.conn for w in self.wire}
        run()
        after = {w.uid: w.conn for w in self.wire}
        self.lossy |= {before[u] for u in before.keys() - after.keys()} | {after[u] for u in after.keys() - before.keys()}

    # ---- dedicated rules -----------------------------------------------------------------

    def _live_round_input(self) -> list[Wire]:
        """Copies worth re-sending: round input of a connection both ends still have open, and
        not of the round open on it now (pages and queries) or not the one just answered (dones)."""
        out = []
        for w in self.sent_round_input:
            if not (self.ctrl_open.get(w.conn) and self.agent_open.get(w.conn)):
                continue
            sess = self.controller.sessions.get(w.agent)
            if sess is None or sess.conn != w.conn:
                continue
            if sess.round is None or sess.round.token != w.data.get("token"):
                out.append(w)
        return out

    @precondition(lambda self: self._live_round_input())
    @rule(i=INDEX)
    def stale_round_input(self, i):
        """A copy of an ended round's page, query or ResyncDone arrives late, on the live connection."""
        items = self._live_round_input()
        item = items[i % len(items)]
        self.uid += 1
        self.wire.append(Wire(to=item.to, conn=item.conn, agent=item.agent, data=copy.deepcopy(item.data),
                              uid=self.uid))
        self.lossy.add(item.conn)

    def _dones_in_flight(self) -> list[Wire]:
        return [w for w in self.wire if w.data and w.data.get("type") == M.ResyncDone.TYPE]

    def _control_in_flight(self) -> list[Wire]:
        """Dispatches, Kills and Acks on their way to an agent with another message behind them on their
        connection (that one lets the agent's seen_seq catch up: the heartbeat stays comparable)."""
        out = []
        for k, w in enumerate(self.wire):
            if (w.data and w.data.get("type") in CONTROL_TYPES and self.agent_open.get(w.conn)
                    and any(v.channel == w.channel and v.data for v in self.wire[k + 1:])):
                out.append(w)
        return out

    @precondition(lambda self: self._control_in_flight())
    @rule(i=INDEX)
    def drop_control(self, i):
        """A Dispatch, Kill or Ack on its way to an agent is lost (the generic ``drop`` rarely picks one)."""
        items = self._control_in_flight()
        item = items[i % len(items)]
        self.wire.remove(item)
        self.lossy.add(item.conn)

    @precondition(lambda self: self._dones_in_flight())
    @rule(i=INDEX, settle=st.booleans())
    def late_resync_done(self, i, settle):
        """A ResyncDone falls behind everything now in flight (and, with ``settle``, behind what that causes)."""
        items = self._dones_in_flight()
        item = items[i % len(items)]
        self.wire.remove(item)
        self.lossy.add(item.conn)
        if settle:
            self._deliver_all()
        self.wire.append(item)

    def _newer_query(self, side, done: Wire) -> bool:
        """A query of a round newer than ``done``'s is on its way to ``side`` on ``done``'s connection."""
        return any(q.to == side.name and q.conn == done.conn and q.data and q.data.get("type") == M.ResyncQuery.TYPE
                   and q.data.get("token") != done.data.get("token") for q in self.wire)

    def _older_dones(self) -> list[tuple[Wire, object]]:
        """(a ResyncDone copy, its agent's side) for live connections on which a newer round was
        answered or has its query on the way."""
        out = []
        for w in self.sent_round_input:
            if w.to == "controller" or w.data.get("type") != M.ResyncDone.TYPE:
                continue
            side = self.sides[w.to]
            if side.agent is None or side.conn != w.conn or not self.ctrl_open.get(w.conn):
                continue
            if self._newer_query(side, w) or side.agent._answered not in (None, w.data.get("token")):
                out.append((w, side))
        return out

    @precondition(lambda self: self._older_dones())
    @rule(i=INDEX, end_first=st.booleans())
    def stale_done_now(self, i, end_first):
        """The agent answers the newer round whose query is on its way (if one is), then a ResyncDone
        of an older round of this connection arrives: a late copy that overtakes the rest.  With
        ``end_first`` one of its processes ends just before it answers, so the report carries a
        completion the controller has not recorded yet (what a stale ResyncDone must not acknowledge)."""
        choices = self._older_dones()
        # Prefer the moment it matters: the agent holds completions that a report carries or will carry.
        if end_first:
            choices = [(w, side) for w, side in choices if self._newer_query(side, w) and any(
                p.alive and p.agent == side.name for p in self.procs)] or choices
        choices = [(w, side) for w, side in choices if side.agent.outbox] or choices
        item, side = choices[i % len(choices)]
        conn = item.conn
        if end_first and self._newer_query(side, item):
            p = next((p for p in self.procs if p.alive and p.agent == side.name), None)
            if p is not None:
                p.alive, p.exit_code, p.signal, p.finished_at = False, 0, None, self.now
                self._agent(side, self._exited(p))
        while side.conn == conn and any(q.to == side.name and q.conn == conn and q.data
                                        and q.data.get("type") == M.ResyncQuery.TYPE for q in self.wire):
            head = next(w for w in self._heads() if w.to == side.name and w.conn == conn)
            self._deliver(head)
        if side.agent is None or side.conn != conn:
            return
        self.lossy.add(conn)
        self.uid += 1
        copy_ = Wire(to=item.to, conn=conn, agent=item.agent, data=copy.deepcopy(item.data), uid=self.uid)
        self.wire.insert(0, copy_)
        self._deliver(copy_)

    @precondition(lambda self: any(s.agent is not None and s.conn is not None for s in self.sides.values()))
    @rule(i=INDEX, close_first=st.booleans())
    def rejoin_before_close(self, i, close_first):
        """The agent drops its connection and reconnects at once: the new Join may reach the controller
        before (or right after) the old connection's close."""
        sides = [s for s in self.sides.values() if s.agent is not None and s.conn is not None]
        side = sides[i % len(sides)]
        old = side.conn
        self._agent_drops_conn(side)
        conn = self._connect(side)
        close = next((w for w in self.wire if w.to == "controller" and w.conn == old and w.data is None), None)
        join = next((w for w in self.wire if w.to == "controller" and w.conn == conn), None)
        for item in ([close, join] if close_first else [join, close]):
            if item is not None and item in self.wire and item in self._heads():
                self._deliver(item)

    def _open_rounds(self) -> list[tuple[str, bytes]]:
        """(agent, token) of every round open on a connection both ends still have."""
        out = []
        for (agent, token) in self.timers:
            sess = self.controller.sessions.get(agent)
            if (sess is not None and sess.conn is not None and self.ctrl_open.get(sess.conn)
                    and self.agent_open.get(sess.conn)):
                out.append((agent, token))
        return sorted(out)

    def _report_in_flight(self, agent: str, token: bytes) -> bool:
        return any(w.to == "controller" and w.agent == agent and w.data and w.data.get("type") == M.ResyncReport.TYPE
                   and w.data.get("token") == token for w in self.wire)

    @precondition(lambda self: self._open_rounds())
    @rule(i=INDEX, pages_first=st.integers(0, 2))
    def deadline_during_report(self, i, pages_first):
        """The round's deadline passes while its report is on the way: the agent answers the query
        (if it has not yet), some pages may arrive, then the deadline fires."""
        rounds = self._open_rounds()
        agent, token = rounds[i % len(rounds)]
        conn = self.controller.sessions[agent].conn
        for _ in range(20):  # the agent reads what is on its way until its report goes out
            if self._report_in_flight(agent, token) or (agent, token) not in self.timers:
                break
            head = next((w for w in self._heads() if w.to == agent and w.conn == conn), None)
            if head is None:
                break
            self._deliver(head)
        for _ in range(pages_first):
            page = next((w for w in self._heads() if w.to == "controller" and w.agent == agent and w.data
                         and w.data.get("token") == token), None)
            if page is None:
                break
            self._deliver(page)
        deadline = self.timers.get((agent, token))
        if deadline is not None:
            self.now = max(self.now, deadline)
            self._ctrl(E.RoundDeadlineExpired(agent=agent, token=token, now=self.now))

    def _lose_candidates(self) -> list:
        return [p for p in self.procs if p.alive and self.sides[p.agent].agent is not None
                and self.sides[p.agent].conn is not None]

    @precondition(lambda self: self._lose_candidates())
    @rule(i=INDEX, then_ends=st.booleans(), first=st.booleans())
    def lose_and_heartbeat(self, i, then_ends, first):
        """``first``: an earlier anti-entropy round runs to its end on this connection first (two rounds
        on one connection: the older one's messages become stale input)."""
        if first:
            self._lose_and_heartbeat(i, False)
            self._deliver_all()  # the round runs to its end; its requeued job is placed again
            self._schedule(None)
            self._deliver_all()
        if self._lose_candidates():
            self._lose_and_heartbeat(i, then_ends)

    def _lose_and_heartbeat(self, i, then_ends):
        """A supervisor vanishes under a connected agent, then its next heartbeat reaches the controller:
        an anti-entropy round is armed, its query on the way.  Agents that already answered a round on
        this connection are preferred (two rounds on one connection: stale tokens).  With ``then_ends``
        another of its processes ends while the query is on its way."""
        procs = self._lose_candidates()
        busy = [p for p in procs if sum(q.alive and q.agent == p.agent for q in self.procs) > 1] or procs
        procs = [p for p in busy if self.sides[p.agent].agent._answered is not None] or busy
        p = procs[i % len(procs)]
        side = self.sides[p.agent]
        conn = side.conn
        while side.conn == conn:  # first it sees all we sent: its heartbeat is comparable
            item = next((w for w in self._heads() if w.to == side.name and w.conn == conn), None)
            if item is None:
                break
            self._deliver(item)
        if not p.alive or side.agent is None or side.conn is None:
            return
        p.alive, p.lost = False, True
        self._agent(side, E.ProcessLost(job=p.job, attempt=p.attempt, now=self.now))
        self._advance(side.config.heartbeat_interval + 0.5, 0.0, False)
        conn = side.conn
        while conn is not None and side.conn == conn:
            item = next((w for w in self._heads() if w.to == "controller" and w.conn == conn), None)
            if item is None:
                break
            self._deliver(item)
            if item.data and item.data.get("type") == M.Heartbeat.TYPE:
                break
        other = next((q for q in self.procs if q.alive and q.agent == side.name), None)
        if then_ends and other is not None and side.agent is not None:
            other.alive, other.exit_code, other.signal, other.finished_at = False, 0, None, self.now
            self._agent(side, self._exited(other))

    def _last_dispatch(self) -> int | None:
        k = next((k for k in range(len(self.log) - 1, 0, -1) if isinstance(self.log[k], F.JobDispatched)), None)
        return k

    @precondition(lambda self: self._last_dispatch() is not None)
    @rule()
    def lose_last_dispatch(self):
        """The controller's newest durable facts are lost back to before its last dispatch (a disk that
        lied about a flush, an old backup): the agent may already run it, so its rejoin adopts it."""
        k = self._last_dispatch()
        ReckonMachine.controller_rollback(self, keep=k - 1)

    # ---- judging anti-entropy before teardown's rejoin repairs everything ----------------------

    def teardown(self):
        if getattr(self, "ready", False) and not _failing():
            self._settle_in_place()
        super().teardown()
        if getattr(self, "ready", False) and not _failing() and not (self.rolled_back or len(self.log) < self.log_peak):
            self._check_cancels_end()

    def _check_cancels_end(self) -> None:
        """INV-LIVENESS-CANCEL: once quiet, no job whose cancel was requested is still running.

        (Not judged after a rollback: the restored history may hold a cancel whose Kill names
        a submission the agent no longer runs for that attempt.)"""
        for job in self.controller.state.jobs.values():
            assert not (job.state is JobState.RUNNING and job.cancel_requested), (
                f"INV-LIVENESS-CANCEL: job {job.id} attempt {job.attempt} on {job.agent} is still running, "
                f"its cancel requested, with the cluster quiet")

    def _settle_in_place(self, rounds: int = 12) -> None:
        """INV-LIVENESS-AGREE on live connections: faults stop, nobody reconnects.  Heartbeats,
        retries and deadlines run; every agent still connected ends holding what the controller
        places there, or (on a tampered connection) the controller has seen exactly this
        disagreement with a round of its own."""
        step = 1.0 + max(max(s.config.retry_max * 1.25, s.config.heartbeat_interval) for s in self.sides.values())
        for k in range(rounds):
            self._deliver_all()
            self._drain_notes()
            self._check_all_invariants(whole_state=False)
            rounds_open = any(sess.round is not None for _, _, sess in self._judged())  # their deadlines come
            if k >= 2 and not self.wire and not rounds_open and not self._disagreeing(strict=False):
                break
            self._advance(step, 0.0, True)
        self._deliver_all()
        self._check_all_invariants()
        for name, side, sess in self._judged():
            assert sess.round is None, (f"INV-LIVENESS-QUIET: {name} stays connected with a round open "
                                        f"(deadlines fired, nothing in flight)")
            held, placed = sorted(side.agent.held()), sorted(self.controller.placed_on(name).items())
            if held == placed:
                continue
            if side.agent.session is not SessionState.OPERATING:
                continue  # joining: judged by the base teardown
            if side.conn in self.lossy:
                theirs = (len(held), M.running_digest(held))
                seen = sess.unrepaired == (side.conn, theirs, self.controller.state.placement_digest(name))
                # A message it never got (dropped) leaves its seen_seq behind: no fair comparison is
                # possible on this connection, by design (a WebSocket loses nothing without closing).
                blind = side.agent.seen_seq < sess.seq
                assert seen or blind, (f"INV-LIVENESS-AGREE: {name} stays connected and holds {held}, the controller places "
                              f"{placed} there and no round has seen that disagreement")
                continue
            raise AssertionError(f"INV-LIVENESS-AGREE: {name} stays connected and holds {held}, the controller "
                                 f"places {placed} there (anti-entropy did not repair it)")
        if any(self._judged()) and self.tally["heartbeat rounds"]:
            self.tally["runs judging anti-entropy"] += 1

    def _judged(self):
        for name, side in self.sides.items():
            sess = self.controller.sessions.get(name)
            if side.agent is not None and side.conn is not None and sess is not None and sess.conn == side.conn \
                    and self.ctrl_open.get(side.conn):
                yield name, side, sess

    def _disagreeing(self, strict: bool) -> bool:
        return any(sorted(side.agent.held()) != sorted(self.controller.placed_on(name).items())
                   for name, side, _ in self._judged() if strict or side.conn not in self.lossy)


def _failing() -> bool:
    import sys
    return sys.exc_info()[0] is not None


def _gate(name: str):
    """The base rule ``name``, enabled only in examples whose swarm drew it (and, for a tampering
    rule, marking the connections whose in-flight messages it dropped, copied or reordered)."""
    base = getattr(getattr(SwarmMachine, name), RULE_MARKER)
    fn = base.function
    if name in TAMPERING and name not in SwarmMachine.__dict__:
        def tampering(self, **kwargs):
            self._tamper(lambda: base.function(self, **kwargs))
        tampering.__name__ = name
        fn = tampering
    # The base machine's version 8 submits (``when``: --begin, singleton) stay out of the swarm: its
    # derandomized draws, which its bites were tuned on, stay what they were.
    arguments = {k: v for k, v in base.arguments.items() if not (name == "submit" and k == "when")}
    gated = rule(**arguments)(fn)
    for check in (*base.preconditions, lambda self: name in self.enabled):
        gated = precondition(check)(gated)
    return gated


# Targeted weights: a rule registered k times is drawn k times as often (Hypothesis picks
# uniformly among the rules whose preconditions hold).
WEIGHTS = {"lose_and_heartbeat": 4, "stale_round_input": 2, "late_resync_done": 2, "deadline_during_report": 2,
           "stale_done_now": 3}

for _name in SWARM + DEDICATED:
    _gated = _gate(_name) if _name in SWARM else getattr(SwarmMachine, _name)
    setattr(SwarmMachine, _name, _gated)
    for _k in range(1, WEIGHTS.get(_name, 1)):
        setattr(SwarmMachine, f"{_name}_{_k + 1}", _gated)


def coverage(machine: type, runs: int, steps: int, seed: int = 0) -> Counter:
    """Run ``machine`` ``runs`` times (derandomized from ``seed``) and return what the runs reached."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    TALLY.clear()
    run_state_machine_as_test(machine, settings=settings(
        max_examples=runs, stateful_step_count=steps, deadline=None, database=None, derandomize=True,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    return Counter(TALLY)
