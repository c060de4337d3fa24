"""The digest and the snapshot cover every durable field of the controller's state.

Replay-equals-live and snapshot-equals-live compare digests: a field the digest leaves out
is a difference those checks cannot see (the join generations once were), and a field the
snapshot leaves out is lost at a restart from it.  So every field of every record, and of
the state itself, is changed here one at a time: the digest must change, and the changed
value must come back from ``restore(snapshot(...))``.  A field may stay out only if it is
listed below with the reason; a new field nobody listed fails here until it is covered.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from reckon.model.priority import UsageTable

from reckon.model import facts as F
from reckon.model import state as S
from reckon.model.jobs import JobRecord, JobSpec, JobState
from reckon.model.partitions import Partition
from reckon.model.resources import NodeResources, Owner, Usage
from reckon.model.state import AgentInfo, ControllerState

from tests.model.harness import spec

# Fields allowed out of the digest, and why.
OUT_OF_DIGEST: dict[type, dict[str, str]] = {
    ControllerState: {
        "jobs": "a table of records: each JobRecord field is checked on its own",
        "agents": "a table of records: each AgentInfo field is checked on its own",
        "facts_applied": "how many facts led here, not what the state is (the explorer merges equal states "
                         "reached by different paths through the digest)",
        "dependants": "derived from the jobs' specs (validate_state recomputes it)",
        "array_running": "derived from the RUNNING jobs (validate_state)",
        "arrays": "derived from the jobs' specs (validate_state)",
        "user_running": "derived from the RUNNING jobs and their owners (validate_state)",
        "named": "derived from the live jobs' owners, names and states (validate_state)",
    },
    AgentInfo: {
        "used": "derived from the RUNNING jobs placed here (validate_state)",
        "running": "derived from the RUNNING jobs placed here (validate_state)",
        "digest": "a cache of running_digest over the placed attempts (validate_state)",
        "mem_used": "derived from the RUNNING jobs placed here (validate_state)",
        "gpus_held": "derived from the RUNNING jobs' gpu_ids (validate_state)",
        "gres_used": "derived from the RUNNING jobs placed here (validate_state)",
    },
    JobRecord: {},
}
# Fields allowed out of the snapshot: the derived ones, which restore rebuilds.
OUT_OF_SNAPSHOT: dict[type, set[str]] = {
    ControllerState: {"jobs", "agents", "dependants", "array_running", "arrays", "user_running", "named"},
    AgentInfo: {"used", "running", "digest", "mem_used", "gpus_held", "gres_used"},
    JobRecord: set(),
}


def sample() -> ControllerState:
    """A small state with a pending and a running job, a registered agent with join generations."""
    return S.replay([
        F.ClusterCreated(cluster="c1a55e5"),
        F.AgentRegistered(agent="a1", slots=2, identity="0123456789abcdef"),
        F.JoinGenerationIssued(agent="a1", generation=2, confirmed=1),
        F.JobSubmitted(job="1", spec=spec("one"), submitted_at=1.0, uid="00000000000000a1"),
        F.JobSubmitted(job="2", spec=spec("two"), submitted_at=2.0, uid="00000000000000a2",
                       owner=Owner(uid=1001, gid=1001, user="alice")),
        F.JobDispatched(job="2", attempt=1, agent="a1"),
    ])


def other_value(value: Any, annotation: str) -> Any:
    """A value of the field's kind that differs from ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value + 7.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, enum.Enum):
        members = list(type(value))
        return members[(members.index(value) + 1) % len(members)]
    if isinstance(value, JobSpec):
        return dataclasses.replace(value, slots=value.slots + 1)
    if isinstance(value, Owner):
        return dataclasses.replace(value, uid=value.uid + 7, user=value.user + "x")
    if "Partition" in annotation and isinstance(value, (dict, tuple)):  # issue #22's partitions
        extra = Partition(name="p7", nodes=("node[01-07]",), max_time=70.0)
        return {**value, extra.name: extra} if isinstance(value, dict) else value + (extra,)
    if isinstance(value, UsageTable):  # issue #22's fair-share usage
        other = UsageTable(half_life=value.half_life)
        other.charge("alice", 2, 1.0, 8.5)
        return other
    if isinstance(value, tuple):
        return value + (7,)
    if value is None and "Usage" in annotation:
        return Usage(cpu_user=1.5, cpu_system=0.25, max_rss=1 << 20, wall=2.0, source="rusage")
    if value is None and "NodeResources" in annotation:
        return NodeResources(mem=1 << 30, gpus=(0, 1), gres=(("license", 2),))
    if value is None:
        if "Owner" in annotation:
            return Owner(uid=1007, gid=1007, user="alice")
        for kind, made in (("str", "x7"), ("float", 7.5), ("int", 7), ("bool", True)):
            if kind in annotation:
                return made
    raise AssertionError(f"no other value for {value!r} ({annotation}): teach other_value about this kind")


