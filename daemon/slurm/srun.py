"""`srun`: run a command as Slurm's srun does, for reckon's one-task jobs (issue #21).

Inside a job (``SLURM_JOB_ID`` is set: a batch script's ``srun --unbuffered --output ... CMD``,
submitit's shape), the command runs in place: this process becomes it (``exec``), with
``--output``/``--error``/``--input``/``--chdir``/``--export`` applied and the step's variables
(``SLURM_STEP_ID`` ...) set; no new job, as a Slurm step runs inside its job's allocation.  Steps
are numbered 0, 1, 2 ... per attempt (steps.py).  With ``-l``/``--label`` srun stays, runs the
command as its child and puts ``0: `` (the task's number) before each line it writes.

Slurm's input variables (``SLURM_LABELIO``, ``SLURM_STDOUTMODE`` ... options.SRUN_ENV) set options
under the command line's.

Outside a job, the command is submitted as a job of its own (the options as sbatch reads them),
its output is streamed to the terminal by ``reckon logs --follow``'s code (daemon/cli/logs.py),
and srun exits with the job's exit code; Ctrl-C cancels the job.
"""

from __future__ import annotations

import os
import sys

from reckon.daemon.slurm import argv as getopt
from reckon.daemon.slurm import options as table
from reckon.daemon.slurm.common import (QUEUE_ANYWAY_HINT, SlurmCommandError, bad_option, connect, default_signals,
                                        run, warn)

PROG = "srun"
_OPTIONS = table.by_name(table.SRUN)
_GETOPT = table.table(table.SRUN)
# What srun reads itself; the other HANDLED options are sbatch.spec_of's (a job outside one).
HANDLED = frozenset({"cluster", "clusters", "chdir", "error", "export", "help", "input", "job-name", "label",
                     "open-mode", "output", "quiet",
                     "unbuffered", "usage", "verbose", "version", "disable-status", "exact", "kill-on-bad-exit",
                     "overlap", "whole"})
NO_ARRAY_INDEX = "4294967294"
MISSING_GRACE = 10.0  # seconds a just-started attempt's output file may be missing (see _stream)
POLL = (0.02, 0.5)  # seconds between looks at a job not started (or not ended) yet: first, growing to


def parse_args(words: list[str]) -> tuple[dict[str, str | None], list[str]]:
    from reckon.daemon.slurm.sbatch import merge

    try:
        parsed, operands = getopt.parse(words, _GETOPT, permute=False)
    except getopt.OptionError as exc:
        raise bad_option(PROG, str(exc)) from None
    return merge(parsed), operands


def expand(pattern: str, env: dict[str, str]) -> str:
    """A Slurm filename pattern for this step (task 0 on node 0 of step SLURM_STEP_ID): ``%j %J %A
    %a %s %t %n %N %u %x %%``, with Slurm's zero-padding (``%3t``); a backslash: taken as it is."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    job = env.get("SLURM_JOB_ID", "0")
    step = env.get("SLURM_STEP_ID", "0")
    fields = {"j": job, "J": f"{job}.{step}", "A": env.get("SLURM_ARRAY_JOB_ID", job),
              "a": env.get("SLURM_ARRAY_TASK_ID", NO_ARRAY_INDEX), "s": step, "t": "0", "n": "0",
              "N": env.get("SLURMD_NODENAME") or os.uname().nodename.partition(".")[0],
              "u": env.get("SLURM_JOB_USER") or env.get("USER", ""), "x": env.get("SLURM_JOB_NAME", "")}
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] != "%":
            out.append(pattern[i])
            i += 1
            continue
        j = i + 1
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        letter = pattern[j] if j < len(pattern) else ""
        if letter == "%":
            out.append("%")
        elif letter in fields:
            out.append(fields[letter].zfill(min(int(pattern[i + 1:j] or 0), 10)))
        else:
            out.append(pattern[i:j + 1])  # Slurm leaves an unknown letter as it is
        i = j + 1
    return "".join(out)


def _open(path: str, flags: int) -> int:
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        raise SlurmCommandError(f"cannot open {path}: {exc.strerror or exc}") from None


def step_env(env: dict[str, str], number: int = 0) -> dict[str, str]:
    """The job's environment with the variables of its step ``number`` (one task on one node)."""
    step = dict(env)
    step.update({"SLURM_STEP_ID": str(number), "SLURM_STEP_NUM_TASKS": "1",
                 "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_PROCID": "0",
                 "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1", "SLURM_NPROCS": "1",
                 "SLURM_TASK_PID": str(os.getpid())})
    step["SLURM_STEPID"] = step["SLURM_STEP_ID"]
    nodes = step.get("SLURM_JOB_NODELIST")
    if nodes:
        step["SLURM_STEP_NODELIST"] = nodes
    return step


