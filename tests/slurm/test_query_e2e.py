"""squeue, sacct, sinfo and scontrol against a real controller and agent: what Parsl, submitit,
Snakemake and dask-jobqueue run, and every known job listed across a pruning snapshot and a
controller restart (Parsl takes a job missing from squeue/sacct as COMPLETED)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import HANG, cluster, hang_guard, hermetic_env, wait_for  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def slurm(c, command: str, *args: str, status: int = 0) -> str:
    env = hermetic_env(RECKON_CONTROLLER=c.url)
    if c.token:
        env["RECKON_TOKEN"] = c.token
    result = subprocess.run([sys.executable, "-m", f"reckon.daemon.slurm.{command}", *args], capture_output=True,
                            text=True, env=env, cwd=c.base, timeout=HANG, stdin=subprocess.DEVNULL)
    assert result.returncode == status, (command, args, result)
    return result.stdout


def test_the_query_commands_as_the_workflow_tools_call_them(cluster):
    # Snapshots every 20 facts: the facts of the first jobs are pruned long before the end.
    cluster.start_controller("--snapshot-every", "20")
    cluster.start_agent("a1", slots=2)
    done = cluster.submit("true", name="wf")
    failed = cluster.submit("sh", "-c", "exit 3", name="wf")
    cluster.wait_jobs([done, failed])
    running = cluster.submit("sleep", "120", name="long")
    array = cluster.cli("submit", "--name", "arr", "--array", "1-3%1", "--", "sleep", "120").split()
    first = array[0]  # the members' ids; the first names the array
    wait_for(lambda: {cluster.job(running)["state"], cluster.job(array[0])["state"]} == {"RUNNING"},
             what="the long job and the array's first member running")
    known = [done, failed, running, *array]

    def parsl_views() -> None:
        out = slurm(cluster, "squeue", "--noheader", "--format=%i %t", "--job", ",".join([done, failed, running]))
        assert out.split("\n")[:-1] == [f"{done} CD", f"{failed} F", f"{running} R"]
        out = slurm(cluster, "sacct", "-X", "--noheader", "--format=jobid,state%20", "--job", ",".join(known))
        rows = [line.split() for line in out.splitlines()]
        # The array's members that never ran are one record, 6_[2-3%1], as Slurm's accounting has them.
        assert [r[0] for r in rows] == [done, failed, running, f"{first}_1", f"{first}_[2-3%1]"]
        assert [r[1] for r in rows] == ["COMPLETED", "FAILED", rows[2][1], "RUNNING", "PENDING"]
        # submitit asks with one -j per id.
        out = slurm(cluster, "sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", done, "-j", failed)
        assert [line.split("|")[0] for line in out.splitlines()] == [
            "JobID", done, f"{done}.batch", f"{done}.extern", failed, f"{failed}.batch", f"{failed}.extern"]

    parsl_views()
    # squeue's default: live jobs only, the array's pending members on one line.
    lines = slurm(cluster, "squeue").splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    assert [line.split()[0] for line in lines[1:]] == [running, f"{first}_1", f"{first}_[2-3%1]"]
    assert slurm(cluster, "squeue", "--format=%i|%T", "--states=all", "--noheader", "--name", "wf") == (
        f"{done}|COMPLETED\n{failed}|FAILED\n")
    # submitit: a header, '|' between fields, the steps (it skips ids with a dot).
    assert slurm(cluster, "sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", done).splitlines() == [
        "JobID|State|NodeList", f"{done}|COMPLETED|a1", f"{done}.batch|COMPLETED|a1", f"{done}.extern|COMPLETED|a1"]
    # Snakemake: a window of time and a name.
    start = time.strftime("%Y-%m-%dT%H:00", time.localtime(time.time() - 7200))
    assert slurm(cluster, "sacct", "-X", "--parsable2", "--clusters", "all", "--noheader", "--format=JobIdRaw,State",
                 "--starttime", start, "--endtime", "now", "--name", "wf") == f"{done}|COMPLETED\n{failed}|FAILED\n"
    # Snakemake's efficiency report: the accounting columns, the batch step with its measured peak memory.
    report = slurm(cluster, "sacct", "--name=wf", "--parsable2", "--noheader",
                   "--format=JobID,JobName,Comment,Elapsed,TotalCPU,NNodes,NCPUS,MaxRSS,ReqMem").splitlines()
    batch = [line.split("|") for line in report if line.startswith(f"{done}.batch|")]
    assert len(batch) == 1 and len(batch[0]) == 9 and batch[0][7].endswith("K"), report  # `true`'s RSS, in K
    # dask-jobqueue's tests: sinfo -o %C (allocated/idle/other/total CPUs).
    assert slurm(cluster, "sinfo", "-o", "%C").splitlines() == ["CPUS(A/I/O/T)", "2/0/0/2"]
    assert slurm(cluster, "sinfo", "-h", "-o", "%P").strip() == "reckon*"
    # scontrol: a job's Key=Value lines, hold and release of an array's pending member, the config.
    shown = slurm(cluster, "scontrol", "show", "job", array[1])
    assert shown.startswith(f"JobId={array[1]} ArrayJobId={first} ArrayTaskId=2 ArrayTaskThrottle=1 JobName=arr\n")
    # The controller's reason (issue #22), as `reckon show` gives it: the array's %1 holds it back
    # (a query of this one member alone could not tell, so this read Resources before).
    assert "   JobState=PENDING Reason=JobArrayTaskLimit" in shown
    slurm(cluster, "scontrol", "hold", f"{first}_3")  # Slurm's id of the array's third member
    assert cluster.job(array[2])["held"]
    slurm(cluster, "scontrol", "release", array[2])
    assert not cluster.job(array[2])["held"]
    config = slurm(cluster, "scontrol", "show", "config")
    assert "ClusterName             = reckon" in config
    assert "SchedulerType           = sched/backfill" in config  # the controller's policy (its default)
    assert slurm(cluster, "scontrol", "show", "node", "a1").startswith("NodeName=a1 ")
    assert slurm(cluster, "scontrol", "-o", "show", "partition").startswith("PartitionName=reckon ")
    # Errors: an unknown id (exit 1, one line), a bad option (exit 1, as Slurm's sacct).
    assert slurm(cluster, "squeue", "-j", "99999", status=1) == ""
    slurm(cluster, "sacct", "--bogus", status=1)

    # scontrol requeue of a RUNNING job: stopped, and run again as attempt 2.
    slurm(cluster, "scontrol", "requeue", running)
    wait_for(lambda: (lambda j: j["attempt"] == 2 and j["state"] == "RUNNING")(cluster.job(running)),
             what="the requeued job's second attempt running")
    # A controller restart after the pruning snapshots: still every job, in the same states.
    assert len(list((cluster.controller_dir).glob("controller.db*"))) >= 1
    cluster.stop("controller")
    cluster.start_controller()
    parsl_views()
