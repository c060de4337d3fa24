"""Join generations: an older copy of an agent's own state directory is refused (issue #9, a copy older than the last join).

A state directory restored from an older backup, or a VM cloned before the
agent joined again, is the same identity on the same machine: the machine
check (daemon/store/machine.py) cannot see it.  Each accepted join of an
identity gets the next generation (``JoinGenerationIssued``), the agent stores
it before it sends anything and presents it in its next Join; a Join
presenting a generation older than the newest one the holder has shown it
stored is refused for good, and nothing changes.  An agent that crashed after
the controller committed G+1 but before it stored it presents G, and is the
real agent.

Invariant: INV-NAME-HANDOVER (docs/invariants.md: a stale copy never takes the holder's name or jobs).
"""

from __future__ import annotations

import pytest
from tests.model.harness import facts_of, token

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig
from reckon.model.controller import Controller
from reckon.model.state import replay, restore, snapshot

from tests.model.test_identity import FIRST, SECOND, World, refusal

STALE = "this agent's state directory is an older copy of its own"


def join(w: World, conn: int, generation: int | None, identity: str | None = FIRST, **kw) -> list[E.Command]:
    w.tokens += 1
    return w.handle(E.AgentJoined(conn=conn, join=M.Join(agent="node1", slots=2, version=M.PROTOCOL_VERSION,
                                                         identity=identity, generation=generation, **kw),
                                  token=token(w.tokens), now=float(w.tokens)))


def welcome(commands: list[E.Command], conn: int) -> M.Welcome:
    [msg] = [c.message for c in commands if isinstance(c, E.Send) and c.conn == conn
             and isinstance(c.message, M.Welcome)]
    return msg


def heartbeat(w: World, conn: int) -> None:
    """Anything the agent sends after its Welcome shows it stored that Welcome's generation."""
    w.handle(E.MessageFromAgent(conn=conn, message=M.Heartbeat(running=0, digest=0, seen_seq=1), now=50.0))


def close(w: World, conn: int) -> None:
    w.handle(E.ConnectionClosed(conn=conn, now=60.0))


def session(w: World, conn: int, generation: int | None) -> None:
    """One whole connection of the holder: it joins presenting ``generation``, shows it stored the
    one its welcome carried (a heartbeat), and goes away."""
    join(w, conn, generation)
    heartbeat(w, conn)
    close(w, conn)


def generations(w: World) -> list[tuple[int, int]]:
    return [(f.generation, f.confirmed) for f in w.log if isinstance(f, F.JoinGenerationIssued)]


def test_each_accepted_join_gets_the_next_generation_durably_before_its_welcome() -> None:
    w = World()
    commands = join(w, 1, 0)
    kinds = [type(c).__name__ for c in commands]
    assert kinds.index("Append") < kinds.index("Send")  # the fact is committed before the Welcome leaves
    assert welcome(commands, 1).generation == 1
    heartbeat(w, 1)
    close(w, 1)
    assert welcome(join(w, 2, 1), 2).generation == 2
    assert generations(w) == [(1, 0), (2, 1)]
    assert (w.controller.state.agents["node1"].generation, w.controller.state.agents["node1"].confirmed) == (2, 1)


def test_a_copy_older_than_what_the_agent_has_shown_is_refused_for_good_and_changes_nothing() -> None:
    w = World()
    join(w, 1, 0)  # generation 1; a backup of the directory taken now holds 1
    heartbeat(w, 1)
    close(w, 1)
    join(w, 2, 1)  # the agent rejoins: generation 2, confirmed 1
    heartbeat(w, 2)  # ... and shows it stored 2
    close(w, 2)  # away
    before_log, before_digest = list(w.log), w.controller.state.digest()

    error = refusal(join(w, 3, 1), 3)  # the restored backup presents 1 < 2
    assert error.permanent
    assert error.reason == ("agent name node1: this agent's state directory is an older copy of its own (it "
                            "presents join generation 1; the agent has since stored 2): a restored backup or a "
                            "cloned machine, which would run the agent's jobs again; start it with an empty "
                            "--state-dir and its own --name (or, if it is the agent's only copy, restored on purpose, "
                            "free the name with `reckon forget node1` first: its jobs are requeued)")
    assert w.log == before_log and w.controller.state.digest() == before_digest
    assert welcome(join(w, 4, 2), 4).generation == 3  # the real agent is still welcome


def test_an_agent_that_crashed_before_storing_its_generation_is_the_real_one() -> None:
    """The controller committed generation 2, the agent died before it stored it (it sent nothing)."""
    w = World()
    session(w, 1, 0)
    join(w, 2, 1)  # generation 2 committed and sent...
    close(w, 2)  # ... and the agent crashed before storing it: it shows nothing on this connection
    assert welcome(join(w, 3, 1), 3).generation == 3  # presents 1 again: accepted