def step_number() -> int:
    """This srun's step number in its job (steps.py); 0, said once, when no counter can be kept."""
    from reckon.daemon.slurm.steps import ROOT, next_step

    root = os.environ.get("RECKON_STEP_DIR") or ROOT
    number = next_step(os.environ.get("SLURM_JOB_ID", ""), os.environ.get("RECKON_ATTEMPT", "1"), root)
    if number is None:
        warn(PROG, f"no step counter could be kept in {root}: this step is numbered 0")
        return 0
    return number


def run_in_job(opts: dict[str, str | None], command: list[str]) -> int:
    """Become the command (exec), as the job's next step; with --label, run it as a child."""
    env = step_env(dict(os.environ), step_number())
    export = opts.get("export")
    if export is not None:
        from reckon.daemon.slurm.values import export_env

        keep = {k: v for k, v in env.items() if k.startswith("SLURM_")}
        env = {**keep, **dict(export_env(export, dict(os.environ)))}
    chdir = opts.get("chdir")
    if chdir is not None:
        try:
            os.chdir(chdir)
        except OSError as exc:
            raise SlurmCommandError(f"cannot change directory to {chdir}: {exc.strerror or exc}") from None
    from reckon.daemon.slurm.values import parse_open_mode

    mode = parse_open_mode(opts.get("open-mode") or env.get("SLURM_OPEN_MODE") or "truncate")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "append" else os.O_TRUNC)
    out = opts.get("output")
    err = opts.get("error")
    fds: dict[int, int] = {}
    stdin = opts.get("input")
    if stdin is not None and stdin not in ("all", "0"):
        fds[0] = _open("/dev/null" if stdin == "none" else expand(stdin, env), os.O_RDONLY)
    if out is not None and out != "all":
        fds[1] = _open("/dev/null" if out == "none" else expand(out, env), flags)
    if err is not None and err != "all":
        path = "/dev/null" if err == "none" else expand(err, env)
        same = out is not None and out != "all" and path == expand(out, env)
        fds[2] = os.dup(fds[1]) if same else _open(path, flags)
    elif 1 in fds:
        fds[2] = os.dup(fds[1])  # Slurm: stderr follows --output unless --error is given
    for target, fd in fds.items():
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.flush()
    if "label" in opts:
        from reckon.daemon.slurm.labels import run_labelled

        return run_labelled(command, env)
    default_signals()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"srun: error: execve(): {command[0]}: {exc.strerror or exc}\n")
        return 2
    return 0  # pragma: no cover (exec does not return)


