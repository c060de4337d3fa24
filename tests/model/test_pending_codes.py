"""Issue #22: why a PENDING job waits, as Slurm's reason code (model/pending.py), one per case."""

from __future__ import annotations

import dataclasses

from tests.model.harness import Harness, spec
from tests.model.test_partitions import ALICE as PHYSICIST, A, B, _harness, _submit
from tests.model.test_permissions import ALICE, limited, submit
from tests.model.test_start_gate import _restarted, _world

from reckon.model import events as E
from reckon.model.arrays import parse_array
from reckon.model.jobs import JobState
from reckon.model.nodes import pending_reason
from reckon.model.partition_ops import SetPartition
from reckon.model.pending import pending_codes, why_pending


def code(h: Harness, job: str) -> str | None:
    why = why_pending(h.controller, job, h.scheduler.leads)
    if why is not None:  # the words are nodes.pending_reason's, from the same walk
        assert why.text == pending_reason(h.controller, job) or why.code == "Priority"
    return why.code if why is not None else None


def _one(h: Harness, **fields: object) -> str:
    job = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=dataclasses.replace(spec(f"j{job}"), **fields), now=h.now, uid=h.uid(),
                                    queue_anyway=True))
    return job


def _busy(slots: int = 4) -> tuple[Harness, str]:
    """One agent of ``slots``, full with one running job."""
    h = Harness(slots=slots)
    h.join("a1")
    [running] = h.submit(1, slots=slots)
    h.schedule()
    h.start("a1", running)
    assert h.job(running).state is JobState.RUNNING
    return h, running


def test_what_keeps_the_job_itself_back() -> None:
    h, running = _busy()
    held = h.submit(1)[0]
    h.controller_handle(E.HoldJob(job=held, now=h.now))
    assert code(h, held) == "JobHeldUser"
    assert code(h, _one(h, after=(running,))) == "Dependency"
    first, second = _one(h, name="solo", singleton=True), _one(h, name="solo", singleton=True)
    assert code(h, second) == "Dependency" and code(h, first) != "Dependency"
    h.now = 100.0
    assert code(h, _one(h, begin=200.0)) == "BeginTime"
    assert code(h, running) is None  # not PENDING: no reason


def test_an_array_at_its_limit_waits_with_job_array_task_limit() -> None:
    h = Harness(slots=4)
    h.join("a1")
    array = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitArray(spec=spec("array"), array=parse_array("1-3%1"), now=h.now,
                                      uids=(h.uid(), h.uid(), h.uid())))
    members = h.controller.state.arrays[array]
    h.dispatch(members[0], "a1")
    h.start("a1", members[0])
    assert code(h, members[1]) == "JobArrayTaskLimit"


def test_the_partition_holds() -> None:
    h = _harness(A, B)
    h.controller_handle(SetPartition(name="pa", changes=(("state", "DOWN"),), now=h.now))
    queued = _submit(h)  # DOWN still queues
    assert code(h, queued) == "PartitionDown"
    h.controller_handle(SetPartition(name="pa", changes=(("state", "INACTIVE"),), now=h.now))
    assert code(h, queued) == "PartitionInactive"
    h.controller_handle(SetPartition(name="pa", changes=(("state", "UP"),), now=h.now))
    job = _submit(h, time_limit=3000.0, partition="pa")
    h.controller_handle(SetPartition(name="pa", changes=(("max_time", 1200.0), ("default_time", None)), now=h.now))
    assert code(h, job) == "PartitionTimeLimit"


def test_the_per_user_limits_are_the_qos_per_user_codes() -> None:
    h = limited(max_running_per_user=1)
    first, second = submit(h, ALICE), submit(h, ALICE)
    h.schedule()
    assert h.job(first).state is not JobState.PENDING
    assert code(h, second) == "QOSMaxJobsPerUserLimit"
    h = limited(max_cpus_per_user=4)
    first, second = submit(h, ALICE, slots=3), submit(h, ALICE, slots=2)
    h.schedule()
    assert code(h, second) == "QOSMaxCpuPerUserLimit"


def test_no_node_to_run_it_is_req_node_not_avail_and_none_big_enough_bad_constraints() -> None:
    h = Harness(slots=4)
    job = h.submit(1)[0]
    assert code(h, job) == "ReqNodeNotAvail"  # no agent joined
    h.join("a1")
    assert code(h, h.submit(1, slots=16)[0]) == "BadConstraints"  # a1 has 4
    h.controller_handle(E.DrainAgent(agent="a1", now=h.now))
    assert code(h, job) == "ReqNodeNotAvail"
    h.controller_handle(E.ResumeAgent(agent="a1", now=h.now))
    assert code(h, job) == "None"  # a1 has room: the next pass places it
    h.disconnect("a1")
    assert code(h, job) == "ReqNodeNotAvail"


def test_the_start_gate_is_req_node_not_avail() -> None:
    h, jobs = _world()
    _restarted(h)
    h.join("a1")
    assert h.controller.start_gate is not None
    assert code(h, jobs[0]) == "ReqNodeNotAvail" and "start grace" in pending_reason(h.controller, jobs[0])


def test_the_first_blocked_job_waits_for_resources_the_ones_behind_it_for_priority() -> None:
    h, _ = _busy()
    first, second = h.submit(2)
    assert h.schedule() == []
    assert h.scheduler.leads(first) and not h.scheduler.leads(second)
    assert code(h, first) == "Resources"
    assert code(h, second) == "Priority"
    assert "a job queued before it goes first" in why_pending(h.controller, second, h.scheduler.leads).text
    # No scheduler to ask (a model view alone): the job waits for resources.
    assert why_pending(h.controller, second).code == "Resources"


def test_many_jobs_at_once_give_each_job_its_own_code() -> None:
    """pending_codes walks the agents once per partition and shape: the codes are still each job's."""
    h = _harness(A, B, agents=("a1", "b1"))
    h.controller_handle(E.DrainAgent(agent="b1", now=h.now))
    in_a, in_b = _submit(h), _submit(h, PHYSICIST, partition="pb")  # the same shape, other partitions
    ids = [in_a, in_b, _submit(h, slots=3)]
    h.controller_handle(E.HoldJob(job=ids[2], now=h.now))
    codes = pending_codes(h.controller, ids, h.scheduler.leads)
    assert codes == {job: why_pending(h.controller, job, h.scheduler.leads).code for job in ids}
    assert codes == {in_a: "None", in_b: "ReqNodeNotAvail", ids[2]: "JobHeldUser"}