def _target(state: ControllerState, cls: type) -> Any:
    # The PENDING job: a placed one's ran_on is rebuilt from its agent by restore.
    return {ControllerState: state, AgentInfo: state.agents["a1"], JobRecord: state.jobs["1"]}[cls]


def _restored_target(restored: ControllerState, cls: type) -> Any:
    # By position: a changed name or id changes the table's key.
    return {ControllerState: restored, AgentInfo: list(restored.agents.values())[0],
            JobRecord: list(restored.jobs.values())[0]}[cls]


def _fields(cls: type, out: dict[type, Any]) -> list[tuple[type, str]]:
    return [(cls, f.name) for f in dataclasses.fields(cls) if f.name not in out[cls]]


DIGESTED = [p for cls in OUT_OF_DIGEST for p in _fields(cls, OUT_OF_DIGEST)]
SNAPSHOTTED = [p for cls in OUT_OF_SNAPSHOT for p in _fields(cls, OUT_OF_SNAPSHOT)]


def _change(state: ControllerState, cls: type, name: str) -> Any:
    target = _target(state, cls)
    annotation = str(next(f.type for f in dataclasses.fields(cls) if f.name == name))
    changed = other_value(getattr(target, name), annotation)
    setattr(target, name, changed)
    return changed


@pytest.mark.parametrize(("cls", "name"), DIGESTED, ids=[f"{c.__name__}.{n}" for c, n in DIGESTED])
def test_the_digest_sees_a_change_of_every_durable_field(cls: type, name: str) -> None:
    state = sample()
    before = state.digest()
    _change(state, cls, name)
    assert state.digest() != before, f"ControllerState.digest() does not see {cls.__name__}.{name}"


@pytest.mark.parametrize(("cls", "name"), SNAPSHOTTED, ids=[f"{c.__name__}.{n}" for c, n in SNAPSHOTTED])
def test_the_snapshot_keeps_every_durable_field(cls: type, name: str) -> None:
    state = sample()
    changed = _change(state, cls, name)
    restored = S.restore(S.snapshot(state))
    assert getattr(_restored_target(restored, cls), name) == changed, \
        f"snapshot/restore loses {cls.__name__}.{name}"


def test_the_fields_left_out_are_the_models_own_derived_fields() -> None:
    """The lists above name real fields, and agree with what the model itself calls derived."""
    for cls, out in OUT_OF_DIGEST.items():
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(out) <= names and OUT_OF_SNAPSHOT[cls] <= names, cls.__name__
    assert OUT_OF_SNAPSHOT[AgentInfo] == set(S.AGENT_DERIVED)
    assert OUT_OF_SNAPSHOT[ControllerState] - {"jobs", "agents"} == set(S.STATE_DERIVED)
    assert set(OUT_OF_DIGEST[ControllerState]) - OUT_OF_SNAPSHOT[ControllerState] == set(S.NOT_IN_DIGEST)


def test_older_snapshot_rows_restore_with_defaults() -> None:
    """Rows only grow at their end: a version 1 snapshot's shorter rows still restore."""
    data = S.snapshot(sample())
    data["v"] = 1
    data["agents"] = [row[:3] for row in data["agents"]]
    data["jobs"] = [row[:13] for row in data["jobs"]]
    restored = S.restore(data)
    a1, job = restored.agents["a1"], restored.jobs["2"]
    assert (a1.identity, a1.generation, a1.confirmed, a1.drained) == (None, 0, 0, False)
    assert (job.uid, job.held, job.retried, job.reason) == (None, False, 0, None)
    assert job.state is JobState.RUNNING and a1.running == {"2"} and a1.used == 1
    restored.validate_state()


def test_a_row_of_the_wrong_length_is_refused() -> None:
    data = S.snapshot(sample())
    data["jobs"][0] = data["jobs"][0][:5]
    with pytest.raises(ValueError, match="a job row has"):
        S.restore(data)