def run_as_job(opts: dict[str, str | None], command: list[str]) -> int:
    """Submit the command, stream its output here, exit with its exit code; Ctrl-C cancels it."""
    from reckon.daemon.slurm import sbatch

    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise SlurmCommandError("the current directory no longer exists") from None
    if opts.get("input") not in (None, "none"):
        warn(PROG, "--input is ignored outside a job by reckon (a job's stdin is /dev/null)")
    spec = sbatch.spec_of(opts, None, command, environ=sbatch._environ(), cwd=cwd, array=False,
                          default_name=os.path.basename(command[0]) or command[0], prog=PROG)
    for key in ("output", "error"):  # the terminal's, unless asked for a file
        if opts.get(key) is None:
            spec.pop(key, None)
    if opts.get("output") is not None and opts.get("error") is None:
        spec["error"] = spec["output"]
    spec["env"].append(["SLURM_SUBMIT_HOST", os.uname().nodename])
    spec["env"] += [["SLURM_STEP_ID", "0"], ["SLURM_STEPID", "0"]]  # the command is its job's step 0, as Slurm's
    client = connect()
    job = None
    try:
        job = _submit(client, spec)
        said = False
        pause = POLL[0]
        while True:
            obj = client.call("show", job=job)["job"]
            if obj["state"] != "PENDING":
                break
            if not said and pause >= 0.1 and "quiet" not in opts:  # a job that starts at once: no line
                sys.stderr.write(f"srun: job {job} queued and waiting for resources\n")
                said = True
            pause = _sleep(pause)
        if said and "quiet" not in opts:
            sys.stderr.write(f"srun: job {job} has been allocated resources\n")
        # A stream sent to a file (-o, -e) is not also shown here, as with Slurm's srun.
        _stream(client, job, stdout=opts.get("output") is None, stderr=opts.get("error") is None
                and opts.get("output") is None, label="label" in opts)
        return _outcome(client, job, "quiet" in opts)
    except KeyboardInterrupt:
        if job is not None:
            # On a connection of its own: the interrupt may have cut a request or a reply in half,
            # and the next read on that one would wait for the rest.
            client.abort()
            _cancel_interrupted(job)
        return 130
    finally:
        client.close()


