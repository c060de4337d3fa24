"""Each attempt in its own real cgroup (this machine: v1): memory limit and OOM, the kill of every
process, CPU accounting, survival of an agent restart, leftovers cleaned.  Needs root (fails
saying so without it)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent import cgroups
from reckon.daemon.agent.runner import JobRunner
from reckon.model.jobs import JobSpec

from tests.daemon.agent_real import HANG, enforcement, reap_jobs, sh, start_time  # noqa: F401 - enforcement: the fixture
from tests.unixusers import unix_users  # noqa: F401 - the fixture

MB = 1 << 20
# The system's python: the suite's own may live where the test users cannot go (/root/.pyenv).
PYTHON = "/usr/bin/python3"
ALLOCATE = f"{PYTHON} -c 'b = bytearray(200 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"survived\")'"


@pytest.fixture(autouse=True)
def reaper(tmp_path):
    yield
    reap_jobs(tmp_path)


def attempt_dirs(found: dict, job: str, attempt: int = 1) -> list[Path]:
    plan = cgroups.plan(found, job, attempt, mem=None, cpus=None, pids_max=None)
    return [Path(d) for d in ([plan["dir"]] if plan["v"] == 2 else sorted(set(plan["dirs"].values())))]


async def wait_for(predicate) -> None:
    while not predicate():
        await trio.sleep(0.01)


async def exit_of(runner: JobRunner, job: str):
    while True:
        item = await runner.exits.receive()
        if item.job == job:
            return item


async def test_a_job_past_its_memory_limit_is_oom_killed_and_the_runner_lives(tmp_path, enforcement, unix_users):
    alice = unix_users.alice
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement) as runner:
            await runner.start("1", 1, sh(ALLOCATE, cwd=str(alice.home), mem=50 * MB), owner=alice.owner())
            status = await exit_of(runner, "1")
            out, _ = runner.log_paths("1", 1)
            # The same allocation under a limit it fits in: no OOM.
            await runner.start("2", 1, sh(ALLOCATE, cwd=str(alice.home), mem=400 * MB), owner=alice.owner())
            fits = await exit_of(runner, "2")
    assert status.oom and 137 in (status.exit_code, 128 + (status.signal or 0)) and out.read_text() == ""
    assert status.usage is not None and status.usage.source == "cgroup"
    assert 40 * MB <= status.usage.max_rss <= 50 * MB
    assert (fits.oom, fits.exit_code) == (False, 0)
    assert fits.usage.max_rss >= 200 * MB
    assert not any(d.exists() for d in attempt_dirs(enforcement, "1") + attempt_dirs(enforcement, "2"))


async def test_a_kill_ends_every_process_of_the_job_even_a_double_forked_sleeper(tmp_path, enforcement):
    pid_file = tmp_path / "sleeper.pid"
    # The sleeper leaves the job's session and process group, and its parent exits: only the
    # cgroup still knows it is the job's.
    script = f"(setsid sleep 300 & echo $! > {pid_file}) & wait; sleep 300"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement) as runner:
            await runner.start("1", 1, sh(script, slots=1))
            await wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
            sleeper = int(pid_file.read_text())
            # setsid(1) has called setsid() once it has become the sleeper:
            await wait_for(lambda: Path(f"/proc/{sleeper}/comm").read_text() == "sleep\n")
            dirs = attempt_dirs(enforcement, "1")
            assert all(sleeper in map(int, (d / "cgroup.procs").read_text().split()) for d in dirs)
            assert os.getsid(sleeper) != os.getsid(_job_pid(runner, "1"))  # not in the job's session
            await runner.kill("1", 1, grace=5)
            status = await exit_of(runner, "1")
    assert status.signal == 15
    assert start_time(sleeper) is None, "the double-forked sleeper outlived its job"
    assert not any(d.exists() for d in dirs)


async def test_the_time_limit_ends_every_process_of_the_job(tmp_path, enforcement):
    pid_file = tmp_path / "sleeper.pid"
    script = f"(setsid sleep 300 & echo $! > {pid_file}) & wait; sleep 300"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement, kill_grace=1) as runner:
            await runner.start("1", 1, sh(script, time_limit=1.0))
            status = await exit_of(runner, "1")
    sleeper = int(pid_file.read_text())
    assert status.timed_out and status.signal == 15
    assert start_time(sleeper) is None, "the double-forked sleeper outlived its job's time limit"
    assert not any(d.exists() for d in attempt_dirs(enforcement, "1"))


def _job_pid(runner: JobRunner, job: str) -> int:
    info, _ = runner._records((job, 1))
    return info["job_pid"]


# Burns 1.5 s of CPU in a process of its own (a child of the shell: what a cgroup counts and a
# process group kill would miss), then prints the CPU time the kernel gave that process and the
# wall time it took, by its own clock.
BUSY = (f"{PYTHON} -c 'import os, time\nstart = time.monotonic()\nwhile time.process_time() < 1.5: pass\n"
        f"t = os.times(); print(t.user + t.system, time.monotonic() - start)'")


async def test_cpu_time_of_a_cpu_bound_job_is_its_cpu_time_and_about_its_wall_time(tmp_path, enforcement):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement) as runner:
            await runner.start("1", 1, JobSpec(name="t", command=("/bin/sh", "-c", BUSY), slots=1))
            status = await exit_of(runner, "1")
            out, _ = runner.log_paths("1", 1)
    usage = status.usage
    assert (status.exit_code, usage.source) == (0, "cgroup")
    own_cpu, own_wall = map(float, out.read_text().split())  # what the job's process itself saw
    assert abs(usage.cpu - own_cpu) <= 0.1 * own_cpu, (usage, own_cpu)
    # reckon's wall time is the job's life (its shell and interpreter start-up around the loop).
    assert own_wall <= usage.wall <= own_wall * 1.1 + 1.0, (usage, own_wall)
    assert usage.cpu <= usage.wall * 1.05
    # A CPU-bound job is on CPU all its life but for the time the machine gave its CPU to others,
    # which its own clocks measure (own_wall - own_cpu: nothing on a quiet machine): reckon's CPU
    # is within 10 % of its wall time once that is allowed for, on any load.
    assert abs(usage.cpu - usage.wall) <= 0.1 * usage.wall + (own_wall - own_cpu), (usage, own_cpu, own_wall)


async def test_without_cgroups_usage_comes_from_rusage(tmp_path):
    busy = f"{PYTHON} -c 'import time\nwhile time.process_time() < 0.5: pass'"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh(busy))
            status = await exit_of(runner, "1")
    assert status.usage.source == "rusage" and 0.5 <= status.usage.cpu <= 0.7 and status.usage.max_rss > MB
    assert not status.oom


async def test_the_cgroup_and_its_outcome_survive_an_agent_restart(tmp_path, enforcement):
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.02; done; {ALLOCATE}"
    state = tmp_path / "state"
    with trio.fail_after(HANG):
        async with JobRunner(state, cgroups=enforcement) as runner:
            await runner.start("1", 1, sh(script, mem=50 * MB, slots=1))
            await wait_for(lambda: runner._records(("1", 1))[0] is not None)
        # The runner (the agent's side) is gone; the supervisor and its cgroup are not.
        dirs = attempt_dirs(enforcement, "1")
        job_pid = _job_pid_on_disk(state)
        assert all(job_pid in map(int, (d / "cgroup.procs").read_text().split()) for d in dirs)
        if enforcement["version"] == 1:
            memory = Path(cgroups.plan(enforcement, "1", 1, mem=None, cpus=None, pids_max=None)["dirs"]["memory"])
            assert int((memory / "memory.limit_in_bytes").read_text()) == 50 * MB
        async with JobRunner(state, cgroups=enforcement) as runner:
            assert await runner.adopt([("1", 1)]) == {("1", 1): "running"}
            go.touch()
            status = await exit_of(runner, "1")
    assert status.oom and 137 in (status.exit_code, 128 + (status.signal or 0))
    assert not any(d.exists() for d in dirs)


def _job_pid_on_disk(state: Path) -> int:
    from reckon.daemon.agent.launcher import read_records

    info, _ = read_records(state / "jobs" / "1.1.run")
    return info["job_pid"]


async def test_cpus_and_pids_are_limited(tmp_path, enforcement):
    probe = tmp_path / "limits"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement, pids_max=8) as runner:
            # 20 sleepers at once cannot all start under a pids limit of 8.  The job then stays (exec:
            # no fork needed) until killed: a job that ended at once, when even $(seq 20)'s fork was
            # refused, took its cgroup with it before the limits were read (a flaky run).
            script = "(for i in $(seq 20); do sleep 5 2>/dev/null & done; wait) 2>/dev/null; exec sleep 300"
            await runner.start("1", 1, sh(script, slots=2))
            await wait_for(lambda: runner._records(("1", 1))[0] is not None)
            plan = cgroups.plan(enforcement, "1", 1, mem=None, cpus=None, pids_max=None)
            if plan["v"] == 1:
                probe.write_text((Path(plan["dirs"]["cpu"]) / "cpu.cfs_quota_us").read_text()
                                 + (Path(plan["dirs"]["pids"]) / "pids.max").read_text()
                                 + (Path(plan["dirs"]["pids"]) / "pids.events").read_text())
            else:
                probe.write_text((Path(plan["dir"]) / "cpu.max").read_text() + (Path(plan["dir"]) / "pids.max").read_text())
            await runner.kill("1", 1, grace=1)
            await exit_of(runner, "1")
    lines = probe.read_text().split("\n")
    assert lines[0] in ("200000", "200000 100000") and lines[1] == "8"


def test_leftover_cgroups_of_attempts_that_no_longer_run_are_cleaned(enforcement):
    plan = cgroups.plan(enforcement, "9", 1, mem=None, cpus=None, pids_max=None)
    kept = cgroups.plan(enforcement, "10", 2, mem=None, cpus=None, pids_max=None)
    left = cgroups.Cgroup.create(plan)
    keep = cgroups.Cgroup.create(kept)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        left.join(sleeper.pid)
        assert cgroups.clean_leftovers(enforcement, keep={"10.2"}) == ["9.1"]
        assert sleeper.wait(timeout=30) == -9
        assert not any(Path(d).exists() for d in left.all_dirs)
        assert all(Path(d).exists() for d in keep.all_dirs)
    finally:
        sleeper.kill()
        sleeper.wait()
        keep.remove()


def _pool_limits(found: dict, job: str) -> dict[str, int]:
    """The memory limit files of the cgroup all the agent's attempts are in (read while ``job`` runs:
    a v1 base directory goes with its last attempt)."""
    plan = cgroups.plan(found, job, 1, mem=None, cpus=None, pids_max=None)
    pool = Path(plan["dir"] if plan["v"] == 2 else plan["dirs"]["memory"]).parent
    names = ["memory.max"] if plan["v"] == 2 else ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    return {n: int((pool / n).read_text()) for n in names if (pool / n).exists()}


def _own_limit(found: dict, job: str) -> int:
    plan = cgroups.plan(found, job, 1, mem=None, cpus=None, pids_max=None)
    if plan["v"] == 2:
        return int((Path(plan["dir"]) / "memory.max").read_text())
    return int((Path(plan["dirs"]["memory"]) / "memory.limit_in_bytes").read_text())


def _adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


async def test_a_job_without_mem_gets_the_agents_memory_as_its_limit_and_the_next_job_runs(tmp_path, enforcement):
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.02; done; {ALLOCATE}"
    state = tmp_path / "state"
    with trio.fail_after(HANG):
        async with JobRunner(state, cgroups=enforcement, mem_cap=100 * MB) as runner:
            await runner.start("1", 1, sh(script, slots=1))  # no --mem
            await wait_for(lambda: runner._records(("1", 1))[0] is not None)
            own, pool = _own_limit(enforcement, "1"), _pool_limits(enforcement, "1")
            info, _ = runner._records(("1", 1))
            job_adj, supervisor_adj = _adj(info["job_pid"]), _adj(info["supervisor"])
            go.touch()
            status = await exit_of(runner, "1")
            await runner.start("2", 1, sh("echo still-here", slots=1))
            after = await exit_of(runner, "2")
            out, _ = runner.log_paths("2", 1)
    assert own == 100 * MB
    assert pool and set(pool.values()) == {100 * MB}, pool
    assert status.oom and 137 in (status.exit_code, 128 + (status.signal or 0))
    assert status.usage.max_rss <= 100 * MB
    # Born at +500 for the machine's OOM killer; its supervisor keeps what the launcher had.
    assert job_adj == cgroups.OOM_SCORE_ADJ_JOB and supervisor_adj == cgroups.oom_score_adj() < job_adj
    assert (after.exit_code, after.oom, out.read_text()) == (0, False, "still-here\n")


# Takes 70M, says so, then holds it until told to go.
HOLD_70M = (f"{PYTHON} -c 'import os, sys\nb = bytearray(70 << 20); b[::4096] = b\"x\" * len(b[::4096])\n"
            f"print(\"holding\", flush=True)\nwhile not os.path.exists(sys.argv[1]): os.sched_yield()\n"
            f"print(\"survived\")'")


async def test_jobs_without_mem_together_cannot_pass_what_the_agent_offers(tmp_path, enforcement):
    """Jobs without --mem count no memory in the scheduler, so several may land on one agent:
    each fits its own limit (100M), two together (140M) do not fit the agents' (100M)."""
    go = tmp_path / "go"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", cgroups=enforcement, mem_cap=100 * MB) as runner:
            await runner.start("1", 1, sh(f"{HOLD_70M} {go}", slots=1))
            out1, _ = runner.log_paths("1", 1)
            await wait_for(lambda: out1.read_text() == "holding\n")
            await runner.start("2", 1, sh(f"{HOLD_70M} {go}", slots=1))
            out2, _ = runner.log_paths("2", 1)
            # The pool's OOM kills one of them (or, were there no cap, both hold their 70M).
            await wait_for(lambda: any(runner._records((j, 1))[1] is not None for j in ("1", "2"))
                           or out2.read_text() == "holding\n")
            go.touch()
            ends = [await runner.exits.receive(), await runner.exits.receive()]
    assert sorted(e.job for e in ends) == ["1", "2"]
    killed = [e for e in ends if e.oom]
    lived = [e for e in ends if not e.oom]
    assert len(killed) == 1 and len(lived) == 1 and lived[0].exit_code == 0, ends  # one lives on


