"""The daemons' log: stderr, or a file (``--log-file FILE``) that SIGHUP reopens.

logrotate (and its kin) renames the file and sends SIGHUP: the daemon then
closes the renamed file and opens a new one under the configured name, so no
line is lost and none goes to the old file after the signal.  The new file
is created 0600 (the log names jobs, agents and addresses).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from reckon.daemon.ops.logformat import make_formatter, quiet_libraries

LOG_FILE_MODE = 0o600


class ReopenableFileHandler(logging.StreamHandler):
    """Appends to ``path``; ``reopen()`` switches to whatever file has that name now."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(self._open())

    def _open(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, LOG_FILE_MODE)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")

    def reopen(self) -> None:
        """Raises OSError (the old file stays in use) if the new one cannot be opened."""
        stream = self._open()
        self.acquire()
        try:
            old, self.stream = self.stream, stream
        finally:
            self.release()
        old.close()

    def close(self) -> None:
        self.acquire()
        try:
            try:
                self.flush()
            finally:
                self.stream.close()
        finally:
            self.release()
            super().close()


def setup_logging(level: int, log_file: Path | None = None, log_format: str = "text") -> ReopenableFileHandler | None:
    """Log at ``level`` to stderr, or to ``log_file``, as text or JSON lines (daemon/ops/logformat.py);
    the file's handler (for SIGHUP), if any.

    Raises OSError with the file's name when ``log_file`` cannot be opened.
    """
    handler: logging.Handler
    file_handler = None
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = file_handler = ReopenableFileHandler(log_file)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    quiet_libraries()  # no raw WebSocket frames, even with -v
    return file_handler


def reopen_on_hangup(handler: ReopenableFileHandler) -> None:
    """What SIGHUP does with a log file: reopen it (and say so in the new one)."""
    log = logging.getLogger("reckon")
    try:
        handler.reopen()
    except OSError as exc:
        log.warning("SIGHUP: cannot reopen %s (%s): still writing to the old file", handler.path, exc.strerror)
        return
    log.info("SIGHUP: reopened %s", handler.path)
