"""The tests' private munged: a MUNGE daemon in a temporary directory with a generated key (test
infrastructure, not part of the installed package), as tests/pgserver.py is for PostgreSQL.

``with Munged() as munged:`` starts one (its own key, socket, pid, log and seed files; ``--force``
when root, as munged refuses a key directory it does not trust otherwise) and stops it, and
removes its directory, however the block ends.  The daemon runs in the foreground as our
child, and dies with us even on SIGKILL (``PR_SET_PDEATHSIG``).  Without MUNGE installed,
``Munged()`` raises with ``INSTALL_HINT``: the tests FAIL saying what they need, never skip
(``make test`` installs it when run as root).

The benchmark of a munge cluster needs a munged; from a checkout this module starts one and
runs the command given after ``--`` with ``RECKON_MUNGE_SOCKET`` naming it::

    python -m tests.munged -- reckon bench cli --auth both
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSTALL_HINT = ("the MUNGE tests need munged and libmunge.so.2: install them (Debian/Ubuntu: "
                "`apt-get install munge`; `make test` does this itself when run as root)")
START_TIMEOUT = 20.0  # seconds for munged to answer its first credential
STOP_TIMEOUT = 20.0  # seconds of repeated SIGTERM before SIGKILL


def find_munged() -> str | None:
    return shutil.which("munged") or next((p for p in ("/usr/sbin/munged", "/sbin/munged") if os.path.exists(p)),
                                          None)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Munged:
    def __init__(self) -> None:
        binary = find_munged()
        if binary is None:
            raise RuntimeError(INSTALL_HINT)
        try:
            ctypes.CDLL("libmunge.so.2")
        except OSError:
            raise RuntimeError(INSTALL_HINT) from None
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="reckon-munge-"))
        self.root.chmod(0o711)  # other users (the tests' unprivileged clients) reach the socket
        self.key = self.root / "munge.key"
        self.socket = str(self.root / "munge.socket")
        self.log = self.root / "munged.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Munged":
        with open(self.key, "wb") as fh:
            fh.write(os.urandom(1024))  # what `mungekey` makes: random bytes, read only by munged
        self.key.chmod(0o400)
        argv = [self.binary, "--foreground", f"--socket={self.socket}", f"--key-file={self.key}",
                f"--pid-file={self.root / 'munged.pid'}", f"--log-file={self.log}",
                f"--seed-file={self.root / 'munged.seed'}", "--num-threads=4"]
        if os.geteuid() == 0:
            argv.append("--force")  # root: munged would refuse the temporary directory's ownership checks
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            preexec_fn=_die_with_parent)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        from reckon.daemon.auth import munge

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"munged exited at start ({self.process.returncode}): {self.log_text()}")
            try:
                munge.decode(munge.encode(self.socket), self.socket)
                return
            except munge.MungeError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"munged did not answer within {START_TIMEOUT:g}s: {self.log_text()}")
                time.sleep(0.02)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace").strip()
        except OSError:
            return "(no log)"

    def pause(self) -> None:
        """Stop munged (its socket goes away): a machine whose munged is down.

        munged's main thread tests its terminate flag and then blocks in accept(): a SIGTERM that
        lands between the two sets the flag and is not seen until the next connection.  So the
        signal is repeated (each one interrupts the accept) until munged exits, and SIGKILL
        ends a munged that still has not."""
        if self.process is None:
            return
        deadline = time.monotonic() + STOP_TIMEOUT
        while self.process.poll() is None and time.monotonic() < deadline:
            self.process.terminate()
            try:
                self.process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        try:
            os.unlink(self.socket)  # a killed munged leaves it; a stopped munged has no socket
        except FileNotFoundError:
            pass
        self.process = None

    def __enter__(self) -> "Munged":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        try:
            self.pause()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def run_with_munged(argv: list[str]) -> int:
    """``-- COMMAND...``: run COMMAND with ``RECKON_MUNGE_SOCKET`` naming a private munged; its exit status."""
    if argv[:1] != ["--"] or len(argv) < 2:
        print("usage: python -m tests.munged -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    with Munged() as munged:
        try:
            return subprocess.run(argv[1:], env={**os.environ, "RECKON_MUNGE_SOCKET": munged.socket}).returncode
        except KeyboardInterrupt:
            return 130
        except OSError as exc:
            print(f"tests.munged: cannot run {argv[1]}: {exc.strerror or exc}", file=sys.stderr)
            return 127


if __name__ == "__main__":
    sys.exit(run_with_munged(sys.argv[1:]))