async def test_an_agent_with_less_memory_than_its_jobs_use_runs_no_new_job_and_says_why(tmp_path, enforcement):
    """An agent restarted with less memory than its running jobs hold: cgroup v1 refuses to lower
    the cap below what is in use (EBUSY), and a new job is not run, with that reason."""
    if enforcement["version"] != 1:
        pytest.skip("the refusal to lower a limit below its use is cgroup v1's")
    go = tmp_path / "go"
    state = tmp_path / "state"
    with trio.fail_after(HANG):
        async with JobRunner(state, cgroups=enforcement, mem_cap=200 * MB) as runner:
            await runner.start("1", 1, sh(f"{HOLD_70M} {go}", slots=1))
            out1, _ = runner.log_paths("1", 1)
            await wait_for(lambda: out1.read_text() == "holding\n")
        # The same agent back with 20M to offer (the holder's supervisor runs on).
        async with JobRunner(state, cgroups=enforcement, mem_cap=20 * MB) as runner:
            assert await runner.adopt([("1", 1)]) == {("1", 1): "running"}
            await runner.start("2", 1, sh("echo ran", slots=1))
            refused = await exit_of(runner, "2")
            go.touch()
            held = await exit_of(runner, "1")
    assert refused.exit_code == 126 and "Device or resource busy" in (refused.not_run or ""), refused
    assert refused.not_run.startswith("cannot cap the agent's jobs together at 20M (") and \
        refused.not_run.endswith("memory.limit_in_bytes): Device or resource busy (its running jobs use more)")
    assert (held.exit_code, held.oom) == (0, False)
