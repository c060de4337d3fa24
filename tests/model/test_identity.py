"""Agent identity: one name, one agent at a time (issue #9, bug 1).

Two agents started with one ``--name`` (cloned VMs share a hostname) kicked
each other off ten times a second, each join requeued the name's jobs as
"unrecognized", and the fact log grew by ~20 facts a second.  Now a name
belongs to one durable identity: another identity is refused with a
permanent, named error while the holder is connected (or disconnected with
jobs placed on it), and nothing changes.  The controller is driven directly
here: the harness has one model per name, and this is about two.

Invariant: INV-NAME-HANDOVER (docs/invariants.md).
"""

from __future__ import annotations

import pytest
from tests.model.harness import facts_of, sends_of, spec, token

from reckon.model import events as E
from reckon.model import names
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig
from reckon.model.controller import Controller
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobState
from reckon.model.state import replay, restore, snapshot
from reckon.model.nodes import NodeState

FIRST = "1" * 32
SECOND = "2" * 32


class World:
    """A controller and a log; joins and messages by hand."""

    def __init__(self) -> None:
        self.controller = Controller()
        self.log: list[F.Fact] = []
        self.tokens = 0

    def handle(self, event: E.ControllerEvent) -> list[E.Command]:
        commands = self.controller.handle(event)
        self.log.extend(facts_of(commands))
        return commands

    def join(self, conn: int, identity: str | None, *, name: str = "node1", slots: int = 2, running: int = 0,
             version: int = M.PROTOCOL_VERSION, cluster: str | None = None) -> list[E.Command]:
        self.tokens += 1
        return self.handle(E.AgentJoined(conn=conn, join=M.Join(agent=name, slots=slots, version=version,
                                                               running=running, identity=identity,
                                                               cluster=cluster),
                                         token=token(self.tokens), now=float(self.tokens)))

    def submit_and_place(self, count: int, agent: str = "node1") -> list[str]:
        ids = []
        for _ in range(count):
            [fact] = [f for f in facts_of(self.handle(E.SubmitJob(spec=spec(), now=1.0)))
                      if isinstance(f, F.JobSubmitted)]
            ids.append(fact.job)
            self.handle(E.DispatchProposed(job=fact.job, agent=agent, now=1.0))
        return ids


def refusal(commands: list[E.Command], conn: int) -> M.Error:
    """The one Error sent on ``conn``, which must also be closed."""
    [error] = [c.message for c in commands if isinstance(c, E.Send) and c.conn == conn]
    assert isinstance(error, M.Error) and error.fatal
    assert any(isinstance(c, E.Close) and c.conn == conn for c in commands)
    return error


def test_another_identity_is_refused_while_the_holder_is_connected() -> None:
    w = World()
    w.join(1, FIRST)
    jobs = w.submit_and_place(2)
    before_log, before_digest = list(w.log), w.controller.state.digest()

    commands = w.join(2, SECOND)

    error = refusal(commands, 2)
    assert error.reason == "agent name node1 is held by another agent" and error.permanent
    assert facts_of(commands) == [] and w.log == before_log  # no fact, nothing requeued
    assert w.controller.state.digest() == before_digest
    assert [c for c in commands if isinstance(c, E.Close) and c.conn == 1] == []  # the holder stays
    session = w.controller.sessions["node1"]
    assert (session.conn, session.identity) == (1, FIRST)
    assert all(w.controller.state.jobs[j].agent == "node1" and w.controller.state.jobs[j].attempt == 1 for j in jobs)
    assert w.controller.node_state("node1") == NodeState.BUSY
    # The refused connection is not the agent's: what arrives on it counts for nothing.
    later = w.handle(E.MessageFromAgent(conn=2, message=M.Heartbeat(running=0, digest=0, seen_seq=0), now=9.0))
    assert later == [] and w.controller.sessions["node1"].conn == 1


def test_the_refusal_repeats_without_writing_anything() -> None:
    """Bug 1: every duplicate join wrote a fact and requeued the name's jobs."""
    w = World()
    w.join(1, FIRST)
    w.submit_and_place(3)
    size = len(w.log)
    for conn in range(2, 50):
        assert refusal(w.join(conn, SECOND), conn).permanent
    assert len(w.log) == size
    assert w.controller.sessions["node1"].conn == 1


