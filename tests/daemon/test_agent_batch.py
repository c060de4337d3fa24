"""Protocol version 7 on the agent, with real processes: a batch script, --open-mode, Slurm's
environment, the warning signal before the time limit and signals sent now.  Every wait is on
a condition under a hang guard; nothing is timed."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent import batchjobs
from reckon.daemon.agent.runner import JobRunner
from reckon.model.jobs import JobSpec

from tests.daemon.agent_real import HANG, reap_jobs
from tests.daemon.test_runner import Exits
from tests.unixusers import unix_users  # noqa: F401 - the fixture


@pytest.fixture(autouse=True)
def reaper(tmp_path):
    yield
    reap_jobs(tmp_path)


def batch(script: str, *args: str, **kw) -> JobSpec:
    return JobSpec(name="b", command=("job.sh", *args), script=script, **kw)


async def wait_for(path: Path) -> str:
    while not path.exists() or not path.read_text().endswith("\n"):
        await trio.sleep(0.02)
    return path.read_text()


async def test_a_batch_script_runs_from_no_file_in_its_cwd_and_is_gone_once_it_runs(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    script = '#!/bin/sh\necho "args: $*"\nls -A\n[ -e "$0" ] && echo "readable by path"\necho "$0" > path\nexit 3\n'
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, batch(script, "one", "two", cwd=str(cwd)))
            e = await Exits(runner).get("1")
            out, err = runner.log_paths("1", 1)
    assert e.exit_code == 3, err.read_text()
    lines = out.read_text().splitlines()
    assert lines == ["args: one two", "readable by path"]  # nothing in its cwd (ls -A printed nothing)
    assert (cwd / "path").read_text().startswith("/proc/self/fd/")  # run through its descriptor
    assert not list((tmp_path / "state" / "jobs").glob("*.script"))


async def test_a_batch_script_is_its_owners_and_runs_as_them(tmp_path, unix_users):
    """The agent's state directory is 0700 root's: the owner reaches the script only through the
    descriptor its supervisor hands the job, a file of the owner's own, 0700."""
    alice = unix_users.alice
    script = '#!/bin/sh\nid -u\nstat -L -c "%u %a" "$0"\n'
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, batch(script, cwd=str(alice.home)), owner=alice.owner())
            e = await Exits(runner).get("1")
            out, err = runner.log_paths("1", 1)
    assert e.exit_code == 0, err.read_text()
    assert out.read_text().splitlines() == [str(alice.uid), f"{alice.uid} 700"]


async def test_a_script_without_interpreter_line_cannot_run_and_leaves_nothing(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, batch("echo no shebang\n"))
            e = await Exits(runner).get("1")
            _, err = runner.log_paths("1", 1)
    assert e.exit_code == 126 and "cannot execute" in err.read_text()
    assert not list((tmp_path / "state" / "jobs").glob("*.script"))


async def test_an_adopted_batch_job_goes_on_reading_its_script_after_an_agent_restart(tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    script = f'#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho "second half" > {done}\n'
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as first:
            await first.start("1", 1, batch(script))
        async with JobRunner(tmp_path / "state") as second:  # the agent restarted
            assert (await second.adopt([("1", 1)]))[("1", 1)] == "running"
            go.touch()
            e = await Exits(second).get("1")
    assert e.exit_code == 0 and done.read_text() == "second half\n"


@pytest.mark.parametrize("open_mode, kept", [("append", True), (None, False), ("truncate", False)])
async def test_open_mode_of_the_output_file(tmp_path, open_mode, kept):
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    spec = JobSpec(name="o", command=("/bin/sh", "-c", "echo run"), output=str(out), open_mode=open_mode)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec)
            await Exits(runner).get("1")
            assert out.read_text() == ("before\nrun\n" if kept else "run\n")
            if open_mode is None:  # a rerun of the job (retry, requeue) keeps the earlier attempt's output
                await runner.start("1", 2, spec)
                await Exits(runner).get("1", 2)
                assert out.read_text() == "run\nrun\n"


async def test_output_patterns_of_version_7(tmp_path):
    spec = JobSpec(name="nm", command=("/bin/sh", "-c", "echo x"), output=str(tmp_path / "%A_%I-%x-%u-%N.out"),
                   array_id="7", array_index=3)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("9", 1, spec)
            await Exits(runner).get("9")
    host = os.uname().nodename.split(".")[0]
    assert (tmp_path / f"7_3-nm-{pwd.getpwuid(os.getuid()).pw_name}-{host}.out").read_text() == "x\n"


