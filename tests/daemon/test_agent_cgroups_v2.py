"""The cgroup v2 path of daemon/agent/cgroups.py run on the real kernel, in a private subtree.

The agent uses v2 only where its own cgroup is a delegated subtree with the memory, cpu and pids
controllers (``cgroups.detect``).  A machine may mount cgroup2 with none of them (this one: at
/sys/fs/cgroup/unified, every controller bound to v1) and still give what these tests need: a
child cgroup one can make, move processes into, ``cgroup.kill``, ``cpu.stat`` and rmdir.  The
tests build the map ``detect`` would return for such a subtree (its ``kinds`` without the limits
no controller backs) and run the supervisor's v2 code on it: membership from birth, the kill of a
double-forked ``setsid`` sleeper, usage, cleanup of leftovers.  Where the machine cannot (not
root, no cgroup2, no cgroup.kill, a cgroup it may not write), each test skips saying why.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent import cgroups
from reckon.daemon.agent.runner import JobRunner

from tests.daemon.agent_real import HANG, reap_jobs, sh, start_time

_count = 0


def _v2_own_dir() -> Path | None:
    """This process's own cgroup in the cgroup2 hierarchy, or None."""
    points = [p for p, kind, _ in cgroups._mounts() if kind == "cgroup2"]
    own = cgroups._own_v2_path()
    if not points or own is None:
        return None
    return Path(points[0]) / own.lstrip("/")


def _probe(base: Path) -> str | None:
    """Why a private v2 subtree at ``base`` cannot be used here (None: it can)."""
    probe = base / "probe"
    sleeper = None
    try:
        probe.mkdir(parents=True)
        if not (probe / "cgroup.kill").exists():
            return "cgroup v2 without cgroup.kill (kernel before 5.14)"
        sleeper = subprocess.Popen(["sleep", "60"])
        (probe / "cgroup.procs").write_text(str(sleeper.pid))
        if sleeper.pid not in map(int, (probe / "cgroup.procs").read_text().split()):
            return "a process moved into a cgroup v2 child is not listed there"
    except OSError as e:
        return f"cannot make and use a cgroup v2 child of {base.parent}: {e.strerror or e}"
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        for _ in range(200):
            try:
                probe.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.005)  # EBUSY: the killed sleeper is still leaving
    return None


@pytest.fixture
def v2(tmp_path):
    """The map ``cgroups.detect`` gives for a v2 subtree: a private ``jobs`` base under this
    process's own cgroup, with only the limits the subtree's controllers back; all of it removed
    afterwards."""
    global _count
    if os.geteuid() != 0:
        pytest.skip("cgroup v2 tests need root")
    own = _v2_own_dir()
    if own is None or not (own / "cgroup.procs").exists():
        pytest.skip("no cgroup v2 hierarchy on this machine")
    _count += 1
    top = own / f"reckon-test-{os.getpid()}-{_count}"
    why = _probe(top)
    if why is not None:
        _rmdir_tree(top)
        pytest.skip(why)
    jobs = top / "jobs"
    jobs.mkdir()
    available = set((jobs / "cgroup.controllers").read_text().split())
    kinds = ["kill"] + [k for k, c in (("cpus", "cpu"), ("mem", "memory"), ("pids", "pids")) if c in available]
    found = {"version": 2, "kinds": sorted(kinds), "why": "", "v2": str(jobs)}
    try:
        yield found
    finally:
        reap_jobs(tmp_path)
        left = cgroups.clean_leftovers(found, keep=set())
        _rmdir_tree(top)
        assert not top.exists(), f"the test left {top} behind"
        assert not left, f"the test left cgroups behind: {left}"


def _rmdir_tree(top: Path) -> None:
    if not top.exists():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass
    try:
        top.rmdir()
    except OSError:
        pass


async def _wait_for(predicate) -> None:
    while not predicate():
        await trio.sleep(0.01)


async def _exit_of(runner: JobRunner, job: str):
    while True:
        item = await runner.exits.receive()
        if item.job == job:
            return item


def test_plan_leaves_out_the_limits_the_subtree_cannot_set():
    found = {"version": 2, "kinds": ["kill"], "why": "", "v2": "/x/jobs"}
    assert cgroups.plan(found, "7", 2, mem=1 << 20, cpus=2, pids_max=64) == {
        "v": 2, "dir": "/x/jobs/7.2", "mem": None, "cpus": None, "pids_max": None}
    assert "pool_mem" not in cgroups.plan(found, "7", 2, mem=None, cpus=None, pids_max=None, pool_mem=1 << 30)
    found["kinds"] = ["cpus", "kill", "mem", "pids"]
    assert cgroups.plan(found, "7", 2, mem=1 << 20, cpus=2, pids_max=64) == {
        "v": 2, "dir": "/x/jobs/7.2", "mem": 1 << 20, "cpus": 2, "pids_max": 64}
    assert cgroups.plan(found, "7", 2, mem=None, cpus=None, pids_max=None, pool_mem=1 << 30)["pool_mem"] == 1 << 30


