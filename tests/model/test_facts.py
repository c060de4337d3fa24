"""The fact codec (every version), ``apply``'s strictness and the job transition table."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from tests.model.harness import Harness, spec

from reckon.model import facts as F
from reckon.model.partitions import Partition
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JOB_TRANSITIONS, JobSpec, JobState, JobTransition, allowed, finish_transition, next_state
from reckon.model.state import ControllerState, apply, replay, restore, snapshot

FULL_SPEC = JobSpec(name="build", command=("make", "-j", ""), cwd="/src", env=(("A", "1"), ("B", "")), slots=3)

SAMPLES = [
    F.JobSubmitted(job="1", spec=FULL_SPEC, submitted_at=0.5),
    F.JobSubmitted(job="1", spec=FULL_SPEC, submitted_at=0.5, uid="9c3e5a7f01b2d4e6"),
    F.JobDispatched(job="1", attempt=1, agent="a1"),
    F.JobStarted(job="1", attempt=1, started_at=1.0),
    F.JobAdopted(job="1", attempt=2, agent="a1", started_at=None),
    F.JobAdopted(job="1", attempt=2, agent="a1", started_at=3.0),
    F.JobFinished(job="1", attempt=1, exit_code=-3, signal=None, finished_at=2.0, started_at=1.0),
    F.JobFinished(job="1", attempt=1, exit_code=None, signal=9, finished_at=2.0),
    F.JobCancelRequested(job="1"),
    F.JobCancelled(job="1"),
    F.JobCancelConfirmed(job="1", attempt=4),
    F.JobRequeued(job="1", attempt=1, reason="agent lost"),
    F.AgentRegistered(agent="a1", slots=0),
    F.AgentRegistered(agent="a1", slots=2, identity="0123456789abcdef0123456789abcdef"),
    F.AgentForgotten(agent="a1"),
    F.ClusterCreated(cluster="3f2a9c01d4e5b6a7"),
    F.JobIdsReserved(upto=7),
    F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=2.0, via="round"),
    F.AgentDrained(agent="a1"),
    F.AgentResumed(agent="a1"),
    # version 4 (issue #10)
    F.JobFinished(job="1", attempt=2, exit_code=None, signal=15, finished_at=2.0, timed_out=True),
    F.JobCancelled(job="2", reason="dependency 1 ended FAILED"),
    F.JobHeld(job="1"),
    F.JobReleased(job="1"),
    F.JobRestarted(job="1", attempt=3),
    F.JobRequeueRequested(job="1", attempt=2),
    F.IdMarkRaised(upto=1000),
    F.JobPriorityAdjusted(job="1", priority=-500),
    F.UsageDecaySet(half_life=86400.0),
    F.JoinGenerationIssued(agent="a1", generation=3, confirmed=2),
    F.JobAttemptsReserved(job="1", upto=3),
    # issue #22: partitions
    F.PartitionsConfigured(partitions=(Partition(name="batch", nodes=("node[01-10]",), default=True,
                                                 max_time=86400.0, default_time=3600.0),
                                       Partition(name="gpu", nodes=("gpu*",), allow_groups=("ml",),
                                                 max_mem_per_job=64 << 30, priority_tier=2, state="DRAIN"))),
    F.PartitionSet(partition=Partition(name="gpu", max_gpus_per_job=4, state="DOWN")),
    F.PartitionRemoved(name="gpu"),
]


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def test_every_fact_kind_has_a_sample() -> None:
    assert {type(f) for f in SAMPLES} == set(F.FACT_TYPES.values())


@pytest.mark.parametrize("fact", SAMPLES, ids=lambda f: f.KIND)
def test_fact_round_trips_through_encode_decode(fact: F.Fact) -> None:
    data = F.encode(fact)
    assert data["k"] == fact.KIND and data["v"] == fact.VERSION and _plain(data)
    assert F.decode(copy.deepcopy(data)) == fact


@pytest.mark.parametrize("stored,expected", [
    ({"exit_code": -9}, (None, 9)),
    ({"exit_code": -15}, (None, 15)),
    ({"exit_code": 0}, (0, None)),
    ({"exit_code": 3}, (3, None)),
], ids=["sigkill", "sigterm", "ok", "failed"])
def test_job_finished_v1_decodes_to_the_current_shape(stored: dict, expected: tuple) -> None:
    data = {"k": "job_finished", "v": 1, "job": "1", "attempt": 1, "finished_at": 4.0, **stored}
    fact = F.decode(data)
    assert isinstance(fact, F.JobFinished)
    assert (fact.exit_code, fact.signal, fact.started_at, fact.finished_at) == (*expected, None, 4.0)
    assert "signal" not in data  # the stored map itself is not touched


def _enc(fact: F.Fact, **override: Any) -> dict[str, Any]:
    data = F.encode(fact)
    data.update(override)
    return data


def _drop(fact: F.Fact, key: str) -> dict[str, Any]:
    data = F.encode(fact)
    del data[key]
    return data


SUB = F.JobSubmitted(job="1", spec=FULL_SPEC, submitted_at=0.5)
FIN = F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=2.0)
REQ = F.JobRequeued(job="1", attempt=1, reason="x")

MALFORMED: list[tuple[str, Any, str]] = [
    ("not a map", ["job_cancelled"], "fact must be a map"),
    ("no kind", {"v": 1, "job": "1"}, "missing field 'k'"),
    ("no version", {"k": "job_cancelled", "job": "1"}, "missing field 'v'"),
    ("unknown kind", {"k": "job_exploded", "v": 1}, "unknown fact kind 'job_exploded'"),
    ("unhashable kind", {"k": ["job_cancelled"], "v": 1, "job": "1"}, "unknown fact kind"),
    ("version 0", _enc(FIN, v=0), "unsupported version 0"),
    ("future version", _enc(FIN, v=6), "unsupported version 6"),
    ("version as str", _enc(FIN, v="2"), "unsupported version '2'"),
    ("version as bool", _enc(F.JobCancelled(job="1"), v=True), "unsupported version True"),
    ("missing field", _drop(FIN, "finished_at"), "finished_at"),
    ("missing spec", _drop(SUB, "spec"), "spec"),
    ("unknown field", _enc(F.JobCancelled(job="1"), color="blue"), "unknown fields ['color']"),
    ("wrong type attempt", _enc(FIN, attempt="1"), "attempt must be an integer"),
    ("bool attempt", _enc(FIN, attempt=True), "attempt must be an integer"),
    ("negative attempt", _enc(REQ, attempt=-1), "attempt must be >= 1"),
    ("nan time", _enc(FIN, finished_at=math.nan), "finished_at must be a non-negative number"),
    ("infinite time", _enc(FIN, started_at=math.inf), "started_at must be a non-negative number, got inf"),
    ("negative time", _enc(SUB, submitted_at=-0.5), "submitted_at must be a non-negative number"),
    ("no outcome", _enc(FIN, exit_code=None, signal=None), "needs an exit code or a signal"),
    ("signal out of range", _enc(FIN, exit_code=None, signal=256), "signal must be <= 255"),
    ("v1 signal out of range", {"k": "job_finished", "v": 1, "job": "1", "attempt": 1, "exit_code": -300,
                                "finished_at": 1.0}, "signal must be <= 255"),
    ("empty job id", _enc(F.JobCancelled(job="1"), job=""), "job must not be empty"),
    ("empty reason", _enc(REQ, reason=""), "reason must not be empty"),
    ("negative slots", _enc(F.AgentRegistered(agent="a", slots=1), slots=-1), "slots must be >= 0"),
    ("identity not hex", _enc(F.AgentRegistered(agent="a", slots=1), identity="node1-is-not-hex!"),
     "identity must be 16 to 64 lowercase hex digits"),
    ("identity in a v1 registration", _enc(F.AgentRegistered(agent="a", slots=1), v=1, identity="0" * 32),
     "unknown fields ['identity']"),
    ("spec not a map", _enc(SUB, spec="make"), "job spec must be a map"),
    ("spec command a string", _enc(SUB, spec={**FULL_SPEC.to_dict(), "command": "make"}), "must be lists"),
    ("spec empty command", _enc(SUB, spec={**FULL_SPEC.to_dict(), "command": []}), "command must not be empty"),
    ("spec bad env pair", _enc(SUB, spec={**FULL_SPEC.to_dict(), "env": [["A"]]}), "(key, value) pair"),
    ("spec slots zero", _enc(SUB, spec={**FULL_SPEC.to_dict(), "slots": 0}), "slots must be >= 1"),
]


@pytest.mark.parametrize("data,expected", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_fact_raises_value_error(data: Any, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        F.decode(data)
    assert expected in str(info.value)


# ---- apply is strict: a fact that would change nothing raises and changes nothing ----------------


def _state() -> ControllerState:
    """Job 1 RUNNING on a1 with a start time, 2 COMPLETED, 3 PENDING, 4 CANCELLED."""
    return replay([
        F.AgentRegistered(agent="a1", slots=8),
        F.JobSubmitted(job="1", spec=spec(), submitted_at=0.0),
        F.JobSubmitted(job="2", spec=spec(), submitted_at=0.0),
        F.JobSubmitted(job="3", spec=spec(), submitted_at=0.0),
        F.JobSubmitted(job="4", spec=spec(), submitted_at=0.0),
        F.JobDispatched(job="1", attempt=1, agent="a1"),
        F.JobStarted(job="1", attempt=1, started_at=1.0),
        F.JobDispatched(job="2", attempt=1, agent="a1"),
        F.JobFinished(job="2", attempt=1, exit_code=0, signal=None, finished_at=2.0),
        F.JobCancelled(job="4"),
    ])


REFUSED = [
    ("duplicate submit", F.JobSubmitted(job="4", spec=spec(), submitted_at=0.0), "already exists"),
    ("out of sequence", F.JobSubmitted(job="9", spec=spec(), submitted_at=0.0), "out of sequence"),
    ("dispatch running", F.JobDispatched(job="1", attempt=1, agent="a1"), "not allowed from RUNNING"),
    ("dispatch terminal", F.JobDispatched(job="2", attempt=1, agent="a1"), "not allowed from COMPLETED"),
    ("dispatch wrong attempt", F.JobDispatched(job="3", attempt=2, agent="a1"), "names attempt 2"),
    ("adopt running", F.JobAdopted(job="1", attempt=1, agent="a1"), "not allowed from RUNNING"),
    ("start twice", F.JobStarted(job="1", attempt=1, started_at=5.0), "already has a start time"),
    ("start pending", F.JobStarted(job="3", attempt=1, started_at=5.0), "is not running"),
    ("finish twice", F.JobFinished(job="2", attempt=1, exit_code=1, signal=None, finished_at=9.0), "not running"),
    ("finish pending", F.JobFinished(job="3", attempt=1, exit_code=0, signal=None, finished_at=9.0),
     "not running"),
    ("finish old attempt", F.JobFinished(job="1", attempt=2, exit_code=0, signal=None, finished_at=9.0),
     "not running"),
    ("cancel terminal", F.JobCancelled(job="2"), "not allowed from COMPLETED"),
    ("cancel cancelled", F.JobCancelled(job="4"), "not allowed from CANCELLED"),
    ("cancel running directly", F.JobCancelled(job="1"), "not allowed from RUNNING"),
    ("cancel request pending", F.JobCancelRequested(job="3"), "not a running job"),
    ("confirm without request", F.JobCancelConfirmed(job="1", attempt=1), "no cancel request"),
    ("requeue terminal", F.JobRequeued(job="2", attempt=1, reason="x"), "not running"),
    ("requeue pending", F.JobRequeued(job="3", attempt=1, reason="x"), "not running"),
    ("unknown job", F.JobCancelled(job="404"), "unknown job"),
    ("register again", F.AgentRegistered(agent="a1", slots=8), "already registered"),
]


@pytest.mark.parametrize("fact,expected", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_apply_refuses_a_fact_that_does_not_apply_and_changes_nothing(fact: F.Fact, expected: str) -> None:
    state = _state()
    before, applied = state.digest(), state.facts_applied
    with pytest.raises(LocalProtocolError) as info:
        apply(state, fact)
    assert expected in str(info.value)
    assert state.digest() == before and state.facts_applied == applied


ALL_JOB_PAIRS = [(s, t) for s in JobState for t in JobTransition]


@pytest.mark.parametrize("state,transition", [p for p in ALL_JOB_PAIRS if p not in JOB_TRANSITIONS],
                         ids=lambda v: v.value)
def test_missing_job_transition_raises(state: JobState, transition: JobTransition) -> None:
    assert not allowed(state, transition)
    with pytest.raises(LocalProtocolError, match=f"not allowed from {state.value}"):
        next_state(state, transition)


def test_terminal_job_states_have_no_way_out_but_a_users_requeue() -> None:
    terminal = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
    assert {k[1] for k in JOB_TRANSITIONS if k[0] in terminal} == {JobTransition.RESTART}
    assert {v for k, v in JOB_TRANSITIONS.items() if k[1] is JobTransition.REQUEUE} == {JobState.PENDING}


@pytest.mark.parametrize("code,sig,cancel,expected", [
    (0, None, False, JobTransition.FINISH_OK),
    (1, None, False, JobTransition.FINISH_FAILED),
    (-1, None, False, JobTransition.FINISH_FAILED),
    (None, 9, False, JobTransition.FINISH_FAILED),
    (0, None, True, JobTransition.FINISH_CANCELLED),
])
def test_finish_transition_follows_the_outcome(code: int | None, sig: int | None, cancel: bool,
                                               expected: JobTransition) -> None:
    assert finish_transition(exit_code=code, signal=sig, cancel_requested=cancel) is expected


def test_snapshot_restore_equals_live_and_replay_continues() -> None:
    h = Harness(["a1", "a2"])
    h.join("a1")
    h.join("a2")
    h.run_jobs(3, "a1", slots=2)
    h.run_jobs(2, "a2")
    h.exit("a1", "1", exit_code=5, finished_at=3.0)
    h.pump()
    cut = len(h.log)
    snap = snapshot(h.controller.state)
    h.exit("a2", "4", exit_code=0, finished_at=4.0)
    h.pump()

    restored = restore(copy.deepcopy(snap))
    assert restored.digest() == replay(h.log[:cut]).digest()
    assert replay(h.log[cut:], restored).digest() == h.controller.state.digest()
