"""The users' invariants bite (issue #20): break the model on purpose, the stateful machine names it.

Each test monkeypatches one bug into the model and runs ``test_stateful.ReckonMachine`` with the
derandomized settings of ``test_checks_bite``: the run must fail naming the invariant.  (The
controller's own check of the limit, against a stale proposal, is shown to bite in
``test_permissions.test_the_controller_refuses_a_proposal_past_the_limit``: the machine's late
proposals rarely reach it.)
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import INITIALIZE_RULE_MARKER, initialize, run_state_machine_as_test

from reckon.model import controller as C
from reckon.model import events as E
from reckon.model import job_ops as JO
from reckon.model import permissions as P
from reckon.model import scheduler as SCH
from reckon.model.errors import PermissionDenied

from tests.model.test_checks_bite import BITE_SETTINGS, assert_bites
from tests.model.test_stateful import ReckonMachine


def test_bite_a_permission_never_checked(monkeypatch):
    """The handlers ask, the rule always says yes: another user's cancel or hold goes through."""
    monkeypatch.setattr(P, "check", lambda caller, action, owner, **kw: None)  # require asks it
    monkeypatch.setattr(JO, "check", lambda caller, action, owner, **kw: None)  # the array cancel's own import
    assert_bites("INV-PERMISSION")


def test_bite_a_refusal_after_a_change(monkeypatch):
    """A hold that changes the job without a fact, then is refused: the refusal leaves a change behind."""
    on_hold = JO.on_hold

    def refused_after_a_change(tx, ev):
        try:
            on_hold(tx, ev)
        except PermissionDenied:
            tx.state.jobs[ev.job].held = True  # as if marked before the check, not through tx.apply
            raise

    monkeypatch.setitem(C.HANDLERS, E.HoldJob, refused_after_a_change)
    assert_bites("INV-PERMISSION")


def test_bite_the_owner_taken_from_the_wrong_place(monkeypatch):
    """A submit that records no owner (the caller dropped on the way): the job is nobody's."""
    monkeypatch.setattr(JO, "owner_of", lambda caller: None)
    assert_bites("INV-OWNER")


class LimitedMachine(ReckonMachine):
    """The machine with a per-user limit always set, so a bite of it is met in seconds."""

    @initialize(**{**getattr(ReckonMachine.setup, INITIALIZE_RULE_MARKER).arguments,
                   "max_running": st.just(1), "max_cpus": st.sampled_from([None, 2])})
    def setup(self, **cluster):
        getattr(ReckonMachine.setup, INITIALIZE_RULE_MARKER).function(self, **cluster)


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_the_user_limit_ignored(monkeypatch):
    """Neither the scheduler nor the controller counts the owner's running jobs."""
    monkeypatch.setattr(SCH.UserLimits, "refusal", lambda self, user, running, cpus, slots: None)
    monkeypatch.setattr(JO, "user_limit_refusal", lambda state, limits, job: None)
    with pytest.raises(AssertionError, match="INV-USER-LIMIT"):
        run_state_machine_as_test(LimitedMachine, settings=BITE_SETTINGS)

