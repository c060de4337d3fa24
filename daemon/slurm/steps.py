"""Step numbers for ``srun`` inside a job: 0, 1, 2 ... per attempt, as Slurm numbers a job's steps.

Every srun of an attempt runs on its one node, in the session the agent's supervisor opened for
that attempt (daemon/agent/launcher.py ``setsid``), so the counter is a file on that node: one per
(job, attempt, session id, the session leader's start time), in a directory of the caller's own
(``/tmp/reckon-steps-UID``, or under ``$RECKON_STEP_DIR``; mode 0700, checked to be the caller's
and not a link).  The number is taken under an exclusive ``flock`` (read, write the next,
unlock), so concurrent sruns of one job never get the same one; the session leader's start time
keeps a recycled session id (or a recreated cluster's same job id) from continuing an old count.
Asking the controller instead would need a fact per step (a durable counter) for what is one
node's local business.

A counter file is removed by the first srun of a later attempt once its session is gone
(``prune``), so the directory holds the live attempts' files and a few stale ones at most.
Light: os and fcntl only.
"""

from __future__ import annotations

import os

ROOT = "/tmp"


def _leader_start(sid: int) -> str:
    """The session leader's start time (clock ticks since boot, /proc/PID/stat field 22), or 0."""
    try:
        with open(f"/proc/{sid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return "0"


def _own_dir(root: str) -> str | None:
    """The caller's private counter directory, made if missing; None if it is not safely its own."""
    import stat

    path = os.path.join(root, f"reckon-steps-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def next_step(job: str, attempt: str, root: str = ROOT) -> int | None:
    """This srun's step number in its job's attempt; None when no counter can be kept (the caller
    then says so and uses 0)."""
    import fcntl

    sid = os.getsid(0)
    folder = _own_dir(root)
    if folder is None or "/" in job or "/" in attempt:
        return None
    path = os.path.join(folder, f"{job}.{attempt}.{sid}.{_leader_start(sid)}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 32, 0).strip()
        step = int(text) if text.isdigit() else 0
        # The next number has at least as many digits: written over the old one, nothing left behind.
        os.pwrite(fd, f"{step + 1}\n".encode(), 0)
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the lock
    if step == 0:
        prune(folder, keep=path)
    return step


def prune(folder: str, keep: str) -> None:
    """Remove the counter files of attempts whose session has ended (or been reused)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        parts = name.rsplit(".", 2)
        if path == keep or len(parts) != 3 or not parts[1].isdigit():
            continue
        if _leader_start(int(parts[1])) != parts[2]:
            try:
                os.unlink(path)
            except OSError:
                pass
