"""One daemon per state directory: two controllers on one fact log would diverge."""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from reckon.daemon.store.filemodes import FILE_MODE, private_dir


class StateDirBusy(Exception):
    """Another live process holds this state directory."""


class WrongStateDir(Exception):
    """The state directory belongs to an agent of another name (agentstore.claim_identity)."""


class StateDirUnusable(Exception):
    """The state directory cannot be created or written; ``str()`` names the path and what is wrong."""


def _why_unusable(state_dir: Path, step: str, exc: OSError) -> str:
    """What is wrong with ``state_dir``, in the operator's words, from the error of ``step``."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        # A file where a directory must be: name the file, which may be a parent of state_dir.
        for path in (state_dir, *state_dir.parents):
            if path.exists() and not path.is_dir():
                return f"{path} is a file, not a directory"
    reason = (exc.strerror or str(exc)).lower()
    if exc.filename and Path(exc.filename) != state_dir:
        reason += f" ({exc.filename})"
    elif exc.errno == errno.EPERM and state_dir.is_dir() and state_dir.stat().st_uid != os.geteuid():
        reason += f" (it belongs to uid {state_dir.stat().st_uid}, this process runs as uid {os.geteuid()})"
    return f"{step}: {reason}"


def _missing(state_dir: Path) -> list[Path]:
    """The directories ``private_dir(state_dir)`` would create, deepest first."""
    missing = []
    for path in (state_dir, *state_dir.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    return missing


@contextmanager
def hold_state_dir(state_dir: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir/lock`` for the daemon's lifetime.

    The kernel drops the lock when the process dies, even by SIGKILL, so a
    crashed daemon never leaves a stale lock behind.
    """
    created = _missing(state_dir)
    step = "cannot create it"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        step = f"cannot make it the {what}'s own (mode 0700)"
        private_dir(state_dir)
        step = "cannot write in it"
        fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError as exc:  # a refused start leaves nothing behind: remove what it created
        for path in created:
            try:
                path.rmdir()
            except OSError:
                break
        raise StateDirUnusable(f"{what} state directory {state_dir}: {_why_unusable(state_dir, step, exc)}") from None
    os.fchmod(fd, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise StateDirBusy(f"{state_dir} is in use by another {what} (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