def test_the_same_identity_on_a_new_connection_supersedes_the_old_one() -> None:
    w = World()
    w.join(1, FIRST)
    commands = w.join(2, FIRST)
    assert any(isinstance(c, E.Close) and c.conn == 1 for c in commands)
    assert not any(isinstance(s, M.Error) for s in sends_of(commands))
    assert w.controller.sessions["node1"].conn == 2
    assert facts_of(commands) == []  # the same agent again: nothing durable to say


def test_a_stale_join_does_not_supersede_a_newer_connection() -> None:
    """A Join read late from a connection accepted before the agent's latest one."""
    w = World()
    w.join(5, FIRST)
    w.submit_and_place(1)
    commands = w.join(3, FIRST)  # connection 3 was accepted before 5
    error = refusal(commands, 3)
    assert "stale join" in error.reason and not error.permanent
    assert not any(isinstance(c, E.Close) and c.conn == 5 for c in commands)
    assert w.controller.sessions["node1"].conn == 5 and facts_of(commands) == []
    # The same holds for agents without an identity, and after the newer connection closed.
    w.handle(E.ConnectionClosed(conn=5, now=9.0))
    assert "stale join" in refusal(w.join(4, FIRST), 4).reason
    w2 = World()
    w2.join(7, None, version=2)
    assert "stale join" in refusal(w2.join(6, None, version=2), 6).reason


def test_a_disconnected_holder_with_nothing_placed_hands_the_name_over() -> None:
    """A wiped state directory or a replaced machine: nothing can run twice."""
    w = World()
    w.join(1, FIRST)
    [job] = w.submit_and_place(1)
    w.handle(E.MessageFromAgent(conn=1, message=M.Finished(job=job, attempt=1, exit_code=0, signal=None,
                                                           finished_at=2.0), now=2.0))
    w.handle(E.ConnectionClosed(conn=1, now=3.0))

    commands = w.join(2, SECOND)

    assert not any(isinstance(s, M.Error) for s in sends_of(commands))
    assert facts_of(commands) == [F.AgentRegistered(agent="node1", slots=2, identity=SECOND)]
    assert w.controller.state.agents["node1"].identity == SECOND
    # ... and now the first one is the other identity.
    assert refusal(w.join(3, FIRST), 3).reason == "agent name node1 is held by another agent"


def test_a_disconnected_holder_with_jobs_placed_keeps_the_name_until_forgotten() -> None:
    w = World()
    w.join(1, FIRST)
    jobs = w.submit_and_place(2)
    w.handle(E.ConnectionClosed(conn=1, now=3.0))
    size = len(w.log)

    error = refusal(w.join(2, SECOND), 2)
    assert error.permanent and error.reason.startswith("agent name node1 is held by another agent")
    assert "2 unfinished job(s)" in error.reason and "reckon forget node1" in error.reason
    assert len(w.log) == size

    # The operator declares the old machine gone: its jobs are requeued, the name released.
    commands = w.handle(E.ForgetAgent(agent="node1", now=4.0))
    assert facts_of(commands) == [
        *(F.JobRequeued(job=j, attempt=1, reason="agent forgotten by the operator", requeued_at=4.0)
          for j in jobs),
        F.AgentForgotten(agent="node1"),
    ]
    assert "node1" not in w.controller.state.agents
    assert all(w.controller.state.jobs[j].state is JobState.PENDING for j in jobs)
    commands = w.join(3, SECOND)
    assert not any(isinstance(s, M.Error) for s in sends_of(commands))
    assert w.controller.state.agents["node1"].identity == SECOND
    assert_replay_and_snapshot_agree(w)


def test_forget_refuses_a_connected_or_unknown_agent_and_changes_nothing() -> None:
    w = World()
    w.join(1, FIRST)
    w.submit_and_place(1)
    digest = w.controller.state.digest()
    with pytest.raises(LocalProtocolError, match="agent node1 is connected: stop it before forgetting it"):
        w.handle(E.ForgetAgent(agent="node1", now=2.0))
    with pytest.raises(LocalProtocolError, match="unknown agent 'nobody'"):
        w.handle(E.ForgetAgent(agent="nobody", now=2.0))
    assert w.controller.state.digest() == digest


