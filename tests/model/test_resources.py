"""Resources beyond slots (issue #20): memory, GPUs and gres from the join to the finish.

The harness drives the real controller and agent models; every assertion is on what they did.
"""

from __future__ import annotations

import re

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model import state as S
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobSpec, JobState
from reckon.model.nodes import pending_reason
from reckon.model.records import LocalJob, LocalStatus
from reckon.model.resources import NodeResources, Usage

from tests.model import mutants, resource_checks
from tests.model.harness import Harness

G = 1 << 30
GPU_NODE = NodeResources(mem=4 * G, gpus=(0, 1), gres=(("lic", 2),), enforcer="cgroup-v1")
USAGE = Usage(cpu_user=1.5, cpu_system=0.25, max_rss=300 << 20, wall=2.0, source="cgroup")


def submit(h: Harness, queue_anyway: bool = True, **asks) -> str:
    job_id = h.controller.state.next_job_id()
    spec = JobSpec(name=f"job{job_id}", command=("true",), **asks)
    h.controller_handle(E.SubmitJob(spec=spec, now=h.now, uid=h.uid(), queue_anyway=queue_anyway))
    return job_id


def cluster(resources: NodeResources | None = GPU_NODE, slots: int = 8) -> Harness:
    h = Harness(("a1",), slots=slots, resources=resources)
    h.join("a1")
    return h


def test_the_join_registers_what_the_agent_offers_and_a_version_5_join_offers_nothing():
    h = cluster()
    registered = [f for f in h.log if isinstance(f, F.AgentRegistered)]
    assert registered[-1].resources == GPU_NODE and h.controller.state.agents["a1"].resources == GPU_NODE
    old = M.Join(agent="a2", slots=2, version=5)
    assert "resources" not in M.to_wire(old)  # what a version 5 agent sends, and is served
    h2 = cluster(resources=None)
    assert h2.controller.state.agents["a1"].resources is None
    job = submit(h2, mem=G)  # asks memory of an agent that schedules none: never placed
    h2.schedule()
    assert h2.job(job).state is JobState.PENDING
    assert pending_reason(h2.controller, job) == \
        "no agent can run it: it needs 1G of memory (--mem) and no registered agent schedules memory"


def test_two_one_gpu_jobs_get_different_gpus_a_third_waits_and_replay_keeps_them():
    h = cluster()
    jobs = [submit(h, gpus=1) for _ in range(3)]
    h.schedule()
    h.pump()
    assert [h.job(j).gpu_ids for j in jobs] == [(0,), (1,), ()]
    assert h.job(jobs[2]).state is JobState.PENDING
    assert "lacks 1 GPU (0 free)" in pending_reason(h.controller, jobs[2])
    # The dispatch fact, the wire and the agent's durable record carry the same indices.
    assert [f.gpus for f in h.log if isinstance(f, F.JobDispatched)] == [(0,), (1,)]
    assert [m.gpus for m in h.agents["a1"].received if isinstance(m, M.Dispatch)] == [(0,), (1,)]
    assert [(c.job, c.gpus) for c in h.agents["a1"].commands if isinstance(c, E.StartProcess)] == \
        [(jobs[0], (0,)), (jobs[1], (1,))]
    assert h.agent("a1").records[(jobs[1], 1)].gpus == (1,)
    h.controller.state.validate_state()
    h.crash_controller()
    assert [h.controller.state.jobs[j].gpu_ids for j in jobs] == [(0,), (1,), ()]
    assert S.restore(S.snapshot(h.controller.state)).agents["a1"].gpus_held == {0: {jobs[0]}, 1: {jobs[1]}}
    # The first ends: its GPU is free again and goes to the waiting job (the lowest free index).
    h.join("a1")
    h.start("a1", jobs[0])
    h.exit("a1", jobs[0])
    h.pump()
    h.schedule()
    assert h.job(jobs[2]).gpu_ids == (0,) and h.job(jobs[2]).state is JobState.RUNNING


