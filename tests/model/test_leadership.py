"""model/leadership.py, one scenario at a time (the machine: test_leadership_stateful.py)."""

from __future__ import annotations

import copy

import pytest

from reckon.model import leadership as L
from reckon.model.errors import LocalProtocolError

LEASE = 4.0


def leading(asked_at: float = 10.0) -> L.Leadership:
    model = L.Leadership(L.LeaseConfig(lease=LEASE))
    assert model.handle(L.TakeoverResult(epoch=3, asked_at=asked_at, now=asked_at + 0.5)) == []
    return model


def test_a_takeover_lets_effects_out_until_three_quarters_of_the_lease_after_the_request():
    model = leading(asked_at=10.0)
    assert model.role is L.Role.LEADING and model.epoch == 3
    assert model.may_release(12.99) and not model.may_release(13.0)


def test_a_standby_not_given_the_epoch_stays_standby_and_releases_nothing():
    model = L.Leadership(L.LeaseConfig(lease=LEASE))
    assert model.handle(L.TakeoverResult(epoch=None, asked_at=1.0, now=1.1)) == []
    assert model.role is L.Role.STANDBY and not model.may_release(1.1) and model.next_wakeup() is None


def test_renewals_are_due_a_quarter_lease_after_the_previous_send_one_at_a_time():
    model = leading(asked_at=10.0)
    assert model.next_wakeup() == 11.0
    assert model.handle(L.Tick(now=10.9)) == []
    assert model.handle(L.Tick(now=11.0)) == [L.SendRenew(asked_at=11.0)]
    assert model.handle(L.Tick(now=11.5)) == []  # one renewal at a time
    assert model.handle(L.RenewResult(ok=True, asked_at=11.0, now=11.2)) == []
    assert model.may_release(13.99) and not model.may_release(14.0)  # measured from the send, not the reply
    assert model.next_wakeup() == 12.0


def test_a_slow_renewal_is_followed_at_once_by_the_next():
    model = leading(asked_at=10.0)
    model.handle(L.Tick(now=11.0))
    model.handle(L.RenewResult(ok=True, asked_at=11.0, now=12.5))
    assert model.next_wakeup() == 12.5
    assert model.handle(L.Tick(now=12.5)) == [L.SendRenew(asked_at=12.5)]


def test_the_deadline_passing_steps_down_once_and_nothing_revives_it():
    model = leading(asked_at=10.0)
    model.handle(L.Tick(now=11.0))
    [step] = model.handle(L.Tick(now=13.0))
    assert isinstance(step, L.StepDown) and "could not renew the lease of epoch 3 in time" in step.reason
    assert model.role is L.Role.EXPIRED and model.next_wakeup() is None
    # The renewal answers late: it changes nothing, and no second StepDown.
    assert model.handle(L.RenewResult(ok=True, asked_at=11.0, now=13.1)) == []
    assert model.role is L.Role.EXPIRED and not model.may_release(13.1)
    assert model.handle(L.CommitRefused(detail="epoch 3 is over")) == [] and model.reason == step.reason


def test_a_refused_renewal_deposes():
    model = leading()
    [send] = model.handle(L.Tick(now=11.0))
    [step] = model.handle(L.RenewResult(ok=False, asked_at=send.asked_at, now=11.1,
                                        detail="epoch 3 is over: epoch 4 is led by ws://b:7420"))
    assert step == L.StepDown(reason="epoch 3 is over: epoch 4 is led by ws://b:7420")
    assert model.role is L.Role.DEPOSED and not model.may_release(11.1)


def test_a_refused_commit_deposes_and_a_lost_database_disconnects():
    model = leading()
    [step] = model.handle(L.CommitRefused(detail="epoch 3 is over (epoch 4 is led by ?)"))
    assert model.role is L.Role.DEPOSED and "a commit was refused: epoch 3 is over" in step.reason
    other = leading()
    [step] = other.handle(L.DatabaseLost(detail="connection reset"))
    assert other.role is L.Role.DISCONNECTED and "lost the database (holding epoch 3)" in step.reason


@pytest.mark.parametrize("event", [
    L.RenewResult(ok=True, asked_at=1.0, now=1.0),  # a renewal answer to a standby
    L.CommitRefused(detail="x"),  # a standby never commits
])
def test_a_missing_transition_raises_and_changes_nothing(event):
    model = L.Leadership(L.LeaseConfig(lease=LEASE))
    before = copy.copy(model.__dict__)
    with pytest.raises(LocalProtocolError, match="not allowed while standby"):
        model.handle(event)
    assert model.__dict__ == before


def test_a_second_takeover_or_an_unasked_renewal_answer_raises_and_changes_nothing():
    model = leading()
    before = dict(model.__dict__)
    with pytest.raises(LocalProtocolError, match="taken is not allowed while leading"):
        model.handle(L.TakeoverResult(epoch=4, asked_at=11.0, now=11.0))
    with pytest.raises(LocalProtocolError, match="no renewal was asked at 10.5"):
        model.handle(L.RenewResult(ok=True, asked_at=10.5, now=10.6))
    assert model.__dict__ == before


@pytest.mark.parametrize("make, message", [
    (lambda: L.LeaseConfig(lease=0), "lease must be a positive number"),
    (lambda: L.LeaseConfig(lease=float("nan")), "lease must be a positive number"),
    (lambda: L.LeaseConfig(lease=4, renew_every=3), "must be shorter than the 3 s"),
    (lambda: L.LeaseConfig(lease=4, margin=1), "margin must be in"),
    (lambda: L.TakeoverResult(epoch=0, asked_at=1.0, now=1.0), "epoch must be >= 1"),
    (lambda: L.TakeoverResult(epoch=1, asked_at=2.0, now=1.0), "cannot come before its request"),
    (lambda: L.RenewResult(ok=1, asked_at=1.0, now=1.0), "ok must be a bool"),
    (lambda: L.Tick(now=-1.0), "now must be a non-negative number"),
    (lambda: L.CommitRefused(detail=""), "detail must not be empty"),
])
def test_bad_input_is_refused_with_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_an_event_of_another_kind_is_refused():
    with pytest.raises(LocalProtocolError, match="leadership does not handle str"):
        L.Leadership(L.LeaseConfig(lease=LEASE)).handle("tick")  # type: ignore[arg-type]