def test_forget_confirms_a_requested_cancel_instead_of_requeueing() -> None:
    w = World()
    w.join(1, FIRST)
    [job] = w.submit_and_place(1)
    w.handle(E.CancelJob(job=job, now=2.0))
    w.handle(E.ConnectionClosed(conn=1, now=3.0))
    commands = w.handle(E.ForgetAgent(agent="node1", now=4.0))
    assert facts_of(commands) == [F.JobCancelConfirmed(job=job, attempt=1, confirmed_at=4.0),
                                  F.AgentForgotten(agent="node1")]
    assert w.controller.state.jobs[job].state is JobState.CANCELLED


def test_agents_without_an_identity_keep_the_old_rules() -> None:
    """Versions 1 and 2 have no identity: the newest connection wins, as before."""
    w = World()
    w.join(1, None, version=2)
    commands = w.join(2, None, version=1)
    assert any(isinstance(c, E.Close) and c.conn == 1 for c in commands)
    assert w.controller.sessions["node1"].conn == 2
    # A name bound to an identity keeps its binding when an agent without one joins under it.
    w.join(3, FIRST)
    w.handle(E.ConnectionClosed(conn=3, now=5.0))
    w.join(4, None, slots=5, version=2)
    assert w.controller.state.agents["node1"].identity == FIRST


def test_the_binding_survives_replay_and_snapshot() -> None:
    w = World()
    w.join(1, FIRST)
    w.submit_and_place(1)
    assert_replay_and_snapshot_agree(w)
    for rebuilt in (Controller.from_log(w.log), Controller.from_log([], snapshot=snapshot(w.controller.state))):
        assert rebuilt.state.agents["node1"].identity == FIRST
        # After a controller restart the holder is disconnected with a job placed: still refused.
        again = World()
        again.controller = rebuilt
        error = refusal(again.join(1, SECOND), 1)
        assert error.permanent and "held by another agent" in error.reason
        assert again.log == []


def test_a_version_1_snapshot_restores_without_identities() -> None:
    w = World()
    w.join(1, None, version=2)
    data = snapshot(w.controller.state)
    data["v"] = 1
    data["agents"] = [row[:3] for row in data["agents"]]
    assert restore(data).agents["node1"].identity is None


def test_the_agent_sends_its_identity_and_old_peers_never_see_the_new_fields() -> None:
    agent = Agent(AgentConfig(name="node1", slots=1, identity=FIRST))
    [send] = agent.handle(E.Connected(now=1.0))
    assert isinstance(send, E.Send) and send.message.identity == FIRST
    assert M.to_wire(send.message)["identity"] == FIRST
    assert "identity" not in M.to_wire(M.Join(agent="node1", slots=1, version=2))
    assert "permanent" not in M.to_wire(M.Error(seq=0, reason="x"))
    assert M.to_wire(M.Error(seq=0, reason="x", permanent=True))["permanent"] is True
    with pytest.raises(ValueError, match="identity must be 16 to 64 lowercase hex digits"):
        AgentConfig(name="node1", slots=1, identity="node1")
    with pytest.raises(ValueError, match="a permanent error is also fatal"):
        M.Error(seq=0, reason="x", fatal=False, permanent=True)


def test_an_unsupported_version_is_refused_permanently_when_the_peer_can_tell() -> None:
    w = World()
    error = refusal(w.join(1, None, version=9), 1)
    assert "protocol version 9 not supported" in error.reason and error.permanent
    assert "permanent" not in M.to_wire(refusal(w.join(2, None, version=0), 2))  # a peer before version 3
    assert w.log == []


def assert_replay_and_snapshot_agree(w: World) -> None:
    stored = [F.decode(F.encode(f)) for f in w.log]
    assert stored == w.log
    assert replay(stored).digest() == w.controller.state.digest()
    assert restore(snapshot(w.controller.state)).digest() == w.controller.state.digest()


