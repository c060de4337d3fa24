"""The launcher: a small single-threaded fork server, one per agent.

Started once by ``reckon.daemon.agent.runner.JobRunner``: ``python -m reckon.daemon.agent.launcher``
works, the runner runs ``python -I -S -c "...; main()"`` with the project's
directory put on ``sys.path`` (independent of the agent's cwd, of site and of
PYTHON* variables).  It imports nothing but the standard library pieces below
and its two stdlib-only siblings ``cgroups.py`` and ``users.py`` (by path),
so forking it is cheap: every launch request
becomes one ``os.fork()`` of this process (no interpreter start-up), and the
child turns into the job's **supervisor**:

* ``os.setsid()``: its own session, so the job outlives the agent and the
  launcher (a SIGKILL of the agent, Ctrl-C in the agent's terminal, ...);
* closes every descriptor it inherited, points 0/1/2 at /dev/null;
* starts the command (``subprocess.Popen``: vfork + exec) in its own process
  group with stdin /dev/null, stdout and stderr appended to the attempt's
  ``.stdout`` and ``.stderr`` files (created with the request's ``mode``),
  cwd = the job's cwd, env = exactly the request's ``env`` (built by the
  agent: ``daemon/agent/jobenv.py``), no other descriptor, default signal
  dispositions and an empty signal mask;
* appends the ``pid`` record to the attempt's ``.run`` file: its own pid and
  /proc start time, the job's pid and start time, the boot id, so a reused
  pid is never mistaken for it;
* with an owner (``user``): runs the job as that user (``daemon/agent/users.py``):
  the output files are chowned to it, its own ``--output``/``--error``, its
  cwd and its executable are opened, entered and found with its ids, and the
  job's child takes its groups, gid and uid for good before the exec;
* with a ``cgroup``: makes the attempt's cgroup with its limits
  (``daemon/agent/cgroups.py``) before the exec and puts the job's child in
  it before the exec, so all the job ever starts is inside; at the end every
  process left in it is killed, its usage and OOM kills read, and it is removed;
* the job is born at ``oom_score_adj`` +500, the supervisor keeps the launcher's (-1000 where the
  agent may set it): the machine's OOM killer picks the job, never its supervisor;
* forwards SIGTERM / SIGINT / SIGHUP to the job's process group (and turns
  SIGUSR1 into a SIGKILL of it);
* enforces the job's time limit (``limit`` seconds after it started; its timer: batchjobs.py): SIGTERM
  to the job's process group at the limit, SIGKILL ``grace`` seconds later,
  and ``"timed_out": true`` in the status record.  The supervisor does it, not
  the agent, so the limit holds while the agent is down or restarting;
* waits for the job's main process (``waitid(WNOWAIT)``), takes
  ``finished_at = time.time()`` at once, SIGKILLs whatever is left in the
  job's process group and in its cgroup (the job is over), reaps the main
  process, measures what it used, appends the ``status`` record to ``.run`` durably (fsync of the file and of ``jobs/``),
  then ``os._exit``\\ s.

Files of one attempt, all in the agent's ``jobs/`` directory and named
``<job>.<attempt>.<suffix>`` (flat, no directory per attempt: on ext4 a
directory and every extra file per job cost more than launching the job, see
docs/performance.md):

``.stdout``, ``.stderr``
    the job's output.  ``.stdout`` is created by the agent (O_EXCL) before the
    launch request: it is the claim that this attempt was launched, so an
    attempt never runs twice.
``.run``
    Created (O_EXCL) by the supervisor before it runs anything, or by the
    agent to withdraw a launch it gave up waiting for: whoever is first
    wins, so a late supervisor runs nothing.  JSON lines, appended: first the
    ``pid`` record (not fsynced: it only matters while processes live), then
    the ``status`` record (exit_code or signal, started_at, finished_at,
    ``usage`` {cpu_user, cpu_system, max_rss, wall, source}, ``oom``: true
    when the kernel's OOM killer acted in the cgroup; fsynced).  A reader takes only complete lines, so a half-written record
    reads as not written.

A command that cannot be executed (not found, not executable, bad cwd, an
owner this machine has no account for or may not run as, a cgroup that
cannot be made) finishes like in a shell: exit code 127 when something does
not exist (ENOENT), 126 otherwise, with the explanation in the job's stderr
file and in the status record's ``not_run`` (at most 300 characters; ``reckon
show`` prints it as the job's reason).  A request with ``refuse`` (the agent's
own refusal, e.g. a job without an owner on a munge cluster) ends that way too.

Wire (both directions: one JSON object per line, UTF-8):

agent -> launcher::

    {"k": [job, attempt], "base": "/abs/jobs/<job>.<attempt>", "cmd": [...],
     "cwd": str | null, "env": [[key, value], ...],  # the job's whole environment
     "mode": 384, "limit": seconds, "grace": seconds,  # mode of .stdout/.stderr (0o600)
     "user": {"uid": int, "gid": int, "user": str, "allow_root": bool}, "umask": 18,
     "cgroup": {"v": 1, "dirs": {controller: dir}, "mem": bytes, "cpus": n, "pids_max": n,
                "pool_mem": bytes},  # the cap of the cgroup all the agent's attempts are in
     "out": path, "err": path, "truncate": true,  # --output / --error, opened O_TRUNC (version 7)
     "out_wait": seconds,  # how long their directory may take to appear (default 0)
     "script": "/abs/jobs/<job>.<attempt>.script",  # a batch script (version 7: batchjobs.py)
     "warn": {"sig": n, "before": seconds, "batch_only": bool}}  # --signal (version 7)

(``limit`` and ``grace`` only for a job with a time limit; ``user`` and
``umask`` only for a job with an owner; ``cgroup`` only where the agent
enforces limits: ``{"v": 2, "dir": dir, ...}`` on cgroup v2.  The rest only
when set.  With ``warn`` the supervisor sends ``sig`` ``before`` seconds
before the limit: to the job's top process with ``batch_only``, else to every
other process of the job.)

launcher -> agent::

    {"t": "S", "k": [job, attempt], "pid": supervisor_pid, "at": started_at}
    {"t": "E", "k": [job, attempt], "err": "why the launch failed"}   # nothing runs
    {"t": "F", "k": [job, attempt], "pid": supervisor_pid, "ws": wait_status}

"S" always precedes the "F" of the same key.  The launcher exits at EOF on its
stdin (the agent closed the pipe or died); its supervisors keep running.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import select
import signal
import stat
import subprocess
import time


def _sibling(name: str):
    """A stdlib-only module next to this file (``cgroups``, ``users``): imported from the
    package when the agent imports the launcher, loaded by path when the launcher runs as
    ``python -I -S launcher.py`` (no package on ``sys.path`` then)."""
    if __package__:
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"_reckon_agent_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cgroups = _sibling("cgroups")
_users = _sibling("users")
_batch = _sibling("batchjobs")

#: Signals a supervisor sets back to their default disposition, so that the
#: job does not inherit them ignored (an agent started with ``&`` ignores
#: SIGINT and SIGQUIT, one under nohup SIGHUP, ...).  SIGPIPE and SIGXFSZ,
#: which Python ignores, are restored by subprocess; the forwarded signals
#: are caught, hence default again after exec.
_RESET_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGQUIT", "SIGUSR2", "SIGALRM", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGWINCH",
                 "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSYS", "SIGTRAP", "SIGCONT")
    if hasattr(signal, name)
)
#: Signals a supervisor forwards to the job's process group (SIGUSR1 becomes
#: SIGKILL: the way to escalate a cancel through the supervisor).
_FORWARD_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)

_OUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_NOT_RUN_CHARS = 300  # of a refusal's reason in the status record (model.report_entry.MAX_NOT_RUN)
_PRIVATE = 0o600  # .run files, and output files when a request names no mode


def _open_output(path: str, mode: int) -> int:
    fd = os.open(path, _OUT_FLAGS, mode)
    os.fchmod(fd, mode)  # explicit: the umask must not change it
    return fd


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


#: Suffixes of an attempt's files (see the module docstring).
STDOUT, STDERR, RUN = ".stdout", ".stderr", ".run"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def claim_run_file(path: str) -> int | None:
    """Create an attempt's ``.run`` file; None if it exists already.

    Both the supervisor (before it runs anything) and the agent (when it
    withdraws a launch it gave up waiting for) create it this way, so exactly
    one of them wins: a supervisor that comes too late runs nothing.
    """
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, _PRIVATE)
    except FileExistsError:
        return None


def append_record(fd: int, directory: str, record: dict, *, durable: bool) -> None:
    """Append one record to an open ``.run`` file.

    Each record is written as its own line, with a newline before it too: a
    record cut short earlier (a full disk) cannot swallow the next one.  With
    ``durable`` the file and its directory are fsynced, so the record survives
    a power loss once this returns.
    """
    _write_all(fd, b"\n" + json.dumps(record).encode() + b"\n")
    if durable:
        os.fsync(fd)
        fsync_dir(directory)


def read_records(path: str | os.PathLike) -> tuple[dict | None, dict | None] | None:
    """The ``pid`` and ``status`` records of a ``.run`` file; None if there is no such file.

    Only complete lines count: a record whose write was cut short (a crash,
    a full disk) reads as not written.  A ``withdrawn`` record (the agent's
    claim of an attempt it gave up launching) is neither.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    found: dict[str, dict] = {}
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is not a whole record
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") in ("pid", "status"):
            found.setdefault(record["kind"], record)
    return found.get("pid"), found.get("status")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- the supervisor (runs in a forked child of the launcher) -----------------


