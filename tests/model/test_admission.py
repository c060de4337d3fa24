"""Admission at submit (model/admission.py): a job no registered agent could ever run is refused."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec


def _controller_with_agents(*slots: int) -> Controller:
    ctrl = Controller(ControllerConfig())
    for conn, n in enumerate(slots, start=1):
        join = M.Join(agent=f"a{conn}", slots=n, version=M.PROTOCOL_VERSION)
        ctrl.handle(E.AgentJoined(conn=conn, join=join, token=conn.to_bytes(16, "big"), now=1.0))
    return ctrl


def _submit(ctrl: Controller, slots: int, **kw: object) -> list:
    return ctrl.handle(E.SubmitJob(spec=JobSpec(name="big", command=("true",), slots=slots), now=2.0, **kw))


def test_a_job_larger_than_every_registered_agent_is_refused_and_changes_nothing():
    ctrl = _controller_with_agents(2, 4)
    before = (dict(ctrl.state.jobs), ctrl.state.next_job, ctrl.state.facts_applied)
    with pytest.raises(LocalProtocolError, match=r"needs 5 slots and the largest registered agent has 4"):
        _submit(ctrl, 5)
    assert (dict(ctrl.state.jobs), ctrl.state.next_job, ctrl.state.facts_applied) == before


def test_a_job_that_fits_the_largest_agent_is_accepted():
    ctrl = _controller_with_agents(2, 4)
    _submit(ctrl, 4)
    assert [j.spec.slots for j in ctrl.state.jobs.values()] == [4]


def test_queue_anyway_queues_it_for_an_agent_yet_to_join():
    ctrl = _controller_with_agents(2)
    _submit(ctrl, 8, queue_anyway=True)
    assert [j.state.value for j in ctrl.state.jobs.values()] == ["PENDING"]


def test_with_no_agent_registered_nothing_is_refused():
    ctrl = Controller(ControllerConfig())
    _submit(ctrl, 64)
    assert len(ctrl.state.jobs) == 1


def test_a_disconnected_agent_still_counts():
    ctrl = _controller_with_agents(8)
    ctrl.handle(E.ConnectionClosed(conn=1, now=3.0))
    _submit(ctrl, 8)
    assert len(ctrl.state.jobs) == 1
