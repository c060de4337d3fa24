"""One daemon per state directory: two controllers on one fact log would diverge."""

from __future__ import annotations

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


@contextmanager
def hold_state_dir(state_dir: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir/lock`` for the daemon's lifetime.

    The kernel drops the lock when the process dies, even by SIGKILL, so a
    crashed daemon never leaves a stale lock behind.
    """
    private_dir(state_dir)
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
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
