"""Issue #9 gap 2: the start's dispatch hold is a model gate (INV-START-HOLD)."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model import startup
from reckon.model.controller import Controller
from reckon.model.errors import LocalProtocolError
from reckon.model.scheduler import DispatchHold

from tests.model.harness import Harness, notes_of, sends_of


def _restarted(h: Harness, grace: float = 15.0) -> list[E.Command]:
    """The controller crashes and recovers from its log, then starts (as the daemon does)."""
    h.crash_controller()
    state = h.controller.state  # the id mark file as the controller left it (no file: see test_job_ids)
    mark = E.IdMark(cluster=state.cluster, upto=state.id_mark) if state.id_mark else None
    return h.controller_handle(E.ControllerStarted(now=h.now, grace=grace, id_mark=mark))


def _held(cmds: list[E.Command]) -> list[bool]:
    return [n.held for n in notes_of(cmds) if isinstance(n, DispatchHold)]


def _world(agents=("a1", "a2")) -> tuple[Harness, list[str]]:
    h = Harness(agents)
    for name in agents:
        h.join(name)
    return h, h.submit(2)


def test_a_start_with_pending_jobs_holds_dispatch_until_every_known_agent_rejoined():
    h, jobs = _world()
    cmds = _restarted(h)
    assert _held(cmds) == [True] and h.controller.start_gate is not None
    assert [c for c in cmds if isinstance(c, E.StartGraceTimer)] == [E.StartGraceTimer(deadline=h.now + 15.0)]
    h.join("a1")
    assert h.schedule() == []  # a2 is not back: nothing placed, also when proposed directly
    assert not sends_of(h.controller_handle(E.DispatchProposed(job=jobs[0], agent="a1", now=h.now)), M.Dispatch)
    cmds = h.controller_handle(E.Tick(now=h.now))
    assert h.controller.start_gate is not None
    h.join("a2")
    assert h.controller.start_gate is None
    assert h.schedule()  # now it places


def test_the_grace_ends_the_gate_when_an_agent_stays_away():
    h, jobs = _world()
    _restarted(h, grace=15.0)
    h.join("a1")
    early = h.controller_handle(E.StartGraceEnded(now=h.now + 14.0))
    assert h.controller.start_gate is not None and not _held(early)
    late = h.controller_handle(E.StartGraceEnded(now=h.now + 15.0))
    assert _held(late) == [False] and h.controller.start_gate is None
    assert h.schedule()


def test_no_gate_without_pending_jobs_or_with_no_grace():
    h = Harness(("a1",))
    h.join("a1")
    assert _held(_restarted(h)) == [] and h.controller.start_gate is None
    h2, _ = _world()
    assert _held(_restarted(h2, grace=0.0)) == [] and h2.controller.start_gate is None


def test_replay_never_opens_the_gate_and_a_second_start_is_refused():
    h, _ = _world()
    h.crash_controller()
    assert h.controller.start_gate is None and not h.controller.started  # replay alone: no gate
    h.controller_handle(E.ControllerStarted(now=h.now, grace=15.0))
    with pytest.raises(LocalProtocolError, match="already started"):
        h.controller.handle(E.ControllerStarted(now=h.now, grace=15.0))


def test_a_state_that_knows_no_agent_holds_for_the_whole_grace():
    h = Harness(())
    h.submit(1)
    _restarted(h)
    h.add_agent("a1")
    h.join("a1")
    assert h.controller.start_gate is not None
    h.controller_handle(E.Tick(now=h.now + 15.0))
    assert h.controller.start_gate is None


def test_the_scheduler_view_shows_the_gate():
    h, _ = _world()
    _restarted(h)
    assert h.controller.scheduler_view()[2] is True


def _restored(h: Harness, grace: float = 15.0) -> list[E.Command]:
    """A start from a state older than its id mark (the mark file is a block ahead): a restored copy."""
    h.crash_controller()
    state = h.controller.state
    mark = E.IdMark(cluster=state.cluster, upto=state.id_mark + 1000)
    return h.controller_handle(E.ControllerStarted(now=h.now, grace=grace, id_mark=mark))


def test_a_restored_state_holds_for_the_whole_grace_although_its_known_agents_are_back():
    """Found by the daemon simulation: the copy knew a2 but was taken before a1 first joined; job 1
    ran on a1 after the copy.  When a2 (the only agent the copy knows) rejoined, "every known agent
    has rejoined" opened the gate and job 1 went to a2: it ran twice.  A state known to be restored
    may predate any agent's first join, so only the grace ends its hold."""
    h, jobs = _world()
    cmds = _restored(h)
    assert [n.reason for n in notes_of(cmds) if isinstance(n, DispatchHold)] == [
        "for 15s (the state is older than its id mark)"]
    h.join("a1")
    h.join("a2")
    assert h.controller.start_gate is not None and h.schedule() == []
    h.controller_handle(E.Tick(now=h.now + 15.0))
    assert h.controller.start_gate is None and h.schedule()