def _resolve(cmd0: str, path_var: str | None, effective: bool = False) -> str:
    """Find the executable like execvp does, in the job's PATH; raise OSError.  ``effective``:
    check with the effective ids (the job's owner's, under ``users.as_user``)."""
    if not cmd0:
        raise FileNotFoundError(errno.ENOENT, "empty command")
    if "/" in cmd0:
        st = os.stat(cmd0)  # FileNotFoundError / PermissionError / NotADirectoryError
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not os.access(cmd0, os.X_OK, effective_ids=effective):
            raise PermissionError(errno.EACCES, "permission denied")
        return cmd0
    denied = False
    for entry in (path_var if path_var is not None else os.defpath).split(":"):
        candidate = os.path.join(entry or ".", cmd0)
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(candidate, os.X_OK, effective_ids=effective):
            return candidate
        denied = True
    if denied:
        raise PermissionError(errno.EACCES, "permission denied")
    raise FileNotFoundError(errno.ENOENT, "command not found")


class _CannotRun(Exception):
    def __init__(self, errno_: int | None, message: str) -> None:
        super().__init__(message)
        self.errno = errno_
        self.message = message


def _status_record(key: list, exit_code: int | None, sig: int | None, started_at: float, finished_at: float,
                   job_pid: int | None, timed_out: bool = False, usage: dict | None = None,
                   oom: bool = False, not_run: str | None = None) -> dict:
    record = {"v": 1, "kind": "status", "job": key[0], "attempt": key[1], "exit_code": exit_code, "signal": sig,
              "started_at": started_at, "finished_at": finished_at, "job_pid": job_pid}
    if timed_out:  # only when true: records of jobs without a limit stay as they were
        record["timed_out"] = True
    if usage is not None:
        record["usage"] = usage
    if oom:  # the kernel's OOM killer acted in the attempt's cgroup (its memory limit)
        record["oom"] = True
    if not_run:  # nothing ran: why (for `reckon show`, beside the job's stderr)
        record["not_run"] = not_run[:_NOT_RUN_CHARS]
    return record