@pytest.fixture
def v2_memory(v2):
    """``v2`` where the subtree has the memory controller (a sync fixture: its skip keeps its reason)."""
    if "mem" not in v2["kinds"]:
        pytest.skip("the cgroup v2 subtree has no memory controller here (this machine binds it to v1)")
    return v2


async def test_v2_a_job_without_mem_and_all_jobs_together_are_capped_at_the_agents_memory(tmp_path, v2_memory):
    v2 = v2_memory
    mb = 1 << 20
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=v2, mem_cap=100 * mb) as runner:
            await runner.start("1", 1, sh("exec sleep 300", slots=1))  # no --mem
            await _wait_for(lambda: runner._records(("1", 1))[0] is not None)
            own = Path(v2["v2"]) / "1.1" / "memory.max"
            limits = (int(own.read_text()), int((Path(v2["v2"]) / "memory.max").read_text()))
            await runner.kill("1", 1, grace=1)
            await _exit_of(runner, "1")
    assert limits == (100 * mb, 100 * mb)


async def test_v2_a_job_is_born_in_its_cgroup_and_a_cancel_kills_a_double_forked_sleeper(tmp_path, v2):
    pid_file = tmp_path / "sleeper.pid"
    # The sleeper leaves the job's session and process group and its parent exits: only the
    # cgroup still knows it is the job's, and cgroup.kill must reach it.
    script = f"(setsid sleep 300 & echo $! > {pid_file}) & wait; sleep 300"
    job_dir = Path(cgroups.plan(v2, "1", 1, mem=None, cpus=None, pids_max=None)["dir"])
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=v2) as runner:
            await runner.start("1", 1, sh(script, slots=1))
            await _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
            sleeper = int(pid_file.read_text())
            await _wait_for(lambda: Path(f"/proc/{sleeper}/comm").read_text() == "sleep\n")
            # The supervisor writes its pid record just after the job started: the job may be first.
            await _wait_for(lambda: runner._records(("1", 1))[0] is not None)
            members = set(map(int, (job_dir / "cgroup.procs").read_text().split()))
            info, _ = runner._records(("1", 1))
            assert {sleeper, info["job_pid"]} <= members
            assert info["supervisor"] not in members  # the supervisor stepped back out after the spawn
            assert os.getsid(sleeper) != os.getsid(info["job_pid"])
            await runner.kill("1", 1, grace=5)
            status = await _exit_of(runner, "1")
    assert status.signal == 15
    assert start_time(sleeper) is None, "the double-forked sleeper outlived its job"
    assert status.usage is not None and status.usage.source == "cgroup"  # cpu.stat of the v2 cgroup
    assert not job_dir.exists()


async def test_v2_usage_is_read_from_the_cgroup_and_the_cgroup_goes_at_the_end(tmp_path, v2):
    busy = "/usr/bin/python3 -c 'import time\nwhile time.process_time() < 0.3: pass'"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=v2) as runner:
            await runner.start("2", 1, sh(busy))
            status = await _exit_of(runner, "2")
    assert (status.exit_code, status.oom, status.usage.source) == (0, False, "cgroup")
    assert status.usage.cpu >= 0.25  # the child's CPU, counted by the cgroup (rusage would too; the source says)
    assert not Path(cgroups.plan(v2, "2", 1, mem=None, cpus=None, pids_max=None)["dir"]).exists()


def test_v2_leftover_cgroups_are_killed_and_removed(v2):
    left = cgroups.Cgroup.create(cgroups.plan(v2, "9", 1, mem=None, cpus=None, pids_max=None))
    keep = cgroups.Cgroup.create(cgroups.plan(v2, "10", 2, mem=None, cpus=None, pids_max=None))
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        left.join(sleeper.pid)
        assert left.pids() == [sleeper.pid]
        assert cgroups.clean_leftovers(v2, keep={"10.2"}) == ["9.1"]
        assert sleeper.wait(timeout=30) == -9  # cgroup.kill
        assert not Path(left.all_dirs[0]).exists() and Path(keep.all_dirs[0]).exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        keep.remove()
