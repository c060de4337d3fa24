"""What Slurm's batch jobs ask of a supervisor (protocol version 7): the batch script, the
warning signal before the time limit, and signals to the job's processes.

Standard library only: the launcher loads it by path (``python -I -S``), like ``cgroups.py``
and ``users.py``, and calls it in the forked supervisor.

**The script.**  The agent writes the script's text to ``<jobs>/<job>.<attempt>.script``
(0700, created exclusively) before the launch request.  The supervisor opens it, gives it to
the job's user (``fchown``), unlinks it and runs the job as ``/proc/self/fd/N`` with that
descriptor inherited: the kernel honours the script's ``#!`` and the interpreter reads the
script through the descriptor.  So the file is never in the job's cwd, never at a path another
user could open (the agent's state directory is 0700: the job's own user could not reach a
path in it either), and it is gone from the disk as soon as the job runs, whatever becomes of
the agent or of the supervisor afterwards.  ``forget`` of the attempt removes one left by a
launch that never ran.

**The time limit** (version 4) is the supervisor's SIGALRM timer, armed here: the warning (if
any), SIGTERM at the limit, SIGKILL after the grace.

**Signals.**  ``job_processes`` is every process of the job: its process group, and its
cgroup when it has one (what left the group with ``setsid``).  The warning signal
(``--signal``) goes either to the top process (the batch shell: Slurm's ``B:``) or to every
process of the job but the top one (Slurm without ``B:`` signals the job's steps, not the
batch shell).
"""

from __future__ import annotations

import os
import signal
import time

SCRIPT = ".script"  # the suffix of an attempt's script file in the agent's jobs/ directory
SCRIPT_MODE = 0o700


def write_script(path: str, text: str) -> None:
    """The agent's half: the script's file, 0700, created exclusively (an attempt runs once)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, SCRIPT_MODE)
    try:
        os.fchmod(fd, SCRIPT_MODE)  # explicit: the umask must not change it
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def open_script(path: str, uid: int | None, gid: int | None) -> int:
    """The supervisor's half: open the script (an inheritable descriptor), make it the job
    user's (``uid``/``gid``; None: the agent's own user) and unlink it.  OSError if it cannot."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if uid is not None and gid is not None:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, SCRIPT_MODE)
    except OSError:
        os.close(fd)
        raise
    try:
        os.unlink(path)
    except OSError:
        pass
    os.set_inheritable(fd, True)
    return fd


def exec_path(fd: int) -> str:
    """What the job's exec names: the script through its descriptor."""
    return f"/proc/self/fd/{fd}"


def _pgrp(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def job_processes(job_pid: int, cgroup_pids: list[int] | None = None) -> set[int]:
    """Every process of the job: its process group (``job_pid`` leads it) and its cgroup's."""
    found = set(cgroup_pids or ())
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    for name in entries:
        if name.isdigit() and _pgrp(int(name)) == job_pid:
            found.add(int(name))
    return found


def send(job_pid: int, sig: int, *, top: bool, rest: bool, cgroup_pids: list[int] | None = None) -> int:
    """Send ``sig`` to the job's top process (``top``) and/or every other process of it
    (``rest``); how many signals it sent (a process group counts once).  The whole job is its
    process group at once (``killpg``: no fork in flight escapes it) and what of its cgroup left it."""
    if top and rest:
        targets = [pid for pid in cgroup_pids or () if _pgrp(pid) != job_pid]
        try:
            os.killpg(job_pid, sig)
            reached = 1
        except OSError:
            reached = 0
    elif rest:
        targets = sorted(job_processes(job_pid, cgroup_pids) - {job_pid})
        reached = 0
    else:
        targets, reached = [job_pid] if top else [], 0
    for pid in targets:
        try:
            os.kill(pid, sig)
            reached += 1
        except OSError:
            pass
    return reached


# ---- the supervisor's timer: the warning, then the time limit -------------------------------


def arm_time_limit(req: dict, started_at: float, state: dict) -> None:
    """SIGALRM at the job's time limit: SIGTERM its process group, then SIGKILL after the grace.

    Counted from ``started_at`` (the launcher's clock when it forked us), with
    an interval timer: a job stopped and continued, or a slow fork, does not
    stretch the limit.  The handler runs between the supervisor's system calls
    (``waitid`` is restarted after it, PEP 475).
    """
    limit = req.get("limit")
    if limit is None:
        return
    grace = max(float(req.get("grace", 10.0)), 0.0)
    deadline = started_at + float(limit)
    warn_req = req.get("warn")
    state["warned"] = warn_req is None

    def on_alarm(signum: int, frame: object) -> None:
        pid = state["pid"]
        if not state["warned"]:  # the warning (--signal) first, then the limit itself
            state["warned"] = True
            signal.setitimer(signal.ITIMER_REAL, max(deadline - time.time(), 0.001))
            if pid:
                warn(state, warn_req)
            else:
                state["warn_due"] = True  # the job is not started yet: warned right after it is
            return
        if state["timed_out"]:
            sig = signal.SIGKILL  # the grace is over
        else:
            state["timed_out"] = True
            sig = signal.SIGTERM
            signal.setitimer(signal.ITIMER_REAL, grace or 0.001)
        if pid:
            try:
                os.killpg(pid, sig)
            except OSError:
                pass
        elif state["pending"] != signal.SIGKILL:
            state["pending"] = sig

    signal.signal(signal.SIGALRM, on_alarm)
    first = deadline - (float(warn_req["before"]) if warn_req is not None else 0.0)
    signal.setitimer(signal.ITIMER_REAL, max(first - time.time(), 0.001))


def warn(state: dict, asked: dict) -> None:
    """The warning signal (``asked``: the request's ``warn``) to the job's top process, or to the rest."""
    cgroup = state.get("cgroup")
    batch_only = asked.get("batch_only") is True
    send(state["pid"], int(asked["sig"]), top=batch_only, rest=not batch_only,
         cgroup_pids=cgroup.pids() if cgroup is not None and not batch_only else None)
