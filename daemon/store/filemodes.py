"""Owner-only state: directories 0700, files 0600.

The controller's database holds every job's environment (which may carry a
job's secrets); an agent's database, outbox and job files say what ran
there.  None of it is for other users of the machine.  Modes are set
explicitly (``chmod``), not through the umask: the daemons may run in a
process (tests, ``reckon dev``) whose umask is not theirs to change.
SQLite creates a database's ``-wal`` and ``-shm`` files with the database
file's own mode, so a database created 0600 keeps them 0600 too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
OUTPUT_MODE = 0o600  # job output files, unless the agent is told otherwise (--output-mode)


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) if needed; make it 0700.

    An existing state directory is tightened as well: it is the daemon's own.
    """
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
        path.chmod(DIR_MODE)


def private_file(path: Path) -> None:
    """Create ``path`` empty if it does not exist; make it 0600 (before SQLite opens it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def parse_mode(value: str) -> int:
    """An octal file mode such as ``0640``; ValueError for anything else (the owner must read and write)."""
    try:
        mode = int(value, 8)
    except (TypeError, ValueError):
        raise ValueError(f"expected an octal file mode such as 0640, got {value!r}") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"file mode out of range: {value!r}")
    if mode & 0o600 != 0o600:
        raise ValueError(f"file mode {value!r} must let the owner (the agent) read and write")
    if mode & 0o111:
        raise ValueError(f"file mode {value!r} must not make output files executable")
    return mode
