"""The controller's default memory (``default_mem_per_cpu``, Slurm's DefMemPerCPU): a job submitted
without ``--mem`` asks its CPUs times the default, recorded in its spec at submit.

The harness drives the real controller and agent models; every assertion is on what they did.
"""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model.arrays import ArrayRange
from reckon.model.controller import ControllerConfig
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec, JobState
from reckon.model.nodes import pending_reason
from reckon.model.partition_ops import SetPartition
from reckon.model.resources import MAX_MEM, NodeResources

from tests.model.harness import Harness

G = 1 << 30
M = 1 << 20


def cluster(default: int | None, mem: int = 4 * G, slots: int = 8) -> Harness:
    h = Harness(("a1",), slots=slots, resources=NodeResources(mem=mem, enforcer="cgroup-v1"),
                controller_config=ControllerConfig(default_mem_per_cpu=default))
    h.join("a1")
    return h


def spec(**asks) -> JobSpec:
    return JobSpec(name="j", command=("true",), **asks)


def submit(h: Harness, **asks) -> str:
    job_id = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=spec(**asks), now=h.now, uid=h.uid()))
    return job_id


def submitted(h: Harness) -> dict[str, int | None]:
    return {f.job: f.spec.mem for f in h.log if isinstance(f, F.JobSubmitted)}


def test_a_job_without_mem_asks_its_cpus_times_the_default_in_the_fact_the_record_and_the_agent():
    h = cluster(default=512 * M)
    plain = submit(h, slots=3)
    given = submit(h, slots=3, mem=100 * M)  # its own --mem stands, even below the default
    assert submitted(h) == {plain: 1536 * M, given: 100 * M}
    assert h.job(plain).to_dict()["mem"] == 1536 * M  # what show, squeue and scontrol print
    h.schedule()
    h.pump()
    started = {c.job: c.spec.mem for c in h.agents["a1"].commands if isinstance(c, E.StartProcess)}
    assert started == {plain: 1536 * M, given: 100 * M}  # what the agent's cgroup is limited to
    h.crash_controller()  # replay reads the facts, never the config: the same number
    assert h.controller.state.jobs[plain].spec.mem == 1536 * M


def test_without_a_default_a_job_without_mem_asks_no_memory_as_before():
    h = cluster(default=None)
    job = submit(h, slots=3)
    assert submitted(h) == {job: None}
    assert "mem" not in h.job(job).spec.to_dict()


def test_the_scheduler_fits_the_default_memory():
    h = cluster(default=1 * G, mem=4 * G, slots=8)  # 8 CPUs but memory for 4 CPUs' worth of jobs
    jobs = [submit(h, slots=2) for _ in range(3)]
    h.schedule()
    h.pump()
    assert [h.job(j).state for j in jobs] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert "memory" in pending_reason(h.controller, jobs[2])


def test_a_job_whose_default_memory_no_agent_has_is_refused_at_submit():
    h = cluster(default=1 * G, mem=4 * G, slots=8)
    with pytest.raises(LocalProtocolError, match="no agent can ever run this job: it needs 8G of memory"):
        submit(h, slots=8)
    assert submitted(h) == {}


def test_array_members_and_batch_entries_get_the_default_too():
    h = cluster(default=256 * M)
    h.controller_handle(E.SubmitArray(spec=spec(slots=2), array=ArrayRange(start=1, end=2), now=h.now,
                                      uids=(h.uid(), h.uid())))
    h.controller_handle(E.SubmitBatch(specs=(spec(slots=1), spec(slots=1, mem=G)), uids=(h.uid(), h.uid()),
                                      now=h.now))
    assert sorted(submitted(h).values()) == [256 * M, 512 * M, 512 * M, G]


def test_the_default_is_capped_at_the_largest_size_a_spec_holds():
    h = cluster(default=MAX_MEM, mem=MAX_MEM)
    job = submit(h, slots=2)
    assert submitted(h) == {job: MAX_MEM}


@pytest.mark.parametrize("bad", [0, -1, True, "2G", 1.5, MAX_MEM + 1])
def test_a_bad_default_is_refused(bad):
    with pytest.raises(ValueError, match="default_mem_per_cpu must be a number of bytes"):
        ControllerConfig(default_mem_per_cpu=bad)


def test_a_partitions_memory_limit_judges_the_default_memory():
    h = Harness(("a1",), slots=8, resources=NodeResources(mem=8 * G, enforcer="cgroup-v1"),
                controller_config=ControllerConfig(default_mem_per_cpu=1 * G))
    h.controller_handle(SetPartition(name="small", changes=(("nodes", ("a*",)), ("default", True),
                                                            ("max_mem_per_job", 2 * G)), now=h.now))
    h.join("a1")
    assert submitted(h) == {}
    ok = submit(h, slots=2)  # 2G: at the partition's limit
    with pytest.raises(LocalProtocolError, match="partition small refuses this job"):
        submit(h, slots=3)  # 3G by default, though it gave no --mem
    assert submitted(h) == {ok: 2 * G}
