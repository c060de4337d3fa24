"""sbatch, srun and scancel end to end: the launchers `reckon slurm-commands` writes, run as a
workflow tool runs them, against a real controller and agent on loopback (tests/e2e's cluster).

The shapes are the tools' own: submitit's ``sbatch FILE`` (its #SBATCH block and its ``srun
--unbuffered --output ...`` line), Snakemake's ``sbatch --parsable ... --wrap``.  The real
Slurm commands this machine may have are never run: the launchers are called by path and
their directory comes first on the jobs' PATH.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import HANG, cluster, hang_guard, hermetic_env, reckon_argv, wait_for  # noqa: F401 (fixtures)

# With tests/e2e's group (tests/conftest.py): one real cluster at a time on the e2e worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]


def _commands(cluster) -> Path:
    bin_dir = cluster.base / "slurm-bin"
    out = subprocess.run(reckon_argv() + ["slurm-commands", str(bin_dir)], capture_output=True, text=True,
                         timeout=HANG)
    assert out.returncode == 0, out
    return bin_dir


def _env(cluster, bin_dir: Path) -> dict[str, str]:
    # RECKON_STEP_DIR: the jobs' srun step counters under this test's own directory, not /tmp
    env = hermetic_env(RECKON_CONTROLLER=cluster.url, RECKON_STEP_DIR=str(cluster.base))
    env.pop("SLURM_JOB_ID", None)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _run(cluster, bin_dir: Path, command: str, *args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / command), *args], capture_output=True, text=True, timeout=HANG,
                          env=_env(cluster, bin_dir), cwd=cwd or cluster.base, **kw)


SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --array=0-2%2
#SBATCH --cpus-per-task=1
#SBATCH --error={logs}/%A_%a_0_log.err
#SBATCH --job-name=submitit
#SBATCH --mem=64MB
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output={logs}/%A_%a_0_log.out
#SBATCH --signal=USR2@90
#SBATCH --time=5
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output {logs}/%A_%a_%t_log.out --error {logs}/%A_%a_%t_log.err sh -c 'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID step $SLURM_STEP_ID procid $SLURM_PROCID ntasks $SLURM_NTASKS"; echo warn >&2'
"""


