"""srun inside a job (it becomes the command, as step 0, with Slurm's output patterns) and
scancel's id syntax, without a controller; sbatch's dependency ids against a fake client."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from reckon.daemon.slurm import sbatch, scancel
from reckon.daemon.slurm.common import SlurmCommandError

SRUN = [sys.executable, "-c", "import sys; from reckon.daemon.slurm.srun import main; sys.exit(main())"]


def _job_env(tmp_path, **extra):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "train",
           "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_NODELIST": "n1",
           "RECKON_CONTROLLER": "ws://127.0.0.1:1",  # never reached: inside a job srun asks no controller
           "RECKON_STEP_DIR": str(tmp_path)}  # the step counters: this test's own
    env.update(extra)
    return env


def test_srun_in_a_job_becomes_the_command_as_step_0(tmp_path):
    out = subprocess.run(SRUN + ["--unbuffered", "--output", str(tmp_path / "%A_%a_%t_log.out"), "--error",
                                 str(tmp_path / "%A_%a_%t_log.err"), "sh", "-c",
                                 "echo $SLURM_STEP_ID $SLURM_PROCID $SLURM_NTASKS $SLURM_STEP_NODELIST $$ "
                                 "$SLURM_TASK_PID; echo oops >&2; exit 5"],
                         capture_output=True, text=True, timeout=60, env=_job_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 5 and out.stdout == "" and out.stderr == "", out
    step, procid, ntasks, nodes, pid, task_pid = (tmp_path / "40_2_0_log.out").read_text().split()
    assert (step, procid, ntasks, nodes) == ("0", "0", "1", "n1") and pid == task_pid  # exec: the same process
    assert (tmp_path / "40_2_0_log.err").read_text() == "oops\n"


def test_srun_in_a_job_appends_when_the_job_does_and_stderr_follows_output(tmp_path):
    log = tmp_path / "42.log"
    log.write_text("batch line\n")
    env = _job_env(tmp_path, SLURM_OPEN_MODE="a")
    out = subprocess.run(SRUN + ["-o", str(tmp_path / "%j.log"), "sh", "-c", "echo out; echo err >&2"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert out.returncode == 0, out
    assert log.read_text() == "batch line\nout\nerr\n"
    out = subprocess.run(SRUN + ["-o", str(log), "--open-mode=truncate", "echo", "fresh"], capture_output=True,
                         text=True, timeout=60, env=env, cwd=tmp_path)
    assert log.read_text() == "fresh\n"


def test_srun_refusals_and_exec_failures_are_one_line(tmp_path):
    env = _job_env(tmp_path)
    for args, line in ((["--pty", "bash"], "srun: error: --pty is not supported by reckon (reckon's jobs have no "
                                           "terminal)\n"),
                       (["-N", "3", "true"], "srun: error: --nodes=3: reckon runs single-node jobs (at most 1 node)\n"),
                       (["--ntasks-per-node=2", "true"],  # refused, not run as one task
                        "srun: error: --ntasks-per-node=2: reckon runs one task per job (at most 1)\n"),
                       (["/nonexistent/cmd"], "srun: error: execve(): /nonexistent/cmd: No such file or directory\n"),
                       ([], "srun: error: No command given to execute.\n")):
        out = subprocess.run(SRUN + args, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert (out.returncode != 0, out.stdout, out.stderr) == (True, "", line), out


def test_scancel_ids():
    assert scancel.job_ids(["1,2_[3-5,7]", "9_1", "10_[0-6:3]"]) == [
        "1", "2_3", "2_4", "2_5", "2_7", "9_1", "10_0", "10_3", "10_6"]
    for bad in ("1.0", "x", "1_x", "1_[a]"):
        with pytest.raises(SlurmCommandError):
            scancel.job_ids([bad])
    assert scancel.parse_args(["123", "--signal", "USR2", "-b", "--jobname=x"]) == (
        {"signal": "USR2", "batch": None, "name": "x"}, ["123"])  # options after ids: submitit's order
    with pytest.raises(SlurmCommandError, match="--interactive is not supported"):
        scancel.parse_args(["-i", "1"])
    assert scancel.parse_args(["1", "2", "--clusters=all"])[1] == ["1", "2"]  # Snakemake's cancel
    with pytest.raises(SlurmCommandError, match="reckon is one cluster, named reckon"):
        scancel.parse_args(["1", "-M", "other"])


def test_scancel_with_nothing_named_is_slurms_error(capsys):
    assert scancel.main([]) == 1
    assert capsys.readouterr().err == "scancel: error: No job identification provided\n"


def test_scancel_refuses_a_bad_line_with_slurms_status_1(capsys):
    # Slurm 22.05's scancel exits 1 on a bad option, id or signal (its sbatch and srun exit 255).
    for argv, line in ((["--bogus"], "scancel: unrecognized option '--bogus'"),
                       (["1_x"], "scancel: error: Invalid job id 1_x"),
                       (["--signal=BOGUS", "1"], "scancel: error: Invalid signal specification: 'BOGUS'")):
        assert scancel.main(argv) == 1, argv
        assert capsys.readouterr().err.splitlines()[0] == line


class FakeClient:
    def __init__(self, jobs):
        self.jobs = jobs
        self.calls = []

    def call(self, op, **fields):
        self.calls.append((op, fields))
        assert op == "query"
        wanted = set(fields["ids"])
        return {"jobs": [j for j in self.jobs if j["id"] in wanted or j.get("array_id") in wanted
                         or f"{j.get('array_id')}_{j.get('array_index')}" in wanted]}


def test_dependencies_on_an_array_mean_all_its_members():
    client = FakeClient([{"id": "5", "array_id": "5", "array_index": 0}, {"id": "6", "array_id": "5", "array_index": 1},
                         {"id": "9"}])
    spec = {"after": ["5", "9"], "after_any": ["5_1"], "after_not_ok": ["77"]}
    sbatch.expand_dependencies(client, spec)
    assert spec == {"after": ["5", "6", "9"], "after_any": ["6"], "after_not_ok": ["77"]}
    assert len(client.calls) == 1
    sbatch.expand_dependencies(client, {"name": "x"})
    assert len(client.calls) == 1  # no dependency: no request