def test_memory_and_gres_are_fitted_across_scheduling_passes():
    h = cluster()
    big = submit(h, mem=3 * G)
    h.schedule()
    second = submit(h, mem=2 * G)  # 1G left: waits
    lic = [submit(h, gres=(("lic", 1),)) for _ in range(3)]  # 2 licenses: the third waits
    h.schedule()
    assert h.job(big).state is JobState.RUNNING and h.job(second).state is JobState.PENDING
    assert [h.job(j).state for j in lic] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert "lacks 2G of memory (1G free)" in pending_reason(h.controller, second)
    assert "lacks 1 lic (0 free)" in pending_reason(h.controller, lic[2])
    info = h.controller.state.agents["a1"]
    assert (info.mem_used, info.gres_used) == (3 * G, {"lic": 2})
    assert resource_checks.no_overcommit(h.controller.state, h.log) == []
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_apply_refuses_a_dispatch_that_does_not_fit_or_names_a_held_gpu():
    h = cluster()
    a, b = submit(h, gpus=1, mem=3 * G), submit(h, gpus=1, mem=2 * G)
    h.schedule()
    state = h.controller.state
    assert h.job(a).gpu_ids == (0,) and h.job(b).state is JobState.PENDING
    before = state.digest()
    for fact, words in [
        (F.JobDispatched(job=b, attempt=1, agent="a1", gpus=(1,)), "does not fit agent a1: it needs 2G"),
        (F.JobDispatched(job=b, attempt=1, agent="a1", gpus=(0,)), "GPU 0 of agent a1 is held by job 1"),
        (F.JobDispatched(job=b, attempt=1, agent="a1", gpus=(7,)), "agent a1 has no GPU 7"),
        (F.JobDispatched(job=b, attempt=1, agent="a1"), "asks 1 GPU(s), its placement names []"),
    ]:
        with pytest.raises(LocalProtocolError, match=re.escape(words)):
            S.apply(state, fact)
        assert state.digest() == before  # refused: nothing changed


def test_admission_names_the_dimension_no_agent_could_ever_give():
    h = cluster()
    cases = [({"slots": 9}, "needs 9 slots and the largest registered agent has 8"),
             ({"mem": 5 * G}, "needs 5G of memory (--mem) and the most any registered agent offers is 4G"),
             ({"gpus": 3}, "needs 3 GPUs (--gpus) and the most any registered agent has is 2"),
             ({"gres": (("fpga", 1),)}, "needs 1 fpga (--gres) and the most any registered agent has is 0")]
    for asks, words in cases:
        before = h.controller.state.digest()
        with pytest.raises(LocalProtocolError, match=re.escape(words)):
            submit(h, queue_anyway=False, **asks)
        assert h.controller.state.digest() == before
    assert h.job(submit(h, queue_anyway=True, gpus=3)).state is JobState.PENDING  # --queue-anyway queues it


def test_usage_and_oom_travel_from_the_supervisor_to_the_record():
    h = cluster()
    ok, oom = submit(h), submit(h, mem=G, retries=2)
    h.schedule()
    h.pump()
    for job in (ok, oom):
        h.start("a1", job)
    h.agents["a1"].processes.discard((ok, 1))
    h.agent_handle("a1", E.ProcessExited(job=ok, attempt=1, exit_code=0, signal=None, finished_at=h.now,
                                         now=h.now, usage=USAGE))
    h.agent_handle("a1", E.ProcessExited(job=oom, attempt=1, exit_code=None, signal=9, finished_at=h.now,
                                         now=h.now, usage=USAGE, oom=True))
    h.pump()
    assert (h.job(ok).state, h.job(ok).usage, h.job(ok).reason) == (JobState.COMPLETED, USAGE, None)
    # Killed for its memory: FAILED, reason oom, and not retried (it would be again).
    assert (h.job(oom).state, h.job(oom).reason, h.job(oom).attempt) == (JobState.FAILED, "oom", 1)
    finished = [f for f in h.log if isinstance(f, F.JobFinished)]
    assert [(f.usage, f.oom) for f in finished] == [(USAGE, False), (USAGE, True)]
    assert h.job(oom).to_dict()["usage"] == USAGE.to_dict()
    h.assert_replay_agrees()


def test_a_round_report_carries_usage_oom_and_a_running_attempts_gpus():
    entry = M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.RUNNING, gpus=(1,))
    assert M.ReportEntry.from_wire(entry.to_wire()) == entry
    done = M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.FINISHED, signal=9, finished_at=5.0,
                         usage=USAGE, oom=True)
    assert M.ReportEntry.from_wire(done.to_wire()) == done
    # Without them a row is exactly what a version 5 peer sends and reads.
    plain = M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.FINISHED, exit_code=0, finished_at=5.0)
    assert len(plain.to_wire()) == 7
    with pytest.raises(ValueError, match="only a finished entry carries usage or oom"):
        M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.RUNNING, oom=True)


