"""Partitions (issue #22): node patterns, refusals at submit, the default time, the scheduler's
filter and the dispatch check, pending reasons, config at start, replay and snapshots."""

from __future__ import annotations

import dataclasses

import pytest
from tests.model.harness import Harness, facts_of, sends_of, spec

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import ControllerConfig
from reckon.model.errors import LocalProtocolError, PermissionDenied
from reckon.model.jobs import JobState
from reckon.model.nodes import pending_reason
from reckon.model.partition_ops import RemovePartition, SetPartition
from reckon.model.partitions import (Partition, PartitionsConfigured, PartitionSet, admit, pattern_matches,
                                     tier_of)
from reckon.model.permissions import Caller
from reckon.model.state import restore, snapshot

ALICE = Caller(uid=1001, gid=1001, user="alice", groups=("alice", "physics"))
BOB = Caller(uid=1002, gid=1002, user="bob", groups=("bob",))


@pytest.mark.parametrize("pattern, name, matches", [
    ("node[01-10]", "node01", True), ("node[01-10]", "node10", True), ("node[01-10]", "node1", False),
    ("node[01-10]", "node11", False), ("node[1-10,20]", "node20", True), ("node[1-10]", "node01", False),
    ("gpu*", "gpu-big", True), ("gpu?", "gpu12", False), ("ALL", "anything", True), ("a1", "a1", True),
    ("a1", "a12", False), ("r[1-2]n[01-02]", "r2n02", True), ("r[1-2]n[01-02]", "r3n01", False),
])
def test_node_patterns(pattern: str, name: str, matches: bool) -> None:
    assert pattern_matches(pattern, name) is matches


@pytest.mark.parametrize("pattern", ["node[", "node[a-b]", "node[5-1]", "no de", "node]"])
def test_bad_node_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError):
        Partition(name="p", nodes=(pattern,))


def test_a_partition_checks_itself() -> None:
    with pytest.raises(ValueError, match="default_time"):
        Partition(name="p", max_time=60.0, default_time=120.0)
    with pytest.raises(ValueError, match="state"):
        Partition(name="p", state="BROKEN")
    with pytest.raises(ValueError, match="name"):
        Partition(name="a b")
    with pytest.raises(ValueError, match="more than one default"):
        ControllerConfig(partitions=(Partition(name="a", default=True), Partition(name="b", default=True)))


def _harness(*parts: Partition, agents: tuple[str, ...] = ("a1", "b1")) -> Harness:
    h = Harness(agents)
    for p in parts:
        h.controller_handle(SetPartition(name=p.name, changes=tuple(
            (k, getattr(p, k)) for k in ("nodes", "default", "max_time", "default_time", "max_cpus_per_job",
                                         "allow_groups", "state", "priority_tier")), now=h.now))
    for name in agents:
        h.join(name)
    return h


A = Partition(name="pa", nodes=("a[1-9]",), default=True, max_time=3600.0, default_time=600.0, max_cpus_per_job=4)
B = Partition(name="pb", nodes=("b*",), allow_groups=("physics",), priority_tier=3)


def _submit(h: Harness, caller: Caller | None = None, **fields: object) -> str:
    job_id = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=dataclasses.replace(spec("j"), **fields), now=h.now, uid=h.uid(),
                                    caller=caller))
    return job_id


def test_submit_refusals_name_the_partition_and_change_nothing() -> None:
    h = _harness(A, B)
    before = h.controller.state.digest()
    for fields, caller, kind, words in [
        ({"partition": "nope"}, None, LocalProtocolError, "invalid partition 'nope'"),
        ({"partition": "pb"}, BOB, PermissionDenied, "partition pb is for group physics: bob is in none"),
        ({"slots": 5}, None, LocalProtocolError, "it asks 5 CPUs and partition pa allows 4 per job"),
        ({"time_limit": 7200.0}, None, LocalProtocolError, "02:00:00 is over the partition's 01:00:00"),
    ]:
        with pytest.raises(kind, match=words):
            _submit(h, caller, **fields)
    assert h.controller.state.digest() == before


def test_a_job_gets_its_partition_and_the_default_time_in_its_spec() -> None:
    h = _harness(A, B)
    job = h.job(_submit(h))
    assert (job.spec.partition, job.spec.time_limit) == ("pa", 600.0)
    assert h.job(_submit(h, time_limit=60.0)).spec.time_limit == 60.0
    other = h.job(_submit(h, ALICE, partition="pb"))  # alice is in physics
    assert (other.spec.partition, other.spec.time_limit) == ("pb", None)
    assert tier_of(h.controller.state.partitions, "pb") == 3 and tier_of({}, None) == 1