def test_the_name_handover_invariant_bites(monkeypatch) -> None:
    """INV-NAME-HANDOVER notices a name passing to another identity with jobs placed (bug 1 re-injected)."""
    from types import SimpleNamespace

    from tests.model.test_stateful import ReckonMachine

    def check(log: list[F.Fact]) -> None:
        ReckonMachine.inv_name_handover(SimpleNamespace(log=log))

    w = World()
    w.join(1, FIRST)
    w.submit_and_place(1)
    w.handle(E.ConnectionClosed(conn=1, now=3.0))
    check(w.log)  # the real controller: refused, the log is fine
    w.join(2, SECOND)
    check(w.log)
    monkeypatch.setattr(names, "name_refusal", lambda ctrl, join, session, info: None)
    w.join(3, SECOND)
    with pytest.raises(AssertionError, match="INV-NAME-HANDOVER: node1 passed from 1+ to 2+ with \\['1'\\] placed"):
        check(w.log)


def _restarted_with_pending_job(w: World) -> None:
    """node1 (FIRST) joined, a job is PENDING, the controller restarts with its start gate closed."""
    w.join(1, FIRST)
    w.handle(E.SubmitJob(spec=spec(), now=1.0))
    w.handle(E.ConnectionClosed(conn=1, now=2.0))
    w.controller = Controller.from_log([F.decode(F.encode(f)) for f in w.log])
    state = w.controller.state  # the id mark file as the controller left it
    w.handle(E.ControllerStarted(now=10.0, grace=15.0, id_mark=E.IdMark(cluster=state.cluster, upto=state.id_mark)))
    assert w.controller.start_gate is not None and not w.controller.start_gate.restored


def test_a_name_is_not_handed_over_while_its_holder_may_still_rejoin_after_a_start() -> None:
    """Found by the daemon simulation: after a rollback the recovered state called a job PENDING that
    node1 had run; a clone with node1's name joined first, was handed the name, and ran the job
    again.  During the start grace a holder that has not rejoined keeps its name."""
    w = World()
    _restarted_with_pending_job(w)
    before = list(w.log)

    commands = w.join(5, SECOND)

    error = refusal(commands, 5)
    assert "has not rejoined since the controller started" in error.reason and not error.permanent
    assert facts_of(commands) == [] and w.log == before
    w.join(6, FIRST)  # the holder is back: it keeps its name
    assert w.controller.sessions["node1"].connected and w.controller.sessions["node1"].identity == FIRST
    assert refusal(w.join(7, SECOND), 7).permanent  # and now the clone is refused for good


def test_after_the_start_grace_a_name_whose_holder_stayed_away_is_handed_over() -> None:
    w = World()
    _restarted_with_pending_job(w)
    w.handle(E.StartGraceEnded(now=30.0))
    assert w.controller.start_gate is None

    commands = w.join(5, SECOND)

    assert facts_of(commands) == [F.AgentRegistered(agent="node1", slots=2, identity=SECOND)]


CLUSTER = "c0ffee00c0ffee00"


def _started_from_a_copy_that_predates_node1(w: World, *, id_mark: int | None = None) -> None:
    """The controller's state (history CLUSTER) has a PENDING job and has never seen node1: a copy
    taken before node1's first join.  It restarts with its start gate closed."""
    w.log.append(F.ClusterCreated(cluster=CLUSTER))
    w.controller = Controller.from_log(list(w.log))
    w.handle(E.SubmitJob(spec=spec(), now=1.0))
    w.controller = Controller.from_log([F.decode(F.encode(f)) for f in w.log])
    mark = E.IdMark(cluster=CLUSTER, upto=id_mark) if id_mark is not None else None
    w.handle(E.ControllerStarted(now=10.0, grace=15.0, id_mark=mark))
    assert w.controller.start_gate is not None