def test_after_a_controller_restart_the_stored_confirmation_still_refuses_an_older_copy() -> None:
    """What the holder showed on a connection is volatile; what it presented in a Join is in the log."""
    w = World()
    session(w, 1, 0)
    session(w, 2, 1)
    join(w, 3, 2)  # confirmed 2 in the log
    close(w, 3)
    restarted = World()
    restarted.controller = Controller.from_log(w.log, w.controller.config)
    restarted.log = list(w.log)
    assert refusal(join(restarted, 4, 1), 4).permanent  # 1 < 2: an older copy
    assert welcome(join(restarted, 5, 2), 5).generation == 4  # it shows nothing more of 3 since the restart


def test_older_agents_and_other_identities_are_not_checked() -> None:
    w = World()
    session(w, 1, 0)
    session(w, 2, 1)
    # An agent without generations (an older release): no check, no generation.
    assert welcome(join(w, 3, None), 3).generation is None
    close(w, 3)
    # Another identity taking the name over (the holder is away with nothing placed): its generations start afresh.
    assert welcome(join(w, 4, 0, identity=SECOND), 4).generation == 1
    assert (w.controller.state.agents["node1"].generation, w.controller.state.agents["node1"].confirmed) == (1, 0)


def test_a_controller_state_behind_the_agent_issues_above_what_the_agent_presents() -> None:
    """A restored (older) controller state: the agent presents more than the state knows; no refusal."""
    w = World()
    commands = join(w, 1, 7)
    assert welcome(commands, 1).generation == 8
    assert generations(w) == [(8, 7)]


def test_the_generations_survive_replay_and_snapshot() -> None:
    w = World()
    session(w, 1, 0)
    join(w, 2, 1)
    state = replay(w.log)
    assert (state.agents["node1"].generation, state.agents["node1"].confirmed) == (2, 1)
    assert restore(snapshot(state)) == state
    old = snapshot(state)
    old["v"] = 3
    old["agents"] = [row[:5] for row in old["agents"]]
    assert (restore(old).agents["node1"].generation, restore(old).agents["node1"].confirmed) == (0, 0)


def test_the_fact_refuses_going_back() -> None:
    w = World()
    join(w, 1, 0)
    with pytest.raises(Exception, match="join generation is already 1"):
        from reckon.model.state import apply
        apply(w.controller.state, F.JoinGenerationIssued(agent="node1", generation=1, confirmed=0))
    with pytest.raises(ValueError, match="confirmed must be <= 1"):
        F.JoinGenerationIssued(agent="node1", generation=2, confirmed=2)


def test_the_agent_stores_its_generation_before_it_sends_anything_and_presents_it() -> None:
    agent = Agent(AgentConfig(name="node1", slots=1, identity=FIRST), generation=4)
    [join_cmd] = agent.handle(E.Connected(now=0.0))
    assert join_cmd.message.generation == 4
    commands = agent.handle(E.MessageFromController(
        message=M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, generation=5), now=1.0))
    assert commands[0] == E.StoreGeneration(generation=5)  # before any Send it comes with
    assert agent.generation == 5
    with pytest.raises(Exception, match="not allowed while operating"):  # a second Welcome changes nothing
        agent.handle(E.MessageFromController(
            message=M.Welcome(seq=2, version=M.PROTOCOL_VERSION, token=None, generation=6), now=1.0))
    assert agent.generation == 5
    # An agent without an identity presents none (the controller could not tie it to one), nor one
    # that keeps no generations (None: as before version 4; the model-level machines run those).
    for other in (Agent(AgentConfig(name="node1", slots=1), generation=0), Agent(AgentConfig(name="node1", slots=1,
                                                                                             identity=FIRST))):
        [join_cmd] = other.handle(E.Connected(now=0.0))
        assert join_cmd.message.generation is None
        commands = other.handle(E.MessageFromController(
            message=M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, generation=5), now=1.0))
        assert not [c for c in commands if isinstance(c, E.StoreGeneration)]


def test_the_new_fields_are_left_out_for_older_peers() -> None:
    assert "generation" not in M.to_wire(M.Welcome(seq=1, version=3, token=None))
    assert "generation" not in M.to_wire(M.Join(agent="a", slots=1, version=3))
    assert M.to_wire(M.Welcome(seq=1, version=4, token=None, generation=2))["generation"] == 2
    with pytest.raises(ValueError, match="generation must be >= 0"):
        M.Join(agent="a", slots=1, version=4, generation=-1)