def _usage(cgroup, rusage, started_at: float, finished_at: float) -> dict:
    """What the attempt used: from its cgroup (everything that ran in it), else the rusage of the
    job's main process and the descendants it waited for."""
    wall = max(finished_at - started_at, 0.0)
    measured = cgroup.usage() if cgroup is not None else None
    if measured is not None:
        return {**measured, "wall": wall, "source": "cgroup"}
    return {"cpu_user": rusage.ru_utime, "cpu_system": rusage.ru_stime, "max_rss": rusage.ru_maxrss * 1024,
            "wall": wall, "source": "rusage"}


def _open_custom_output(path: str, flags: int, mode: int, wait: float) -> int:
    """A job's --output/--error file, whose directory gets ``wait`` seconds to appear: submitit makes the
    job's folder only once sbatch has printed the id, and a job here can start within milliseconds
    (Slurm's own start-up latency hides that race; tests/compat/test_submitit.py lost it 6 runs in 8)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return os.open(path, flags, mode)
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _custom_outputs(req: dict, out_fd: int, err_fd: int) -> tuple[int, int]:
    """The job's --output / --error files in place of the attempt's own (appended to, like
    ``sbatch --open-mode=append``, or truncated first with ``truncate``); a file that cannot be
    opened means the job cannot run."""
    opened: dict[str, int] = {}
    for key in ("out", "err"):
        path = req.get(key)
        if path is None:
            continue
        try:
            # The attempt's own mode (--output-mode, 0600): on a shared cluster no other user reads it.
            flags = _OUT_FLAGS | (os.O_TRUNC if req.get("truncate") else 0)  # --open-mode (version 7)
            opened[key] = _open_custom_output(path, flags, req.get("mode", _PRIVATE), float(req.get("out_wait", 0)))
        except OSError as e:
            for fd in opened.values():
                os.close(fd)
            raise _CannotRun(None, f"cannot open the {'output' if key == 'out' else 'error'} file {path!r}: "
                                   f"{e.strerror or e}") from None
    if "out" in opened:
        os.close(out_fd)
    if "err" in opened:
        os.close(err_fd)
    return opened.get("out", out_fd), opened.get("err", err_fd)


def supervise(req: dict, started_at: float, boot: str) -> int:
    """Run one job to its end and record how it ended.  Returns the supervisor's exit code."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Nothing of the launcher's: its request/answer pipes, its wakeup pipe,
    # the agent's stderr (a pipe held open here would outlive the agent).
    os.closerange(3, 1 << 20)
    devnull = os.open(os.devnull, os.O_RDWR)  # non-inheritable (PEP 446)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    state = {"pid": 0, "pending": 0, "timed_out": False}

    def forward(signum: int, frame: object) -> None:
        signum = signal.SIGKILL if signum == signal.SIGUSR1 else signum
        pid = state["pid"]
        if pid:
            try:
                os.killpg(pid, signum)
            except OSError:
                pass
        elif state["pending"] != signal.SIGKILL:
            state["pending"] = signum

    for signum in _RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    for signum in _FORWARD_SIGNALS:
        signal.signal(signum, forward)
    # The launcher keeps these blocked so that none can hit a supervisor
    # before its handlers are in place; now they are.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARD_SIGNALS)

    _batch.arm_time_limit(req, started_at, state)
    key = req["k"]
    base = req["base"]
    jobs_dir = os.path.dirname(base)
    argv = req["cmd"]
    run_fd = claim_run_file(base + RUN)
    if run_fd is None:
        return 0  # the agent withdrew this launch (it gave up waiting for us): run nothing
    mode = req.get("mode", _PRIVATE)
    out_fd = _open_output(base + STDOUT, mode)
    err_fd = _open_output(base + STDERR, mode)

    env = dict(req.get("env") or ())

    job_pid = 0
    acct = None
    cgroup = None
    script_fd = -1
    try:
        if req.get("refuse"):  # the agent's own refusal (a job without an owner on a munge cluster)
            raise _CannotRun(None, str(req["refuse"]))
        owner = req.get("user")  # None: token mode, the job runs as the agent's user
        if owner is not None:
            try:
                acct = _users.account(owner["uid"], owner["gid"], owner["user"],
                                      allow_root=owner.get("allow_root") is True)
            except _users.CannotRunAs as e:
                raise _CannotRun(None, e.message) from None
            if acct.switch:  # the attempt's own output files are the owner's (0600 in the agent's jobs/)
                os.fchown(out_fd, acct.uid, acct.gid)
                os.fchown(err_fd, acct.uid, acct.gid)
            env.update(acct.environment())
        if req.get("script") is not None:  # a batch script: the job's user's, run through its descriptor
            switch = acct is not None and acct.switch
            try:
                script_fd = _batch.open_script(req["script"], acct.uid if switch else None,
                                               acct.gid if switch else None)
            except OSError as e:
                raise _CannotRun(None, f"cannot open the batch script: {e.strerror or e}") from None
            argv = [_batch.exec_path(script_fd), *argv[1:]]
        # As the owner: its own output files, its cwd and its executable are what *it* may use.
        with _users.as_user(acct):
            out_fd, err_fd = _custom_outputs(req, out_fd, err_fd)
            cwd = req.get("cwd")
            if cwd is not None:
                try:
                    os.chdir(cwd)
                except (OSError, ValueError) as e:
                    raise _CannotRun(getattr(e, "errno", None), f"cannot change to directory {cwd!r}: "
                                                                f"{getattr(e, 'strerror', None) or e}") from None
            try:
                path = argv[0] if script_fd >= 0 else _resolve(argv[0], env.get("PATH"),
                                                                  effective=acct is not None and acct.switch)
            except (OSError, ValueError) as e:
                raise _CannotRun(getattr(e, "errno", None),
                                 f"cannot execute {argv[0]!r}: {getattr(e, 'strerror', None) or e}") from None
        if req.get("cgroup") is not None:
            try:
                cgroup = _cgroups.Cgroup.create(req["cgroup"])
            except _cgroups.CgroupError as e:  # enforcement was promised: no job runs without it
                raise _CannotRun(None, str(e)) from None
        # The owner's groups, gid and uid, for good, in the child before the exec (that order:
        # after setuid nothing else may change).  Not a preexec_fn: subprocess does it in C.
        ids = (dict(user=acct.uid, group=acct.gid, extra_groups=acct.groups)
               if acct is not None and acct.switch else {})

        def start() -> subprocess.Popen:
            # subprocess (vfork + exec in C) rather than os.posix_spawn: as
            # fast, and glibc's posix_spawn leaves its internal signals 32
            # and 33 ignored in the child.  close_fds: nothing but 0, 1, 2.
            # (Changing ids costs a fork in place of the vfork.)
            return subprocess.Popen(argv, executable=path, stdin=devnull, stdout=out_fd, stderr=err_fd, env=env,
                                    close_fds=True, restore_signals=True, process_group=0,
                                    umask=req.get("umask", -1), pass_fds=(script_fd,) if script_fd >= 0 else (),
                                    **ids)
        try:
            # In its cgroup from birth: the supervisor steps in for the spawn (daemon/agent/cgroups.py).
            # And first for the machine's OOM killer: born at oom_score_adj +500, the supervisor not.
            job = _cgroups.spawn_first_for_the_oom_killer(start if cgroup is None else
                                                          lambda: cgroup.spawn_inside(start))
            job_pid = job.pid
        except (OSError, ValueError, subprocess.SubprocessError) as e:  # ValueError: a NUL byte, a bad string
            raise _CannotRun(getattr(e, "errno", None),
                             f"cannot execute {argv[0]!r}: {getattr(e, 'strerror', None) or e}") from None
    except _CannotRun as e:
        # Like a shell: 127 when something does not exist, 126 when it cannot be run.
        code = 127 if e.errno == errno.ENOENT else 126
        try:
            os.write(err_fd, f"reckon: {e.message} (exit {code})\n".encode("utf-8", "backslashreplace"))
        except OSError:
            pass
        if cgroup is not None:
            cgroup.remove()
        if script_fd < 0 and req.get("script") is not None:
            try:
                os.unlink(req["script"])  # never opened: nothing else will run it
            except OSError:
                pass
        append_record(run_fd, jobs_dir, _status_record(key, code, None, started_at, time.time(), None,
                                                       not_run=e.message), durable=True)
        return 0
    if script_fd >= 0:
        os.close(script_fd)  # the job holds its own copy: the script lives exactly as long as it needs
    state["pid"], state["cgroup"] = job_pid, cgroup
    if state.pop("warn_due", False):
        _batch.warn(state, req["warn"])
    if state["pending"]:
        try:
            os.killpg(job_pid, state["pending"])
        except OSError:
            pass
    os.close(out_fd)
    os.close(err_fd)

    # Not fsynced: it only matters while processes live, and a power loss
    # ends them all (a missing pid record then rightly means "lost").  A
    # failure to write it must not end the supervision of a running job.
    try:
        append_record(run_fd, jobs_dir, {
            "v": 1, "kind": "pid", "supervisor": os.getpid(), "supervisor_start": proc_start_time(os.getpid()),
            "job_pid": job_pid, "job_start": proc_start_time(job_pid), "boot_id": boot, "started_at": started_at,
        }, durable=False)
    except OSError:
        pass

    # Wait without reaping: while the main process is a zombie its pid (and
    # so its process group id) cannot be reused, so the cleanup kill below
    # cannot hit a stranger.
    info = os.waitid(os.P_PID, job_pid, os.WEXITED | os.WNOWAIT)
    finished_at = time.time()
    signal.setitimer(signal.ITIMER_REAL, 0)  # the job is over: no time-limit signal after this
    if info.si_code == os.CLD_EXITED:
        exit_code, sig = info.si_status, None
    else:  # CLD_KILLED / CLD_DUMPED
        exit_code, sig = None, info.si_status
    try:
        os.killpg(job_pid, signal.SIGKILL)  # leftovers of the job's process group
    except OSError:
        pass
    if cgroup is not None:
        cgroup.kill_all()  # and of its cgroup: whatever left the process group (setsid, double fork)
    _, _, rusage = os.wait4(job_pid, 0)
    job.returncode = exit_code if sig is None else -sig  # reaped here: subprocess must not try again
    state["pid"] = 0
    usage = _usage(cgroup, rusage, started_at, finished_at)
    oom = cgroup is not None and cgroup.oom_killed()
    if cgroup is not None:
        cgroup.remove()  # a cgroup that does not empty stays for the agent's next start to clean
    append_record(run_fd, jobs_dir, _status_record(key, exit_code, sig, started_at, finished_at, job_pid,
                                                   timed_out=state["timed_out"], usage=usage, oom=oom), durable=True)
    return 0