async def test_slurm_env_and_reckon_controller(tmp_path):
    spec = JobSpec(name="sl", command=("/bin/sh", "-c", "env"), slurm_env=True, slots=2, mem=3 << 20,
                   cwd=str(tmp_path), labels=(("partition", "gpu"),), array_id="4", array_index=1,
                   env=(("SLURM_JOB_ID", "forged"),))
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", controller="ws://ctl.example:7420") as runner:
            await runner.start("6", 2, spec)
            await Exits(runner).get("6", 2)
            out, _ = runner.log_paths("6", 2)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    expected = {"SLURM_JOB_ID": "6", "SLURM_JOBID": "6", "SLURM_JOB_NAME": "sl", "SLURM_NTASKS": "1",
                "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1",
                "SLURM_CPUS_PER_TASK": "2", "SLURM_MEM_PER_NODE": "3", "SLURM_SUBMIT_DIR": str(tmp_path),
                "SLURM_CLUSTER_NAME": "reckon", "SLURM_JOB_PARTITION": "gpu", "SLURM_RESTART_COUNT": "1",
                "SLURM_ARRAY_JOB_ID": "4", "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_UID": str(os.getuid()),
                "RECKON_CONTROLLER": "ws://ctl.example:7420"}
    assert {k: env.get(k) for k in expected} == expected
    assert env["SLURM_JOB_NODELIST"] == os.uname().nodename.split(".")[0]


async def test_no_slurm_variables_without_slurm_env(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, JobSpec(name="p", command=("/bin/sh", "-c", "env")))
            await Exits(runner).get("1")
            out, _ = runner.log_paths("1", 1)
    assert "SLURM_" not in out.read_text()


# ---- signals: the warning before the time limit, and signals now --------------------------------

# The top process traps USR1 and so does its child; each writes its own file.  `sleep & wait`: a
# shell runs a trap only between commands, and `wait` is one the signal interrupts.
_TRAPS = """#!/bin/sh
trap 'echo top > {d}/top; exit 0' USR1
sh -c 'trap "echo child > {d}/child; exit 0" USR1; echo up > {d}/up; while :; do sleep 0.05 & wait; done' &
wait
wait
"""


@pytest.mark.parametrize("batch_only, gets", [(True, "top"), (False, "child")])
async def test_the_warning_signal_comes_before_the_time_limit(tmp_path, batch_only, gets):
    spec = batch(_TRAPS.format(d=tmp_path), time_limit=3, warn_signal=signal.SIGUSR1, warn_before=2,
                 warn_batch_only=batch_only)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec)
            e = await Exits(runner).get("1")
    assert await wait_for(tmp_path / gets) == f"{gets}\n"
    other = "child" if gets == "top" else "top"
    assert not (tmp_path / other).exists()  # only where it was asked to go
    if batch_only:  # the job's own trap ended it: the warning came before the kill
        assert (e.exit_code, e.timed_out) == (0, False)


@pytest.mark.parametrize("target, gets", [({"batch_only": True}, {"top"}), ({"full": True}, {"top", "child"}),
                                          ({}, {"child"})])
async def test_a_signal_now_reaches_what_scancel_would(tmp_path, target, gets):
    """batch_only: the top process; full: every process; neither: all but the top (the steps)."""
    # The top's trap waits for its child: only a signal that reaches the child ends the job by itself.
    script = _TRAPS.format(d=tmp_path).replace("exit 0' USR1", "wait; exit 0' USR1", 1)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, batch(script))
            await wait_for(tmp_path / "up")
            assert await runner.send_signal("1", 1, signal.SIGUSR1, **target) >= 1
            for name in gets:
                await wait_for(tmp_path / name)
            if "child" not in gets:
                assert not (tmp_path / "child").exists()  # the child was not signalled: it never writes
                await runner.kill("1", 1, grace=0.1)
            e = await Exits(runner).get("1")
            assert await runner.send_signal("1", 1, signal.SIGUSR1) == 0  # over: nothing to signal
    assert {name for name in ("top", "child") if (tmp_path / name).exists()} == gets
    if "child" in gets:
        assert e.exit_code == 0


def test_job_processes_finds_the_process_group(tmp_path):
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"], process_group=0)
    try:
        deadline = 300
        while len(batchjobs.job_processes(proc.pid)) < 2 and deadline:
            time.sleep(0.02)
            deadline -= 1
        assert proc.pid in batchjobs.job_processes(proc.pid) and len(batchjobs.job_processes(proc.pid)) >= 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_script_file_is_private(tmp_path):
    path = str(tmp_path / "x.script")
    batchjobs.write_script(path, "#!/bin/sh\n")
    assert os.stat(path).st_mode & 0o777 == 0o700
    with pytest.raises(FileExistsError):  # an attempt runs once
        batchjobs.write_script(path, "#!/bin/sh\n")
    fd = batchjobs.open_script(path, None, None)
    try:
        assert not os.path.exists(path) and os.get_inheritable(fd)
    finally:
        os.close(fd)