def test_a_restored_state_holds_also_when_its_unfinished_jobs_are_all_running():
    """The copy's RUNNING job may have been requeued and run on an agent the copy does not know:
    an "unrecognized" from the agent it was placed on must not send it out again at once."""
    h, jobs = _world(("a1",))
    h.schedule()
    h.pump()
    assert all(h.controller.state.jobs[j].state.name == "RUNNING" for j in jobs)
    assert _held(_restored(h)) == [True]
    h2, _ = _world(("a1",))
    h2.schedule()
    h2.pump()
    assert _held(_restarted(h2)) == []  # a plain restart with nothing PENDING holds nothing


def test_a_log_that_ends_before_the_marks_facts_is_a_restored_copy():
    """An online backup: its ids are in the current block (the mark's ``upto`` equals the state's), but
    the mark file says the controller had recorded facts beyond where the copy's log ends."""
    h, _ = _world()
    h.crash_controller()
    state = h.controller.state
    mark = E.IdMark(cluster=state.cluster, upto=state.id_mark, facts=40)
    cmds = h.controller_handle(E.ControllerStarted(now=h.now, grace=15.0, id_mark=mark, facts=39))
    assert [n.reason for n in notes_of(cmds) if isinstance(n, DispatchHold)] == [
        "for 15s (the state is older than its id mark)"]
    assert [c.message for c in cmds if isinstance(c, E.Warn)] == [
        "controller state is older than its id mark: its log ends at fact 39, but the controller had recorded "
        "facts up to 40 (an online backup restored?); dispatch is held for the whole rejoin grace"]
    for facts in (40, None):  # the log ends where the mark says, or the daemon does not say
        h2, _ = _world()
        h2.crash_controller()
        mark = E.IdMark(cluster=h2.controller.state.cluster, upto=h2.controller.state.id_mark, facts=40)
        cmds = h2.controller_handle(E.ControllerStarted(now=h2.now, grace=15.0, id_mark=mark, facts=facts))
        assert [c for c in cmds if isinstance(c, E.Warn)] == []
        assert h2.controller.start_gate is not None and h2.controller.start_gate.known


def test_an_id_mark_and_a_start_check_their_fact_positions():
    with pytest.raises(ValueError, match="facts must be >= 0"):
        E.IdMark(cluster="c1", upto=1, facts=-1)
    with pytest.raises(ValueError, match="facts must be an integer"):
        E.ControllerStarted(now=1.0, grace=0.0, facts=1.5)


def test_a_mark_that_says_a_restored_copys_hold_lasts_holds_for_the_whole_grace_again():
    """A start on a restored copy raised the mark and grew the log, then stopped before its grace
    ended: its own log no longer looks older, but the mark file's ``hold`` says the hold was not over."""
    h, _ = _world()
    h.crash_controller()
    state = h.controller.state
    mark = E.IdMark(cluster=state.cluster, upto=state.id_mark, facts=40, hold=True)
    cmds = h.controller_handle(E.ControllerStarted(now=h.now, grace=15.0, id_mark=mark, facts=40))
    assert [n.reason for n in notes_of(cmds) if isinstance(n, DispatchHold)] == [
        "for 15s (the state is older than its id mark)"]
    assert startup.holding_restored(h.controller)
    assert [c.message for c in cmds if isinstance(c, E.Warn)] == [
        "the previous start held dispatch for a restored copy of the controller state and stopped before its "
        "rejoin grace ended: dispatch is held for the whole rejoin grace again"]
    with pytest.raises(ValueError, match="hold must be a bool"):
        E.IdMark(cluster="c1", upto=1, hold=1)  # type: ignore[arg-type]


def test_a_state_whose_id_mark_file_is_lost_holds_for_the_whole_grace():
    """No id mark file although the state recorded one: the file was lost, or controller.db* was restored
    onto a new directory (the controller's disk replaced).  That copy may be older than what the agents
    ran, as a restored one is, so it holds for the whole grace (before, it held only until the agents it
    knew were back: tests/sim ..._restored_onto_a_directory_without_its_id_mark_...)."""
    h, _ = _world()
    h.crash_controller()
    cmds = h.controller_handle(E.ControllerStarted(now=h.now, grace=15.0, id_mark=None))
    assert [n.reason for n in notes_of(cmds) if isinstance(n, DispatchHold)] == [
        "for 15s (the state is older than its id mark)"]
    [warning] = [c.message for c in cmds if isinstance(c, E.Warn)]
    assert warning.startswith("no id mark file") and warning.endswith("dispatch is held for the whole rejoin grace")
