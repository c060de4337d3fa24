"""Node controls (issue #11): drain and resume as facts, node states, why a PENDING job waits."""

from __future__ import annotations

import pytest
from tests.model.harness import Harness, facts_of, sends_of

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState, pending_reason
from reckon.model.state import restore, snapshot


def _drain(h: Harness, name: str = "a1") -> list[E.Command]:
    return h.controller_handle(E.DrainAgent(agent=name, now=h.now))


def _resume(h: Harness, name: str = "a1") -> list[E.Command]:
    return h.controller_handle(E.ResumeAgent(agent=name, now=h.now))


def test_drained_agent_gets_no_new_dispatch_and_its_running_jobs_finish() -> None:
    h = Harness()
    h.join("a1")
    running = h.run_jobs(1)[0]
    assert facts_of(_drain(h)) == [F.AgentDrained(agent="a1")]
    assert h.controller.node_state("a1") == NodeState.DRAINING
    waiting = h.submit(1)[0]
    assert h.scheduler.place() == []  # the scheduler does not propose it
    assert sends_of(h.dispatch(waiting, "a1"), M.Dispatch) == []  # and the controller refuses anyway
    assert h.job(waiting).state is JobState.PENDING
    assert pending_reason(h.controller, waiting) == "waiting for 1 free slot: agent a1 is drained"
    h.exit("a1", running)  # the running job finishes and is recorded
    h.pump()
    assert h.job(running).state is JobState.COMPLETED
    assert h.controller.node_state("a1") == NodeState.DRAINED
    h.assert_views_agree()
    assert facts_of(_resume(h)) == [F.AgentResumed(agent="a1")]
    assert h.schedule() == [(waiting, "a1")]
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_drain_survives_replay_and_snapshot() -> None:
    h = Harness()
    h.join("a1")
    _drain(h)
    h.assert_replay_agrees()
    assert restore(snapshot(h.controller.state)).agents["a1"].drained
    restarted = h.crash_controller()
    assert restarted.state.agents["a1"].drained


def test_drain_twice_and_resume_undrained_change_nothing() -> None:
    h = Harness()
    h.join("a1")
    assert facts_of(_resume(h)) == []
    _drain(h)
    before = h.controller.state.digest()
    assert facts_of(_drain(h)) == []
    assert h.controller.state.digest() == before
    with pytest.raises(LocalProtocolError, match="unknown agent 'nobody'"):
        h.controller.handle(E.DrainAgent(agent="nobody", now=0.0))
    # apply itself refuses the redundant fact: the log never holds one
    from reckon.model.state import apply
    with pytest.raises(LocalProtocolError, match="already drained"):
        apply(h.controller.state, F.AgentDrained(agent="a1"))
    assert h.controller.state.digest() == before


def test_node_states_idle_mixed_busy() -> None:
    h = Harness(slots=2)
    h.join("a1")
    assert h.controller.node_state("a1") == NodeState.IDLE
    h.run_jobs(1)
    assert h.controller.node_state("a1") == NodeState.MIXED
    h.run_jobs(1)
    assert h.controller.node_state("a1") == NodeState.BUSY


def test_pending_reasons() -> None:
    h = Harness(slots=4)
    job = h.submit(1)[0]
    assert pending_reason(h.controller, job) == "no agent has joined"
    h.join("a1")
    big = h.submit(1, slots=16)[0]
    assert pending_reason(h.controller, big) == "no agent has 16 slots (the largest has 4)"
    assert pending_reason(h.controller, job) == "agent a1 has room: waiting for the next scheduling pass"
    h.run_jobs(1, slots=4)
    assert pending_reason(h.controller, job) == "waiting for 1 free slot: agent a1 has 0 of 4 slots free"
    h.disconnect("a1")
    assert pending_reason(h.controller, job) == "waiting for 1 free slot: agent a1 is disconnected"
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    assert pending_reason(h.controller, job) == "waiting for 1 free slot: agent a1 is reconciling"
    h.pump()
    h.schedule()
    assert pending_reason(h.controller, job) == "waiting for 1 free slot: agent a1 has 0 of 4 slots free"