def _run_supervisor(req: dict, started_at: float, boot: str) -> None:
    """The forked child: never returns, never runs the launcher's cleanup."""
    code = 70
    try:
        gc.disable()
        code = supervise(req, started_at, boot)
    except BaseException:  # noqa: BLE001 - a supervisor must end in os._exit
        code = 71
        try:
            import traceback

            # In the job's stderr, where `reckon show` points: the operator
            # sees why the outcome is unknown (the agent reports it lost).
            fd = _open_output(req["base"] + STDERR, req.get("mode", _PRIVATE))
            os.write(fd, b"reckon: the supervisor failed:\n" + traceback.format_exc().encode("utf-8", "backslashreplace"))
            os.close(fd)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


# ---- the launcher loop -----------------------------------------------------------


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Blocked (not ignored) so forked supervisors inherit the block and can
    # install their forwarding handlers before any of these is delivered.
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARD_SIGNALS)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    boot = boot_id()
    gc.freeze()  # keep the collector from touching (and copying) shared pages in the children

    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    children: dict[int, list] = {}
    buf = b""
    eof = False
    dumps = json.dumps
    while not eof:
        out: list[bytes] = []
        for fd, _ in poller.poll():
            if fd == wake_r:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            data = os.read(0, 1 << 18)
            if not data:
                eof = True
                continue
            buf += data
            if b"\n" not in data:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line:
                    continue
                key = None
                try:
                    req = json.loads(line)
                    key = req["k"]
                    started_at = time.time()
                    pid = os.fork()
                    if pid == 0:
                        _run_supervisor(req, started_at, boot)
                    children[pid] = key
                    out.append(dumps({"t": "S", "k": key, "pid": pid, "at": started_at}).encode() + b"\n")
                except Exception as e:  # noqa: BLE001 - a bad request or a failed fork must not end the launcher
                    out.append(dumps({"t": "E", "k": key, "err": f"{type(e).__name__}: {e}"}).encode() + b"\n")
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            key = children.pop(pid, None)
            if key is not None:
                out.append(dumps({"t": "F", "k": key, "pid": pid, "ws": status}).encode() + b"\n")
        if out:
            try:
                _write_all(1, b"".join(out))
            except BrokenPipeError:
                return  # the agent is gone; the supervisors carry on
    # EOF: the agent closed the pipe (or died).  The supervisors are in their
    # own sessions and keep running; whoever inherits them reaps them.


if __name__ == "__main__":
    main()