def test_an_attempt_reported_on_a_gpu_a_dispatch_gave_away_is_adopted_where_it_runs():
    """A restored controller lost b's dispatch and gave b's GPU 0 to a; the agent's report proves b
    runs on GPU 0: b is adopted there (the truth), both hold GPU 0 until one ends, and nothing more
    is dispatched onto it.  Only a dispatch sharing a GPU is a violation (INV-GPU-ONCE)."""
    h = cluster()
    a = submit(h, gpus=1)
    h.schedule()
    b = submit(h, gpus=1)  # PENDING at attempt 1, as if its dispatch were lost
    state = h.controller.state
    S.apply(state, F.JobAdopted(job=b, attempt=1, agent="a1", gpus=(0,)))
    assert state.agents["a1"].gpus_held == {0: {a, b}} and state.agents["a1"].free()[2] == 1
    state.validate_state()
    log = [*h.log, F.JobAdopted(job=b, attempt=1, agent="a1", gpus=(0,))]
    assert resource_checks.gpu_once(state, log) == []
    c = submit(h, gpus=1)
    h.schedule()  # (the scheduler was not told of b's adoption, made here by hand: its proposal of b is refused)
    h.schedule()
    assert h.job(c).gpu_ids == (1,)  # the shared GPU 0 is not given again
    # Had b been dispatched onto GPU 0, that is the violation.
    dispatched = [*h.log[:-1], F.JobDispatched(job=b, attempt=1, agent="a1", gpus=(0,))]
    assert resource_checks.gpu_once(state, dispatched) == [
        f"INV-GPU-ONCE: GPU 0 of a1 is held by RUNNING jobs {a} and {b}, both dispatched"]
    # An adoption naming another number of GPUs than the job asks is not one the controller could have made.
    with pytest.raises(LocalProtocolError, match=r"asks 1 GPU\(s\), its placement names \[\]"):
        S.apply(state, F.JobAdopted(job=submit(h, gpus=1), attempt=1, agent="a1"))


def test_an_adoption_onto_a_held_gpu_through_a_round_warns_the_operator():
    """The same case through the rejoin round the agent really answers: b, which the restored
    controller holds PENDING, runs on GPU 0, which a holds: b is adopted there, with one warning
    naming the GPU and the job that holds it too."""
    h = cluster()
    a = submit(h, gpus=1)
    h.schedule()
    h.pump()
    b = submit(h, gpus=1, queue_anyway=True)
    assert h.job(a).gpu_ids == (0,) and h.job(b).state is JobState.PENDING
    h.disconnect("a1")
    h.agent("a1").records[(b, 1)] = LocalJob(job=b, attempt=1, spec=JobSpec(name="b", command=("true",), gpus=1),
                                             status=LocalStatus.RUNNING, gpus=(0,))
    h.controller_commands.clear()
    h.connect("a1")
    h.pump()
    assert h.job(b).state is JobState.RUNNING and h.job(b).gpu_ids == (0,)
    warnings = [c.message for c in h.controller_commands if isinstance(c, E.Warn)]
    assert warnings == [f"job {b} attempt 1 adopted on GPU 0 of a1, which job(s) {a} hold too (a restored state "
                        f"gave it away): nothing more goes on it until they end"]
    h.assert_replay_agrees()


def test_old_facts_encode_as_before():
    """A fact without the new fields has exactly the keys it had: old logs re-encode byte for byte."""
    assert set(F.encode(F.JobDispatched(job="1", attempt=1, agent="a1"))) == {"k", "v", "job", "attempt", "agent"}
    assert "usage" not in F.encode(F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0))
    assert "resources" not in F.encode(F.AgentRegistered(agent="a1", slots=2))
    assert "mem" not in JobSpec(name="x", command=("true",)).to_dict()
    with pytest.raises(ValueError, match="unknown fields"):
        F.decode({"k": "job_dispatched", "v": 1, "job": "1", "attempt": 1, "agent": "a1", "gpus": [0]})
    spec = JobSpec(name="x", command=("true",), mem=G, gpus=2, gres=(("lic", 1),))
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["gres"] == [["lic", 1]]


def test_the_memory_mutant_over_commits_and_the_check_sees_it(monkeypatch):
    """Mutant R1 (tests/model/mutants.py) in a few steps: the fit forgets the memory held, a second
    job is dispatched onto memory already given, and INV-NO-OVERCOMMIT's independent sum says so.
    (The stateful machine catches it too, test_checks_bite.py, but needs minutes to.)"""
    h = cluster()
    submit(h, mem=3 * G)
    h.schedule()
    second = submit(h, mem=2 * G)
    h.schedule()
    assert h.job(second).state is JobState.PENDING  # the real fit
    assert resource_checks.no_overcommit(h.controller.state, h.log) == []
    mutants.apply(mutants.ALL["R1"], monkeypatch.setattr, monkeypatch.setitem)
    h.controller_handle(E.DispatchProposed(job=second, agent="a1", now=h.now))
    assert h.job(second).state is JobState.RUNNING
    assert resource_checks.no_overcommit(h.controller.state, h.log) == [
        f"INV-NO-OVERCOMMIT: a1 runs jobs asking {5 * G} bytes of memory, it has {4 * G}"]