def test_submitit_and_snakemake_shapes_wait_and_hold(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    logs = cluster.base / "logs"
    logs.mkdir()
    script = cluster.base / "submission_file.sh"
    script.write_text(SUBMITIT.format(logs=logs))

    out = _run(cluster, bin_dir, "sbatch", str(script))  # submitit: `sbatch FILE`, then its regex on stdout
    assert out.returncode == 0 and out.stderr == "", out
    assert out.stdout.startswith("Submitted batch job "), out
    array = out.stdout.split()[-1]
    members = [j for j in cluster.jobs().values() if j.get("array_id") == array]
    assert sorted(j["array_index"] for j in members) == [0, 1, 2]
    cluster.wait_jobs([j["id"] for j in members], ("COMPLETED",))
    for job in members:
        index = job["array_index"]
        text = (logs / f"{array}_{index}_0_log.out").read_text()
        assert f"task {index} of {array} step 0 procid 0 ntasks 1\n" in text, text
        assert "warn" in (logs / f"{array}_{index}_0_log.err").read_text()
    shown = cluster.job(members[0]["id"])
    assert shown["labels"] == {"wckey": "submitit"} and shown["time_limit"] == 300
    # A dependency on the array means all of its jobs (reckon's `after` of the first alone would not).
    out = _run(cluster, bin_dir, "sbatch", "--parsable", f"--dependency=afterok:{array}", "--wrap", "true")
    assert out.returncode == 0, out
    assert sorted(cluster.job(out.stdout.strip())["after"]) == sorted(j["id"] for j in members)

    # Snakemake's slurm executor: --parsable, --export=ALL, --comment, the command by --wrap.
    log = cluster.base / "rule.log"
    out = _run(cluster, bin_dir, "sbatch", "--parsable", "--job-name", "uuid-1", "--output", str(log),
               "--export=ALL", "--comment", "rule_a_wildcards", "-A", "lab", "-p", "main", "-t", "10",
               "--mem", "100", "--ntasks=1", "--cpus-per-task=1", "-D", str(cluster.base),
               "--wrap", "echo snake $SLURM_JOB_ID $SLURM_JOB_NAME $SLURM_CPUS_PER_TASK")
    assert out.returncode == 0 and out.stderr == "", out
    job = out.stdout.strip()
    assert out.stdout == f"{job}\n" and job.isdigit()
    cluster.wait_job(job, ("COMPLETED",))
    assert log.read_text() == f"snake {job} uuid-1 1\n"
    shown = cluster.job(job)
    assert shown["labels"] == {"account": "lab", "comment": "rule_a_wildcards", "partition": "main"}

    # -W: sbatch waits and exits with the job's exit code; a warned option is one line.
    out = _run(cluster, bin_dir, "sbatch", "-W", "--mail-type=END", "--wrap", "exit 3")
    assert out.returncode == 3, out
    assert out.stderr == "sbatch: warning: --mail-type is ignored by reckon (reckon sends no mail)\n"
    out = _run(cluster, bin_dir, "sbatch", "-W", "--array=1-2", "--wrap", "exit $SLURM_ARRAY_TASK_ID")
    assert out.returncode == 2, out  # an array: the highest exit code of its jobs
    # -H: held at submit; refused and multi-node options are one line, nothing submitted.
    out = _run(cluster, bin_dir, "sbatch", "-H", "--parsable", "--wrap", "true")
    held = out.stdout.strip()
    assert out.returncode == 0 and cluster.job(held)["held"] is True, out
    before = len(cluster.jobs())
    for args, line in ((["-N", "2"], "sbatch: error: --nodes=2: reckon runs single-node jobs (at most 1 node)\n"),
                       (["--deadline=now+1hour"], "sbatch: error: --deadline is not supported by reckon (reckon "
                                                   "has no deadlines)\n")):
        out = _run(cluster, bin_dir, "sbatch", *args, "--wrap", "true")
        assert (out.returncode, out.stdout, out.stderr) == (1, "", line)
    assert len(cluster.jobs()) == before
    # --begin (issue #21): the job waits, reason BeginTime; singletons of one name: Dependency.
    submitted = time.time()
    later = _run(cluster, bin_dir, "sbatch", "--parsable", "--begin=now+1hour", "--wrap", "true").stdout.strip()
    assert 3590 < cluster.job(later)["begin"] - submitted < 3610
    solo = [_run(cluster, bin_dir, "sbatch", "--parsable", "-J", "solo", "-d", "singleton", "--wrap", "sleep 600")
            .stdout.strip() for _ in range(2)]
    wait_for(lambda: cluster.job(solo[0])["state"] == "RUNNING", what="the first singleton")
    out = _run(cluster, bin_dir, "squeue", "-h", "-o", "%i %r %E", "-j", f"{later},{solo[1]}")
    assert out.stdout.splitlines() == [f"{later} BeginTime (null)", f"{solo[1]} Dependency singleton(unfulfilled)"]
    assert cluster.job(later)["state"] == cluster.job(solo[1])["state"] == "PENDING"
    _run(cluster, bin_dir, "scancel", later, *solo)
    # A begin two seconds ahead: the controller's tick (every second) lets it start then, not before.
    soon = _run(cluster, bin_dir, "sbatch", "--parsable", "--begin=now+2", "--wrap", "true").stdout.strip()
    done = wait_for(lambda: (j := cluster.job(soon))["state"] == "COMPLETED" and j, what="the --begin job")
    assert done["started_at"] >= done["begin"]


STEPS = """#!/bin/sh
#SBATCH --output={out}/%A_%a.out
echo "array $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP"
srun sh -c 'echo "step $SLURM_STEP_ID"' &
srun sh -c 'echo "step $SLURM_STEP_ID"' &
wait
srun --label sh -c 'echo "last $SLURM_STEPID"'
"""


def test_a_list_array_and_numbered_steps(cluster):
    """Slurm's --array list with a step and a throttle, from SBATCH_ARRAY_INX under the command line's
    -J; in each member, three sruns (two at once) as steps 0, 1, 2 and the last one labelled."""
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    out_dir = cluster.base / "steps"
    out_dir.mkdir()
    script = cluster.base / "steps.sh"
    script.write_text(STEPS.format(out=out_dir))
    env = {**_env(cluster, bin_dir), "SBATCH_ARRAY_INX": "1,4-10:3%2", "SBATCH_JOB_NAME": "env-name"}
    out = subprocess.run([str(bin_dir / "sbatch"), "--parsable", "-J", "steps", str(script)], capture_output=True,
                         text=True, timeout=HANG, env=env, cwd=cluster.base)
    assert out.returncode == 0 and out.stderr == "", out
    array = out.stdout.strip()
    members = [j for j in cluster.jobs().values() if j.get("array_id") == array]
    assert sorted(j["array_index"] for j in members) == [1, 4, 7, 10]
    assert {j["name"] for j in members} == {"steps"} and {j["array_max"] for j in members} == {2}
    cluster.wait_jobs([j["id"] for j in members], ("COMPLETED",))
    for job in members:
        lines = (out_dir / f"{array}_{job['array_index']}.out").read_text().splitlines()
        assert lines[0] == "array 4 1 10 3" and lines[3] == "0: last 2", lines
        assert sorted(lines[1:3]) == ["step 0", "step 1"], lines


def test_srun_outside_a_job_streams_its_output_and_exits_with_its_code(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    out = _run(cluster, bin_dir, "srun", "-l", "-J", "step", "sh", "-c",
               "echo out $SLURM_NTASKS $SLURM_STEP_ID; echo err >&2; exit 4")
    assert out.returncode == 4, out
    assert out.stdout == "0: out 1 0\n"  # --label, step 0 of its own job
    assert "0: err\n" in out.stderr and "srun: error: a1: task 0: Exited with exit code 4" in out.stderr
    [job] = [j for j in cluster.jobs().values() if j["name"] == "step"]
    assert job["state"] == "FAILED" and job["exit_code"] == 4

    # Ctrl-C cancels the job.
    # Ctrl-C as a terminal delivers it: to a process whose SIGINT is neither ignored nor blocked.
    # Twice in clean-clone runs of the whole suite srun never saw it (fine alone): an ignored or
    # blocked SIGINT is inherited through exec, and srun rightly keeps an ignored one ignored.
    proc = subprocess.Popen([str(bin_dir / "srun"), "-J", "long", "sleep", "300"], env=_env(cluster, bin_dir),
                            cwd=cluster.base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    try:
        long = cluster.wait_for(lambda: [j for j in cluster.jobs().values()
                                         if j["name"] == "long" and j["state"] == "RUNNING"], what="long runs")[0]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 130 and f"srun: Job {long['id']} cancelled" in err, err
        cluster.wait_job(long["id"], ("CANCELLED",))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _interruptible() -> None:
    """In the child before its exec: SIGINT neither ignored nor blocked, whatever the test
    process inherited or a library of its set."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_scancel_ids_array_members_names_and_unknown_ids(cluster):
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    out = _run(cluster, bin_dir, "sbatch", "--parsable", "--array=0-3", "-J", "sleeper", "--wrap", "sleep 300")
    array = out.stdout.strip()
    assert out.returncode == 0 and array.isdigit(), out
    members = {j["array_index"]: j["id"] for j in cluster.jobs().values() if j.get("array_id") == array}
    out = _run(cluster, bin_dir, "scancel", f"{array}_1")
    assert (out.returncode, out.stdout, out.stderr) == (0, "", ""), out
    cluster.wait_job(members[1], ("CANCELLED",))
    assert cluster.job(members[0])["state"] in ("PENDING", "RUNNING")
    out = _run(cluster, bin_dir, "scancel", "99999")
    assert out.returncode == 1 and out.stderr.startswith("scancel: error: Kill job error on job id 99999: "), out
    assert len(out.stderr.splitlines()) == 1
    out = _run(cluster, bin_dir, "scancel", "--name", "sleeper", "-t", "PENDING,RUNNING")
    assert out.returncode == 0, out
    cluster.wait_jobs(list(members.values()), ("CANCELLED",))

    # Signals: scancel -b --signal to the batch shell now; --signal=B:SIG@SECS before the time limit.
    script = cluster.base / "trap.sh"
    script.write_text("#!/bin/sh\ntrap 'echo got $1 >> \"$1.sig\"; exit 0' USR1\ntouch \"$1.ready\"\n"
                      "while :; do sleep 0.1; done\n")
    out = _run(cluster, bin_dir, "sbatch", "--parsable", str(script), "now")
    now = out.stdout.strip()
    cluster.wait_for(lambda: (cluster.base / "now.ready").exists(), what="the trap is set")
    out = _run(cluster, bin_dir, "scancel", now, "-b", "--signal", "USR1")
    assert (out.returncode, out.stderr) == (0, ""), out
    assert cluster.wait_job(now, ("COMPLETED",))["exit_code"] == 0
    assert (cluster.base / "now.sig").read_text() == "got now\n"
    # Without -b: the job's steps (here the srun the batch shell waits for), not the batch shell.
    steps = cluster.base / "steps.sh"
    steps.write_text("#!/bin/sh\nsrun sh -c \"trap 'echo step >> step.sig; exit 0' USR1; touch step.ready; "
                     "while :; do sleep 0.1; done\"\necho shell-lived >> step.sig\n")
    out = _run(cluster, bin_dir, "sbatch", "--parsable", str(steps))
    stepped = out.stdout.strip()
    cluster.wait_for(lambda: (cluster.base / "step.ready").exists(), what="the step's trap is set")
    out = _run(cluster, bin_dir, "scancel", "--signal=USR1", stepped)
    assert (out.returncode, out.stderr) == (0, ""), out
    assert cluster.wait_job(stepped, ("COMPLETED",))["exit_code"] == 0
    assert (cluster.base / "step.sig").read_text() == "step\nshell-lived\n"
    out = _run(cluster, bin_dir, "sbatch", "--parsable", "-t", "0:05", "--signal=B:USR1@3", str(script), "warn")
    warned = out.stdout.strip()
    assert cluster.wait_job(warned, ("COMPLETED",))["exit_code"] == 0, cluster.job(warned)
    assert (cluster.base / "warn.sig").read_text() == "got warn\n"


def test_a_command_waits_for_a_controller_that_restarts(cluster):
    """While no controller answers (a restart, a failover), a command keeps trying to connect for
    $RECKON_SLURM_CONNECT_WAIT seconds (Slurm's commands retry slurmctld too): a workflow tool's
    sbatch during a restart submits once the controller is back; with 0 it fails at once."""
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    cluster.stop("controller")
    env = {**_env(cluster, bin_dir), "RECKON_SLURM_CONNECT_WAIT": "0"}
    out = subprocess.run([str(bin_dir / "sbatch"), "--parsable", "--wrap", "true"], capture_output=True, text=True,
                         timeout=HANG, env=env, cwd=cluster.base)
    assert out.returncode == 1 and "controller unreachable" in out.stderr, out
    env["RECKON_SLURM_CONNECT_WAIT"] = "60"
    proc = subprocess.Popen([str(bin_dir / "sbatch"), "--parsable", "-J", "patient", "--wrap", "true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cluster.base)
    try:
        # Its first tries meet no controller (a controller's start takes far longer than a
        # command's first connect, and the first run above shows such a try fails); then it is back.
        cluster.start_controller()
        stdout, stderr = proc.communicate(timeout=HANG)
        assert proc.returncode == 0 and stdout.strip().isdigit(), (stdout, stderr)
        assert cluster.wait_job(stdout.strip())["state"] == "COMPLETED"
        assert [j["name"] for j in cluster.jobs().values()] == ["patient"]  # once, and only it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


REQUEUE_ONCE = """#!/bin/sh
#SBATCH --job-name=requeue-once
if [ ! -e {marker} ]; then
    touch {marker}
    scontrol requeue "$SLURM_JOB_ID" || exit 7
    sleep 60
fi
echo "attempt $RECKON_ATTEMPT"
"""


def test_a_job_on_a_token_cluster_requeues_itself_with_the_exported_token_file(cluster):
    """submitit's requeue from inside a job, on a cluster with a shared token: sbatch's
    --export=ALL carries the caller's RECKON_TOKEN_FILE (never the token itself) and the job's
    `scontrol requeue` reaches the controller with it. The token is in none of the controller's
    files: only the file's path went into the durable spec."""
    token = "in-job-requeue-" + "x" * 24
    cluster.use_token(token)
    cluster.start_controller()
    cluster.start_agent("a1")
    bin_dir = _commands(cluster)
    script = cluster.base / "requeue.sh"
    script.write_text(REQUEUE_ONCE.format(marker=cluster.base / "requeued"))
    env = {**_env(cluster, bin_dir), "RECKON_TOKEN_FILE": str(cluster.token_file)}
    out = subprocess.run([str(bin_dir / "sbatch"), "--parsable", str(script)], capture_output=True, text=True,
                         timeout=HANG, env=env, cwd=cluster.base)
    assert out.returncode == 0, out
    job = out.stdout.strip()
    record = cluster.wait_job(job, ("COMPLETED", "FAILED"), timeout=HANG)
    assert (record["state"], record["attempt"]) == ("COMPLETED", 2), record
    assert (cluster.base / f"slurm-{job}.out").read_text().endswith("attempt 2\n")
    stored = b"".join(p.read_bytes() for p in cluster.controller_dir.iterdir() if p.is_file())
    assert token.encode() not in stored and str(cluster.token_file).encode() in stored


def test_a_job_no_agent_can_run_is_refused_in_slurms_words(cluster):
    """sbatch and srun refuse a job larger than every agent in one line, as Slurm's do, and never
    suggest reckon submit's --queue-anyway (they have no such flag)."""
    cluster.start_controller()
    cluster.start_agent("a1", slots=2)
    cluster.wait_node("a1", ["IDLE"])
    bin_dir = _commands(cluster)
    for command, prefix in (("sbatch", "sbatch: error: Batch job submission failed: "),
                            ("srun", "srun: error: Unable to allocate resources: ")):
        args = ["-c", "64", "--wrap", "true"] if command == "sbatch" else ["-c", "64", "true"]
        out = _run(cluster, bin_dir, command, *args)
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.startswith(prefix + "no agent can ever run this job: it needs 64 slots"), out.stderr
        assert "queue-anyway" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert cluster.jobs() == {}
    from reckon.daemon.slurm.common import QUEUE_ANYWAY_HINT
    from reckon.model.admission import QUEUE_ANYWAY_HINT as MODELS

    assert QUEUE_ANYWAY_HINT == MODELS  # the layer's copy of the text it leaves out