def test_nothing_is_placed_outside_its_partition() -> None:
    h = _harness(A, B)
    in_a, in_b = _submit(h), _submit(h, partition="pb")
    assert sorted(h.schedule()) == [(in_a, "a1"), (in_b, "b1")]
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_bite_dispatch_outside_partition() -> None:
    """The dispatch check alone (the scheduler bypassed) refuses an agent outside the job's partition:
    the refusal INV-PARTITION relies on when a proposal is stale."""
    h = _harness(A, B)
    job = _submit(h)
    assert sends_of(h.dispatch(job, "b1"), M.Dispatch) == []
    assert h.job(job).state is JobState.PENDING
    assert sends_of(h.dispatch(job, "a1"), M.Dispatch) != []


def test_a_down_partition_keeps_its_jobs_pending_and_up_releases_them() -> None:
    h = _harness(A, B)
    h.controller_handle(SetPartition(name="pa", changes=(("state", "DOWN"),), now=h.now))
    job = _submit(h)  # DOWN still queues (Slurm's DOWN)
    assert h.schedule() == []
    assert "PartitionDown" in pending_reason(h.controller, job)
    h.assert_views_agree()
    h.controller_handle(SetPartition(name="pa", changes=(("state", "DRAIN"),), now=h.now))
    with pytest.raises(LocalProtocolError, match="DRAIN: it takes no new jobs"):
        _submit(h)
    assert h.schedule() == [(job, "a1")]  # DRAIN still starts what is queued


def test_lowered_max_time_holds_a_queued_job_with_partition_time_limit() -> None:
    h = _harness(A, B)
    job = _submit(h, time_limit=3000.0, partition="pa")
    h.controller_handle(SetPartition(name="pa", changes=(("max_time", 1200.0), ("default_time", None)), now=h.now))
    assert h.schedule() == []
    assert "PartitionTimeLimit" in pending_reason(h.controller, job)


def test_only_operators_change_partitions() -> None:
    h = _harness(A)
    with pytest.raises(PermissionDenied, match="only an operator may change partitions"):
        h.controller_handle(SetPartition(name="pa", changes=(("state", "DOWN"),), now=h.now, caller=BOB))
    with pytest.raises(LocalProtocolError, match="unknown partition"):
        h.controller_handle(RemovePartition(name="zz", now=h.now))
    assert facts_of(h.controller_handle(SetPartition(name="pa", changes=(("state", "UP"),), now=h.now))) == []


def test_making_a_partition_the_default_takes_it_from_the_other() -> None:
    h = _harness(A, B)
    h.controller_handle(SetPartition(name="pb", changes=(("default", True),), now=h.now))
    parts = h.controller.state.partitions
    assert (parts["pa"].default, parts["pb"].default) == (False, True)
    h.assert_replay_agrees()


def test_no_partitions_behaves_as_before() -> None:
    h = Harness(("a1",))
    h.join("a1")
    job = _submit(h)
    assert h.job(job).spec.partition is None and h.schedule() == [(job, "a1")]
    with pytest.raises(LocalProtocolError, match="no partitions"):
        _submit(h, partition="gpu")
    # sbatch -p on such a cluster: kept as a label, as before.
    kept = admit({}, dataclasses.replace(spec("s"), partition="gpu", slurm_env=True), None)
    assert kept.partition is None and dict(kept.labels)["partition"] == "gpu"


def test_config_at_start_is_recorded_once_and_operator_changes_survive_a_restart() -> None:
    config = ControllerConfig(partitions=(A, B))
    h = Harness(("a1",), controller_config=config)
    h.controller_handle(E.ControllerStarted(now=h.now, grace=0.0))
    assert [type(f) for f in facts_of(h.controller_commands)] .count(PartitionsConfigured) == 1
    h.controller_handle(SetPartition(name="pa", changes=(("state", "DOWN"),), now=h.now))
    restarted = h.crash_controller()  # the same config: nothing recorded again, the DOWN stays
    assert restarted.state.partitions["pa"].state == "DOWN"
    assert restore(snapshot(restarted.state)).digest() == restarted.state.digest()
    h.assert_replay_agrees()
    changed = ControllerConfig(partitions=(dataclasses.replace(A, max_time=7200.0),))
    fresh = type(restarted)(changed, restore(snapshot(restarted.state)))
    commands = fresh.handle(E.ControllerStarted(now=h.now, grace=0.0))
    assert [f for f in facts_of(commands) if isinstance(f, PartitionsConfigured)]
    assert sorted(fresh.state.partitions) == ["pa"] and fresh.state.partitions["pa"].state == "UP"


def test_partition_facts_round_trip() -> None:
    from reckon.model import facts as F

    for fact in (PartitionSet(partition=B), PartitionsConfigured(partitions=(A, B))):
        assert F.decode(F.encode(fact)) == fact
