"""`reckon controller --http` as an operator runs it (a real process), and the entry's seam
(daemon/cli/daemons.py ``ControllerBackend``) for a standby controller, which has no daemon."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from reckon.daemon.cli.daemons import ControllerBackend
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.controller.standby import Front
from reckon.daemon.http.backend import Unavailable
from tests.http.cluster import DEADLINE

RECKON = [sys.executable, "-m", "reckon.daemon.cli"]


def test_the_controller_serves_the_api_beside_its_websocket(tmp_path):
    log = tmp_path / "controller.log"  # a file, not a pipe: a full pipe would stall the controller's logging
    with log.open("w") as out:
        proc = subprocess.Popen([*RECKON, "controller", "--state-dir", str(tmp_path / "c"), "--listen", "127.0.0.1:0",
                                 "--http", "127.0.0.1:0"], stdout=out, stderr=subprocess.STDOUT)
    try:
        url, deadline = None, time.monotonic() + DEADLINE
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)/api/v1/", log.read_text())
            url = found.group(1) if found else time.sleep(0.05)
        assert url is not None, log.read_text()
        status = httpx.get(url + "/api/v1/status", timeout=DEADLINE)  # loopback, no token configured: admitted
        assert status.status_code == 200 and status.json()["status"]["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=DEADLINE) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_taken_http_port_is_one_line_and_exit_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*RECKON, "controller", "--state-dir", str(tmp_path / "c"), "--listen", "127.0.0.1:0",
                               "--http", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (--http)" in done.stderr.strip().splitlines()[-1]
    bad = subprocess.run([*RECKON, "controller", "--state-dir", str(tmp_path / "c"), "--http", "nowhere"],
                         capture_output=True, text=True, timeout=DEADLINE)
    assert bad.returncode == 2 and "--http" in bad.stderr


async def test_a_standby_answers_503_naming_the_leader():
    front = Front(ControllerOptions())
    backend = ControllerBackend(front, "token")
    with pytest.raises(Unavailable, match="not the leader: no controller leads right now"):
        await backend.call("jobs", {}, None)
    front.leader = "ws://10.0.0.2:7420"
    with pytest.raises(Unavailable, match="the leader is ws://10.0.0.2:7420") as info:
        await backend.call("status", {}, None)
    assert info.value.status == 503
    assert await backend.call("whoami", {}, None) == {"auth": "token", "caller": None}
