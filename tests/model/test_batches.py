"""A batch submit (model/batches.py): one event, all the jobs or none."""

from __future__ import annotations

import pytest

from tests.model.harness import Harness, facts_of

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec, JobState


def _spec(**kw: object) -> JobSpec:
    return JobSpec(name=str(kw.pop("name", "j")), command=("true",), **kw)  # type: ignore[arg-type]


def _batch(*specs: JobSpec, queue_anyway: bool = False, first_uid: int = 1) -> E.SubmitBatch:
    return E.SubmitBatch(specs=specs, now=5.0, uids=tuple(f"{first_uid + n:016x}" for n in range(len(specs))),
                         queue_anyway=queue_anyway)


def _controller_with_agents(*slots: int) -> Controller:
    ctrl = Controller(ControllerConfig())
    for conn, n in enumerate(slots, start=1):
        join = M.Join(agent=f"a{conn}", slots=n, version=M.PROTOCOL_VERSION)
        ctrl.handle(E.AgentJoined(conn=conn, join=join, token=conn.to_bytes(16, "big"), now=1.0))
    return ctrl


def _picture(ctrl: Controller) -> tuple:
    state = ctrl.state
    return dict(state.jobs), state.next_job, state.id_mark, state.facts_applied, dict(state.dependants)


def test_a_batch_submits_every_job_in_one_handle_call_in_order() -> None:
    ctrl = _controller_with_agents(4)
    first = ctrl.state.next_job_id()
    commands = ctrl.handle(_batch(_spec(name="a"), _spec(name="b", slots=4), _spec(name="c")))
    submitted = [f for f in facts_of(commands) if isinstance(f, F.JobSubmitted)]
    assert [f.job for f in submitted] == [str(int(first) + n) for n in range(3)]
    assert [f.spec.name for f in submitted] == ["a", "b", "c"]
    assert [f.uid for f in submitted] == [f"{n:016x}" for n in (1, 2, 3)]
    assert sum(isinstance(c, E.Append) for c in commands) == 1  # one append: one group commit
    assert ctrl.state.id_mark >= int(submitted[-1].job)  # the id mark stays ahead, as for single submits
    assert all(ctrl.state.jobs[f.job].state is JobState.PENDING for f in submitted)


@pytest.mark.parametrize("bad, reason", [
    (_spec(slots=5), "needs 5 slots and the largest registered agent has 4"),
    (_spec(after=("99",)), "unknown job '99' in --after"),
    (_spec(array_id="1", array_index=0), "an array job cannot be part of a batch"),
])
def test_a_batch_with_one_bad_entry_changes_nothing_and_names_the_entry(bad: JobSpec, reason: str) -> None:
    ctrl = _controller_with_agents(2, 4)
    before = _picture(ctrl)
    with pytest.raises(LocalProtocolError, match=rf"^nothing submitted: entry 3 of 4: .*{reason}"):
        ctrl.handle(_batch(_spec(), _spec(), bad, _spec()))
    assert _picture(ctrl) == before


def test_queue_anyway_skips_admission_but_not_the_dependency_check() -> None:
    ctrl = _controller_with_agents(2)
    ctrl.handle(_batch(_spec(), _spec(slots=8), queue_anyway=True))
    assert sorted(j.spec.slots for j in ctrl.state.jobs.values()) == [1, 8]
    before = _picture(ctrl)
    with pytest.raises(LocalProtocolError, match="entry 2 of 2: unknown job"):
        ctrl.handle(_batch(_spec(), _spec(after=("99",)), queue_anyway=True, first_uid=10))
    assert _picture(ctrl) == before


def _dependency_cancelled_by_a_forget() -> tuple[Harness, str]:
    """A job RUNNING on a1 with its cancel requested; a1 goes away, and is forgotten:
    the forget confirms the cancel, so the job is CANCELLED (model: model.job_ops.on_forget)."""
    h = Harness(["a1"], slots=2)
    h.join("a1")
    [dep] = h.submit()
    assert h.schedule() == [(dep, "a1")]
    h.cancel(dep)
    assert h.job(dep).cancel_requested
    h.disconnect("a1")
    return h, dep


def test_an_after_naming_a_job_the_forget_cancelled_refuses_the_whole_batch() -> None:
    """``reckon forget`` ends the dependency (CANCELLED) just before the batch: the batch
    is refused as a whole.  Checked in the daemon, then submitted job by job, the first
    entry went in and the second was refused: half a batch."""
    h, dep = _dependency_cancelled_by_a_forget()
    h.controller_handle(E.ForgetAgent(agent="a1", now=h.now))
    assert h.job(dep).state is JobState.CANCELLED
    before = _picture(h.controller)
    with pytest.raises(LocalProtocolError,
                       match=rf"^nothing submitted: entry 2 of 2: job {dep} in --after already ended CANCELLED"):
        h.controller_handle(_batch(_spec(), _spec(after=(dep,)), first_uid=100))
    assert _picture(h.controller) == before


def test_a_batch_before_the_forget_is_whole_and_its_dependant_cancelled_with_the_reason() -> None:
    """The other order: the batch goes in whole, and the forget then cancels the dependant."""
    h, dep = _dependency_cancelled_by_a_forget()
    plain, dependant = (str(int(h.controller.state.next_job_id()) + n) for n in range(2))
    h.controller_handle(_batch(_spec(), _spec(after=(dep,)), first_uid=100))
    h.controller_handle(E.ForgetAgent(agent="a1", now=h.now))
    assert h.job(plain).state is JobState.PENDING
    assert h.job(dependant).state is JobState.CANCELLED
    assert h.job(dependant).reason == f"dependency {dep} ended CANCELLED"


def test_a_forget_that_removes_the_only_large_agent_refuses_a_batch_needing_it() -> None:
    ctrl = _controller_with_agents(2, 8)
    ctrl.handle(E.ConnectionClosed(conn=2, now=2.0))
    ctrl.handle(E.ForgetAgent(agent="a2", now=3.0))
    before = _picture(ctrl)
    refusal = "entry 2 of 2: .*needs 8 slots and the largest registered agent has 2"
    with pytest.raises(LocalProtocolError, match=refusal):
        ctrl.handle(_batch(_spec(), _spec(slots=8)))
    assert _picture(ctrl) == before


def test_a_batch_replays_to_the_same_state() -> None:
    h = Harness(["a1"], slots=2)
    h.join("a1")
    h.controller_handle(_batch(_spec(), _spec(), _spec(), first_uid=100))
    rebuilt = Controller.from_log(list(h.log), h.config)
    assert rebuilt.state.digest() == h.controller.state.digest()
    assert rebuilt.state.id_mark == h.controller.state.id_mark


@pytest.mark.parametrize("fields", [
    dict(specs=(), uids=()),
    dict(specs=[_spec()], uids=("a",)),  # not a tuple
    dict(specs=("not a spec",), uids=("a",)),
    dict(specs=(_spec(), _spec()), uids=("a",)),  # one uid short
    dict(specs=(_spec(), _spec()), uids=("a", "a")),  # not fresh
    dict(specs=(_spec(),), uids=(None,)),
    dict(specs=(_spec(),), uids=("a",), queue_anyway=1),
])
def test_a_malformed_batch_event_is_refused(fields: dict) -> None:
    with pytest.raises(ValueError):
        E.SubmitBatch(now=1.0, **fields)