def test_during_the_start_gate_an_unknown_name_goes_only_to_an_agent_of_this_cluster() -> None:
    """Found by the daemon simulation (issue #9, the case left open last time): a copy of the state
    taken before node1's first join knows no holder for "node1".  A clone of node1 with a fresh state
    directory joined first after the restore and took the name; node1, which had run the copy's
    PENDING job, was refused, and the job ran again on the clone.  While the gate is closed the name
    goes only to an agent that has joined this cluster before: the newcomer waits (not for good)."""
    w = World()
    _started_from_a_copy_that_predates_node1(w)
    before = list(w.log)

    commands = w.join(5, SECOND)  # the clone: a fresh state directory, no cluster yet

    error = refusal(commands, 5)
    assert "is new to this controller" in error.reason and not error.permanent
    assert facts_of(commands) == [] and w.log == before
    # An agent that joined another history is a newcomer here too.
    assert not refusal(w.join(6, SECOND, cluster="0" * 16), 6).permanent
    # node1 comes back: it has joined this cluster before, so the name is its.
    w.join(7, FIRST, cluster=CLUSTER)
    assert w.controller.sessions["node1"].connected and w.controller.sessions["node1"].identity == FIRST
    assert refusal(w.join(8, SECOND), 8).permanent  # and the clone is now refused for good


def test_after_the_start_grace_a_newcomer_takes_a_free_name() -> None:
    w = World()
    _started_from_a_copy_that_predates_node1(w)
    w.handle(E.StartGraceEnded(now=30.0))
    assert w.controller.start_gate is None

    commands = w.join(5, SECOND)

    assert facts_of(commands) == [F.AgentRegistered(agent="node1", slots=2, identity=SECOND)]


def test_an_agent_joined_while_the_gate_is_closed_gets_a_round_with_nothing_placed() -> None:
    """So that its recent outcomes (perhaps of jobs the restored copy calls PENDING) are reported as
    extras and adopted before anything is dispatched."""
    w = World()
    _started_from_a_copy_that_predates_node1(w)

    commands = w.join(5, FIRST, cluster=CLUSTER)

    [welcome] = sends_of(commands, M.Welcome)
    assert welcome.token is not None and welcome.query_pages == 1
    assert w.controller.sessions["node1"].round is not None


def test_another_process_with_the_holders_identity_waits_while_the_holder_is_connected() -> None:
    """Found by the review of issue #9: a VM cloned with its agent state directory runs a second agent
    with the same identity; each join superseded the other's connection and requeued its jobs (bug 1
    again, 265 runs of a job in 20 s).  Now a join of the same identity from another process (its Join's
    instance) is refused for now while the holder's connection is open; nothing changes.  The same
    process reconnecting still supersedes its old connection, and so do agents without an instance."""
    w = World()
    w.handle(E.AgentJoined(conn=1, join=M.Join(agent="node1", slots=2, version=M.PROTOCOL_VERSION, identity=FIRST,
                                               instance="a" * 32), token=token(90), now=1.0))
    w.submit_and_place(1)
    before = list(w.log)

    commands = w.handle(E.AgentJoined(conn=2, join=M.Join(agent="node1", slots=2, version=M.PROTOCOL_VERSION,
                                                          identity=FIRST, instance="b" * 32),
                                      token=token(91), now=2.0))

    error = refusal(commands, 2)
    assert "another agent process with the same identity is connected" in error.reason and not error.permanent
    assert facts_of(commands) == [] and w.log == before and w.controller.sessions["node1"].conn == 1
    # The holder's own process on a new connection (a reconnect) supersedes the old one.
    commands = w.handle(E.AgentJoined(conn=3, join=M.Join(agent="node1", slots=2, version=M.PROTOCOL_VERSION,
                                                          identity=FIRST, instance="a" * 32),
                                      token=token(92), now=3.0))
    assert w.controller.sessions["node1"].conn == 3
    # Once the holder's connection is gone, another process of the identity joins (a restart).
    w.handle(E.ConnectionClosed(conn=3, now=4.0))
    w.handle(E.AgentJoined(conn=4, join=M.Join(agent="node1", slots=2, version=M.PROTOCOL_VERSION, identity=FIRST,
                                               instance="b" * 32), token=token(93), now=5.0))
    assert w.controller.sessions["node1"].conn == 4 and w.controller.sessions["node1"].instance == "b" * 32
