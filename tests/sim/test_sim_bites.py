"""Bites: the simulation catches issue #9's bugs when they are put back.

Each test re-injects one fixed bug into the real daemon or model code (with
``monkeypatch``, so the fix stays in the tree) and runs that bug's directed
scenario from ``test_sim.py``: the simulation must report the bug's own
invariant (``BugReproduced``), not pass and not fail otherwise.
"""

from __future__ import annotations

import pytest

from tests.sim import test_sim as T
from reckon.daemon.agent.daemon import AgentDaemon
from reckon.model import controller as controller_model
from reckon.model import reports as reports_model
from reckon.model import events as E
from reckon.model import names
from reckon.model import state as state_model
from reckon.model.agent import Agent


class _NoLaunchTracking(dict):
    """The agent daemon before bug 2's fix: it keeps no note of launches under way,
    so a kill that overtakes a launch goes to a runner that does not list the job yet."""

    def __setitem__(self, key, value) -> None:
        pass


@pytest.mark.long  # about 20 s: `make test-long`
def test_bite_bug1_names_are_not_bound_to_identities(monkeypatch):
    monkeypatch.setattr(names, "name_refusal", lambda ctrl, join, session, info: None)
    with pytest.raises(T.BugReproduced, match="INV-SIM-RUN-AT-MOST-ONCE"):
        T.test_bug1_a_duplicate_name_agent_does_not_run_jobs_twice()


def test_bite_bug2_a_kill_during_the_launch_is_dropped(monkeypatch):
    init = AgentDaemon.__init__

    def without_launch_tracking(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self._launching = _NoLaunchTracking()

    monkeypatch.setattr(AgentDaemon, "__init__", without_launch_tracking)
    with pytest.raises(T.BugReproduced, match="INV-SIM-CANCEL-STOPS-PROCESS"):
        T.test_bug2_a_cancel_during_the_launch_stops_the_process()


def test_bite_bug3_reports_are_matched_by_job_and_attempt_alone(monkeypatch):
    monkeypatch.setattr(reports_model, "same_submission", lambda ours, theirs: True)
    monkeypatch.setattr(Agent, "_other_submission", staticmethod(lambda held, msg: None))
    with pytest.raises(T.BugReproduced, match="INV-TRUE-OUTCOME"):
        T.test_bug3_after_a_rollback_no_job_gets_another_submissions_outcome()


def test_bite_bug4_a_round_deadline_does_not_count_as_hearing_from_the_agent(monkeypatch):
    on_deadline = controller_model.HANDLERS[E.RoundDeadlineExpired]

    def silence_from_the_join(tx, ev) -> None:
        session = tx.sessions.get(ev.agent)
        before = session.last_heard if session is not None else None
        on_deadline(tx, ev)
        if session is not None:
            session.last_heard = before

    monkeypatch.setitem(controller_model.HANDLERS, E.RoundDeadlineExpired, silence_from_the_join)
    with pytest.raises(T.BugReproduced, match="INV-SIM-RUN-AT-MOST-ONCE"):
        T.test_bug4_lost_after_counts_from_the_round_deadline_not_from_the_join()


def test_bite_a_state_directory_is_not_checked_against_its_machine(monkeypatch):
    """Before the machine check: a copy of a1's state directory on another machine starts while a1 is away."""
    from reckon.daemon.store import agent as agent_store
    from reckon.daemon.store.machine import MachineId, decide

    def as_if_no_machine_id(**kwargs):
        return decide(**{**kwargs, "machine": MachineId(value=None, source="(the bite: no check)")})

    monkeypatch.setattr(agent_store, "decide", as_if_no_machine_id)
    with pytest.raises(T.BugReproduced, match="INV-SIM-RUN-AT-MOST-ONCE"):
        T.test_a_copy_of_the_agents_state_directory_on_another_machine_is_refused_while_the_original_is_away()


def test_bite_join_generations_are_not_checked(monkeypatch):
    """Before join generations: an older copy of a1's state directory on a1's machine joins while a1 is away."""
    monkeypatch.setattr(names, "generation_refusal", lambda join, session, info: None)
    with pytest.raises(T.BugReproduced, match="INV-SIM-RUN-AT-MOST-ONCE"):
        T.test_an_older_copy_of_the_agents_state_directory_on_its_own_machine_is_refused()


def test_bite_a_derived_index_that_drifts_stops_the_run(monkeypatch):
    """INV-STATE-VALID in the simulation: ``Controller.handle`` runs ``validate_state`` after every
    event (tests/sim/patches.py), so a release that keeps the agent's slots stops the controller
    at the event that did it (ModelCorrupted), instead of a run on a state its log does not describe."""
    release = state_model._release

    def keeps_the_slots(state, job):
        used = state.agents[job.agent].used
        agent = release(state, job)
        state.agents[agent].used = used
        return agent

    monkeypatch.setattr(state_model, "_release", keeps_the_slots)
    found = T.S.run(T.Scenario(seed=1, steps=(T.Submit(3.0, 0), T.Wait(10.0)),
                               reset_in_handshake=T.RESETS_IN_HANDSHAKE))
    with pytest.raises(T.BugReproduced, match="ModelCorrupted.*agent a1 holds"):
        T.holds(found, bug_id="INV-SIM-NO-DAEMON-DEATH", detail="ModelCorrupted")


def test_bite_a_gpu_given_twice(monkeypatch):
    """Issue #20: the dispatch picks GPUs without looking at what is held, and apply no longer
    refuses a held one: the simulation's INV-GPU-ONCE sees a GPU of one agent given twice."""
    from reckon.model import job_ops

    monkeypatch.setattr(state_model, "_check_placement", lambda *args, **kwargs: None)
    monkeypatch.setattr(job_ops, "lowest_free", lambda gpus, held, count: tuple(gpus[:count]))
    with pytest.raises(T.BugReproduced, match="INV-GPU-ONCE"):
        T.test_jobs_asking_gpus_memory_and_gres_share_the_agents_without_overcommit(bug_id="INV-GPU-ONCE")
