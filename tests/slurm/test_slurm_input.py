"""Issue #21's Slurm-layer rest, without a controller: sbatch's SBATCH_* and srun's SLURM_* input
variables (command line > variables > #SBATCH lines), srun's step numbers inside a job (distinct
under concurrent sruns), ``srun -l``'s ``0: `` labels, and pending arrays' task strings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from reckon.daemon.slurm import options as table
from reckon.daemon.slurm import sbatch, srun
from reckon.daemon.slurm.common import SlurmCommandError
from reckon.daemon.slurm.formats import array_task_str
from reckon.daemon.slurm.labels import Labeller
from reckon.daemon.slurm.steps import next_step

SRUN = [sys.executable, "-c", "import sys; from reckon.daemon.slurm.srun import main; sys.exit(main())"]
SBATCH_OPTIONS = table.by_name(table.SBATCH)
SRUN_OPTIONS = table.by_name(table.SRUN)


def _opts(script: list[str], cmdline: list[str], environ: dict[str, str]):
    script_opts, _ = sbatch.parse_args(script)
    cmd, _ = sbatch.parse_args(cmdline)
    return sbatch.with_environment(script_opts, cmd, environ, table.SBATCH_ENV, SBATCH_OPTIONS)


def test_every_input_variable_names_an_option_of_its_command():
    assert set(table.SBATCH_ENV.values()) <= set(SBATCH_OPTIONS)
    assert set(table.SRUN_ENV.values()) <= set(SRUN_OPTIONS)
    assert "SLURM_JOB_ID" not in table.SRUN_ENV  # srun's --jobid: reckon's srun is in that job


def test_the_command_line_beats_the_variables_which_beat_the_script():
    env = {"SBATCH_JOB_NAME": "env", "SBATCH_TIMELIMIT": "5", "SBATCH_PARTITION": "envp", "SBATCH_WAIT": "",
           "SBATCH_ARRAY_INX": "1,3,5%2", "SBATCH_OPEN_MODE": "a", "SBATCH_EXPORT": "NONE", "UNRELATED": "x"}
    opts, origin = _opts(["-J", "script", "-t", "9", "-A", "lab"], ["-J", "cmd"], env)
    assert opts["job-name"] == "cmd" and opts["time"] == "5" and opts["account"] == "lab"
    assert opts["partition"] == "envp" and opts["array"] == "1,3,5%2" and opts["wait"] is None
    assert origin == {"time": "SBATCH_TIMELIMIT", "partition": "SBATCH_PARTITION", "wait": "SBATCH_WAIT",
                      "array": "SBATCH_ARRAY_INX", "open-mode": "SBATCH_OPEN_MODE", "export": "SBATCH_EXPORT"}
    spec = sbatch.spec_of(opts, "#!/bin/sh\n", ["job.sh"], environ={"PATH": "/bin"}, cwd="/w", array=True,
                          default_name="job.sh")
    assert spec["time_limit"] == 300 and spec["open_mode"] == "append" and spec["env"] == [["SLURM_OPEN_MODE", "a"]]
    assert spec["partition"] == "envp" and spec["output"] == "slurm-%A_%I.out"


def test_a_variable_reckon_does_not_implement_is_one_line_naming_it(capsys):
    opts, origin = _opts([], [], {"SBATCH_NO_KILL": "1", "SBATCH_HINT": "nomultithread", "SLURM_HINT": "x"})
    sbatch.refuse_and_warn(opts, origin=origin)
    assert capsys.readouterr().err.splitlines() == [
        "sbatch: warning: SBATCH_HINT (--hint) is ignored by reckon (reckon does not tune CPU or memory binding)",
        "sbatch: warning: SBATCH_NO_KILL (-k/--no-kill) is ignored by reckon (reckon runs single-node jobs)"]
    opts, origin = _opts([], [], {"SBATCH_INPUT": "in.txt"})
    with pytest.raises(SlurmCommandError, match=r"^SBATCH_INPUT \(-i/--input\) is not supported by reckon"):
        sbatch.refuse_and_warn(opts, origin=origin)
    opts, origin = _opts([], ["--no-kill"], {"SBATCH_NO_KILL": "1"})  # the command line's: named as an option
    sbatch.refuse_and_warn(opts, origin=origin)
    assert capsys.readouterr().err == ("sbatch: warning: -k/--no-kill is ignored by reckon (reckon runs "
                                       "single-node jobs)\n")


def test_pending_array_task_strings_are_slurms():
    assert array_task_str([1, 3, 5]) == "1,3,5"
    assert array_task_str(list(range(0, 100, 4))) == "0-96:4"  # Slurm's step form: > 5 tasks over > 10
    assert array_task_str([0, 4, 8, 12]) == "0,4,8,12"
    assert array_task_str([1, 2, 3, 7, 10, 15, 20]) == "1-3,7,10,15,20"
    long = array_task_str(list(range(0, 400, 3)) + [401])
    assert len(long) == 63 and long.endswith("...")


# ---- srun inside a job ----------------------------------------------------------------------


def _job_env(tmp_path, **extra):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "train",
           "SLURM_JOB_NODELIST": "n1", "RECKON_CONTROLLER": "ws://127.0.0.1:1", "RECKON_ATTEMPT": "1",
           "RECKON_STEP_DIR": str(tmp_path)}
    env.update(extra)
    return env


def test_steps_count_per_attempt_and_never_twice_under_concurrent_sruns(tmp_path):
    env = _job_env(tmp_path)
    show = ["sh", "-c", "echo $SLURM_STEP_ID $SLURM_STEPID"]
    first = subprocess.run(SRUN + show, capture_output=True, text=True, timeout=60, env=env)
    assert first.stdout == "0 0\n" and first.stderr == "", first
    runs = [subprocess.Popen(SRUN + show, stdout=subprocess.PIPE, text=True, env=env) for _ in range(6)]
    outs = [p.communicate(timeout=60)[0] for p in runs]
    assert sorted(int(o.split()[0]) for o in outs) == [1, 2, 3, 4, 5, 6]
    again = subprocess.run(SRUN + show, capture_output=True, text=True, timeout=60, env={**env, "RECKON_ATTEMPT": "2"})
    assert again.stdout == "0 0\n"  # a new attempt numbers its steps from 0
    assert (tmp_path / f"reckon-steps-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_a_counter_directory_that_is_not_the_callers_own_is_not_used(tmp_path):
    folder = tmp_path / f"reckon-steps-{os.getuid()}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert next_step("42", "1", str(tmp_path)) is None
    out = subprocess.run(SRUN + ["sh", "-c", "echo $SLURM_STEP_ID"], capture_output=True, text=True, timeout=60,
                         env=_job_env(tmp_path))
    assert out.stdout == "0\n" and out.stderr == (f"srun: warning: no step counter could be kept in {tmp_path}: "
                                                   "this step is numbered 0\n")


def test_labels_put_the_task_number_before_each_line(tmp_path):
    out = subprocess.run(SRUN + ["-l", "sh", "-c", "echo a; echo b >&2; printf 'c\\nd'; exit 3"], capture_output=True,
                         timeout=60, env=_job_env(tmp_path))
    assert (out.returncode, out.stdout, out.stderr) == (3, b"0: a\n0: c\n0: d", b"0: b\n"), out
    out = subprocess.run(SRUN + ["-o", str(tmp_path / "%j.%s.out"), "sh", "-c", "echo in-file"], timeout=60,
                         env=_job_env(tmp_path, SLURM_LABELIO="1"))  # the variable: srun's -l
    assert out.returncode == 0 and (tmp_path / "42.1.out").read_text() == "0: in-file\n"  # step 1: %s
    out = subprocess.run(SRUN + ["--label", "sh", "-c", "kill -TERM $$"], capture_output=True, timeout=60,
                         env=_job_env(tmp_path))
    assert out.returncode == -signal.SIGTERM  # srun ends as its command did


def test_srun_reads_its_input_variables(tmp_path):
    env = _job_env(tmp_path, SLURM_STDOUTMODE=str(tmp_path / "o-%j.txt"), SLURM_OPEN_MODE="a")
    (tmp_path / "o-42.txt").write_text("before\n")
    out = subprocess.run(SRUN + ["echo", "after"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and (tmp_path / "o-42.txt").read_text() == "before\nafter\n", out
    out = subprocess.run(SRUN + ["true"], capture_output=True, text=True, timeout=60,
                         env=_job_env(tmp_path, SLURM_CPU_BIND="cores"))
    assert out.stderr == ("srun: warning: SLURM_CPU_BIND (--cpu-bind) is ignored by reckon (reckon does not tune "
                          "CPU or memory binding)\n")


def test_the_labeller_keeps_line_state_across_chunks():
    lab = Labeller(None)
    assert [lab.label(c) for c in (b"a\nb", b"c\n", b"", b"\n\nx\n", b"y")] == [
        b"0: a\n0: b", b"c\n", b"", b"0: \n0: \n0: x\n", b"0: y"]
    assert srun.step_env({"SLURM_JOB_NODELIST": "n1"}, 3)["SLURM_STEPID"] == "3"


def test_a_pending_list_array_is_one_row_in_slurms_form():
    from reckon.daemon.slurm.formats import array_rows

    jobs = [{"id": str(10 + i), "array_id": "10", "array_index": index, "state": "PENDING", "array_max": 2}
            for i, index in enumerate((1, 3, 5))]
    [row] = array_rows(jobs, expand=False)
    assert row["_slurm_id"] == "10_[1,3,5%2]"
    assert len(array_rows(jobs, expand=True)) == 3


def test_the_step_gets_sigpipe_back(tmp_path):
    # Python ignores SIGPIPE and exec keeps an ignored signal ignored: the command must not inherit it.
    for label in ([], ["-l"]):
        out = subprocess.run(SRUN + label + ["sh", "-c", "grep SigIgn /proc/self/status"], capture_output=True,
                             text=True, timeout=60, env=_job_env(tmp_path))
        ignored = int(out.stdout.split()[-1], 16)
        assert not ignored & (1 << (signal.SIGPIPE - 1)), out