def _submit(client, spec: dict) -> str:
    """Submit with Ctrl-C held back until the reply is in: an interrupt between the controller's
    commit and the reply would leave a job running that nothing here knows to cancel."""
    import _signal

    interrupted: list[int] = []
    previous = _signal.signal(_signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    from reckon.daemon.client_common import ClientError, UsageError

    try:
        job = client.call("submit", spec=spec)["job"]["id"]
    except ClientError as exc:
        if isinstance(exc, UsageError):
            raise
        # Slurm's words; the hint names reckon submit's flag, which srun has not.
        raise SlurmCommandError(f"Unable to allocate resources: {str(exc).replace(QUEUE_ANYWAY_HINT, '')}") from None
    finally:
        _signal.signal(_signal.SIGINT, previous)
    if interrupted:
        _cancel_interrupted(job)
        raise SystemExit(130)
    return job


def _cancel_interrupted(job: str) -> None:
    """Ctrl-C: cancel the job, on a connection of its own, and say so in one line."""
    try:
        with connect() as fresh:
            fresh.call("cancel", job=job)
        sys.stderr.write(f"srun: Job {job} cancelled (interrupted)\n")
    except Exception as exc:  # the controller's one line, or a lost connection: say it, exit anyway
        sys.stderr.write(f"srun: error: cannot cancel job {job}: {exc}\n")


def _stream(client, job: str, *, stdout: bool, stderr: bool, label: bool = False) -> None:
    """The job's stdout here and its stderr to stderr, until the attempt has ended: ``reckon logs
    --follow``'s code, one follower per stream (the stderr one on a thread of its own)."""
    import threading
    from types import SimpleNamespace

    from reckon.daemon.cli.logs import run_logs

    failed: list[BaseException] = []

    def follow(errors: bool) -> None:
        import time

        if errors:  # the thread: Ctrl-C must reach the main thread (see below)
            import _signal

            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
        args = SimpleNamespace(job=job, stderr=errors, follow=True, attempt=None, timeout=client.timeout)
        stream = sys.stderr.buffer if errors else sys.stdout.buffer
        if label:
            from reckon.daemon.slurm.labels import Labeller

            stream = Labeller(stream)
        out = _Counted(stream)
        deadline = time.monotonic() + MISSING_GRACE
        while True:
            try:
                run_logs(args, client.url, client.auth, client.ssl_context, out=out)
                return
            except Exception as exc:  # the controller's one line (output deleted, agent too old): told below
                # The agent makes an attempt's .stderr a moment after its .stdout; a read between the
                # two says the file is gone.  Nothing shown yet: look again, for a while.
                if "is gone" in str(exc) and not out.count and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                failed.append(exc)
                return

    # The kernel gives a process's SIGINT to any thread that does not block it.  Given to the
    # follower thread, it would not wake the main thread from a read of the controller's reply,
    # and Ctrl-C would wait for that reply (up to the request's time-out): the follower blocks it.
    thread = threading.Thread(target=follow, args=(True,), daemon=True) if stderr else None
    if thread is not None:
        thread.start()
    if stdout:
        follow(False)
    if thread is not None:
        thread.join()
    if failed:
        warn(PROG, f"the job's output could not be shown: {failed[0]}")


class _Counted:
    """A binary stream that counts what went through it (whether a follower showed anything yet)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def _sleep(pause: float) -> float:
    """Wait ``pause`` seconds; the next, longer pause (a quick job is seen quickly, a long one polled rarely)."""
    import time

    time.sleep(pause)
    return min(pause * 1.5, POLL[1])


def _outcome(client, job: str, quiet: bool) -> int:
    """The job's exit code once it has ended (128 + a signal), as srun exits."""
    pause = POLL[0]
    while True:
        obj = client.call("show", job=job)["job"]
        if obj["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        pause = _sleep(pause)
    code, sig = obj.get("exit_code"), obj.get("signal")
    if obj["state"] == "COMPLETED":
        return 0
    if not quiet:
        where = obj.get("agent") or "-"
        what = f"Exited with exit code {code}" if code is not None else (
            f"Killed by signal {sig}" if sig is not None else obj["state"].lower())
        sys.stderr.write(f"srun: error: {where}: task 0: {what}\n")
    return code if code else (128 + sig if sig else 1)


def usage() -> str:
    lines = ["Usage: srun [OPTIONS(0)...] executable(0) [args(0)...]", "",
             "reckon's srun: the options below are handled; (w) warned and ignored; (r) refused.", ""]
    for option in table.SRUN:
        mark = {"H": "   ", "W": "(w)", "R": "(r)"}[option[3]]
        lines.append(f"  {mark} {table.spelled(option):32} {option[4]}")
    return "\n".join(lines) + "\n"


def _main(argv: list[str]) -> int:
    from reckon.daemon.slurm.sbatch import refuse_and_warn, with_environment

    cmdline, command = parse_args(argv)
    opts, origin = with_environment({}, cmdline, os.environ, table.SRUN_ENV, _OPTIONS)
    if "help" in opts or "usage" in opts:
        sys.stdout.write(usage())
        return 0
    if "version" in opts:
        sys.stdout.write("slurm 22.05.0 (reckon)\n")
        return 0
    if not command:
        raise SlurmCommandError("No command given to execute.")
    refuse_and_warn(opts, PROG, _OPTIONS, origin)
    if os.environ.get("SLURM_JOB_ID"):
        from reckon.daemon.slurm import values

        for name in ("cluster", "clusters"):
            if opts.get(name) is not None:
                values.check_clusters(opts[name] or "", f"--{name}")
        if opts.get("nodes") is not None:
            values.parse_nodes(opts["nodes"] or "")
        values.check_one_task(opts)  # a step of one task: --ntasks-per-node=2 is refused, not run once
        return run_in_job(opts, command)
    return run_as_job(opts, command)


def main(argv: list[str] | None = None) -> int:
    """The ``srun`` command (the launcher's entry): its exit status (the job's exit code)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
