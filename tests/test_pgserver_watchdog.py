"""tests/pgserver.py: a test run killed with SIGKILL does not leave its PostgreSQL running."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

GUARD = 60.0  # seconds: generous, never reached by a passing run

CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from tests.pgserver import PgServer
server = PgServer().start()
print(server.data, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {GUARD:.0f}s waiting for {what}"
        time.sleep(0.05)


def test_the_server_stops_when_the_process_that_started_it_is_killed():
    root = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=root)], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    postmaster = None
    data = None
    try:
        ready, _, _ = select.select([child.stdout], [], [], GUARD)
        assert ready, "the child did not start its PostgreSQL in time"
        data = Path(child.stdout.readline().decode().strip())
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        assert _alive(postmaster)
        child.send_signal(signal.SIGKILL)  # no teardown, no atexit: only the watchdog is left to act
        child.wait(timeout=GUARD)
        _wait(lambda: not _alive(postmaster), f"postgres {postmaster} to stop")
        _wait(lambda: not data.parent.exists(), f"{data.parent} to be removed")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        if postmaster is not None and _alive(postmaster):  # the watchdog failed: do not leave it behind
            os.kill(postmaster, signal.SIGKILL)
            _wait(lambda: not _alive(postmaster), f"postgres {postmaster} to die")
        if data is not None:
            shutil.rmtree(data.parent, ignore_errors=True)