def test_finish_records_how_the_outcome_arrived() -> None:
    h = Harness()
    h.join("a1")
    by_report, by_round = h.run_jobs(2)
    h.exit("a1", by_report)
    h.pump()
    h.disconnect("a1")
    h.exit("a1", by_round)  # finishes while cut off: the round of the rejoin brings it
    h.connect("a1")
    h.pump()
    vias = {f.job: f.via for f in h.log if isinstance(f, F.JobFinished)}
    assert vias[by_report] == "report"
    assert vias[by_round] == "round"


def test_history_folds_every_attempt_and_why_it_ended() -> None:
    from reckon.model.history import job_history

    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.controller_handle(E.ForgetAgent(agent="a1", now=h.now))  # attempt 1 requeued
    h.add_agent("a2", slots=4)
    h.join("a2")
    h.schedule()
    h.pump()
    h.cancel(job)  # attempt 2 runs on a2: the cancel kills it
    h.pump()
    h.exit("a2", job, 2, exit_code=None, signal=15)
    h.pump()
    hist = job_history(job, h.log)
    assert not hist.compacted
    first, second = hist.attempts[1], hist.attempts[2]
    assert (first.agent, first.ended, first.reason) == ("a1", "requeued", "agent forgotten by the operator")
    assert (second.agent, second.ended) == ("a2", "cancelled")
    assert [e["event"] for e in hist.events] == ["requeued", "cancel_requested"]
    assert job_history(job, h.log[3:]).compacted  # the submission pruned away


def test_history_names_timeouts_holds_dependency_cancels_and_user_requeues() -> None:
    """The batch facts of issue #10 each show in a job's history (each branch can fail on its own)."""
    from reckon.model.history import job_history
    from reckon.model.jobs import JobSpec

    spec = JobSpec(name="j", command=("true",))
    facts = [
        F.JobSubmitted(job="1", spec=spec, submitted_at=1.0),
        F.JobHeld(job="1"), F.JobReleased(job="1"),
        F.JobDispatched(job="1", attempt=1, agent="a1"),
        F.JobFinished(job="1", attempt=1, exit_code=None, signal=15, finished_at=5.0, timed_out=True),
        F.JobRestarted(job="1", attempt=2),
        F.JobSubmitted(job="2", spec=spec, submitted_at=1.0),
        F.JobCancelled(job="2", reason="dependency 1 ended FAILED"),
    ]
    one = job_history("1", facts).to_dict()
    assert [(a["attempt"], a["ended"], a["reason"]) for a in one["attempts"]] == [
        (1, "timed out", "stopped at its time limit")]
    assert [e["event"] for e in one["events"]] == ["held", "released", "requeued"]
    assert one["events"][2]["attempt"] == 2
    two = job_history("2", facts).to_dict()
    assert two["events"] == [{"event": "cancelled", "attempt": None, "reason": "dependency 1 ended FAILED"}]


def test_pending_reason_names_a_hold_a_dependency_and_an_array_limit_before_the_slots() -> None:
    """Each outranks "waiting for the next scheduling pass", which a free agent would say."""
    from dataclasses import replace

    from reckon.model.arrays import parse_array

    h = Harness(slots=4)
    h.join("a1")
    first = h.submit(1)[0]
    h.schedule()
    h.start("a1", first)
    assert h.job(first).state is JobState.RUNNING
    held = h.submit(1)[0]
    h.controller_handle(E.HoldJob(job=held, now=h.now))
    assert pending_reason(h.controller, held) == "held by a user: not dispatched until released (reckon release)"
    h.controller_handle(E.ReleaseJob(job=held, now=h.now))
    assert pending_reason(h.controller, held) == "agent a1 has room: waiting for the next scheduling pass"
    after = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=replace(h.job(held).spec, name="after", after=(first,)), now=h.now,
                                    uid=h.uid()))
    assert pending_reason(h.controller, after) == f"waiting for job {first} (RUNNING) to complete (--after)"
    array = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitArray(spec=replace(h.job(held).spec, name="array"), array=parse_array("1-3%1"),
                                      now=h.now, uids=(h.uid(), h.uid(), h.uid())))
    members = h.controller.state.arrays[array]
    h.dispatch(members[0], "a1")
    h.start("a1", members[0])
    assert pending_reason(h.controller, members[1]) == (
        f"its array {array} runs 1 job(s) at once (%1): waiting for one of them to end")
    h.exit("a1", first)
    h.pump()
    assert pending_reason(h.controller, after) == "agent a1 has room: waiting for the next scheduling pass"
