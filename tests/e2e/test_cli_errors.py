"""The CLI's errors (issue #10): every user or operator mistake ends in one `reckon: ...` line, no traceback.

Exit status 2 for a usage error (the command line or a file cannot work as
written), 1 for a failure (the controller unreachable, frozen or refusing, a
busy port or state directory).  Each item goes through the real CLI.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.e2e


def _reason(cluster, result: subprocess.CompletedProcess, status: int) -> str:
    assert result.returncode == status, result
    assert "Traceback" not in result.stderr, result.stderr
    return cluster.one_line_reason(result)


def test_daemon_start_mistakes_end_in_one_line(cluster):
    cluster.start_controller()
    # A busy port: one line naming the address, and no database created for the failed start.
    fresh = cluster.base / "second"
    reason = _reason(cluster, cluster.run("controller", "--listen", f"127.0.0.1:{cluster.port}",
                                          "--state-dir", str(fresh)), 1)
    assert "cannot listen" in reason and f"127.0.0.1:{cluster.port}" in reason, reason
    assert not list(fresh.glob("*.db*")), list(fresh.iterdir())
    # A busy state directory: refused, and nothing in it changed.
    before = sorted(p.name for p in cluster.controller_dir.iterdir())
    reason = _reason(cluster, cluster.run("controller", "--listen", "127.0.0.1:0",
                                          "--state-dir", str(cluster.controller_dir)), 1)
    assert "in use by another controller" in reason, reason
    assert sorted(p.name for p in cluster.controller_dir.iterdir()) == before
    # Usage errors: status 2, one line, before anything starts.
    agent = ["agent", "--state-dir", str(cluster.base / "agent-x")]
    cases = [
        (["controller", "--listen", "127.0.0.1:70000", "--state-dir", str(fresh)], "out of range"),
        ([*agent, "--name", "", "--slots", "1"], "not a valid agent name"),
        ([*agent, "--name", "a/b", "--slots", "1"], "not a valid agent name"),
        ([*agent, "--name", "x", "--slots", "0"], "--slots"),
        ([*agent, "--name", "x", "--slots", "1", "--controller", f"http://127.0.0.1:{cluster.port}"], "ws://"),
        ([*agent, "--name", "x", "--slots", "1", "--controller", f"127.0.0.1:{cluster.port}"], "no scheme"),
        ([*agent, "--name", "x", "--slots", "1", "--controller", "ws://127.0.0.1:1,wss://127.0.0.1:2",
          "--ca", str(cluster.base / "no-such-ca.pem")], "cannot load CA file"),  # a wss:// URL not first
        (["controller", "--name", "x", "--state-dir", str(fresh)], "unrecognized arguments: --name"),
        (["controller", "--controller", cluster.url, "--state-dir", str(fresh)], "unrecognized arguments"),
        (["demo", "--controller", cluster.url], "unrecognized arguments"),
        (["bogus"], "invalid choice"),
        (["controller", "--store", "postgresql://reckon@127.0.0.1:notaport/x"], "'notaport': not a number"),
        (["controller", "--store", "postgresql://reckon@/x?bogus=1"], "not a usable postgresql:// URL"),
    ]
    for argv, expected in cases:
        reason = _reason(cluster, cluster.run(*argv), 2)
        assert expected in reason, (argv, reason)
    # A PostgreSQL store that does not answer: one line (libpq's message spans several), status 1.
    reason = _reason(cluster, cluster.run("controller", "--listen", "127.0.0.1:0", "--store",
                                          f"postgresql://reckon@/x?host={cluster.base}/nowhere"), 1)
    assert reason.startswith("reckon: cannot connect to postgresql://reckon@") and "No such file" in reason, reason
    assert not (cluster.base / "agent-x").exists(), "a refused agent start created its state directory"


def test_client_mistakes_end_in_one_line(cluster):
    cluster.start_controller()
    for url, expected in ((f"http://127.0.0.1:{cluster.port}", "http://"),
                          (f"127.0.0.1:{cluster.port}", "no scheme"),
                          (f"ws://127.0.0.1:{cluster.port}/x", "without a path")):
        reason = _reason(cluster, cluster.run("jobs", controller=url), 2)
        assert expected in reason and "ws://" in reason, reason
    assert "no command" in _reason(cluster, cluster.run("submit"), 2)
    assert "slots" in _reason(cluster, cluster.run("submit", "--slots", "0", "--", "true"), 2)
    assert "invalid int" in _reason(cluster, cluster.run("submit", "--slots", "x", "--", "true"), 2)
    assert "unknown job" in _reason(cluster, cluster.run("show", "99"), 1)
    for command in ("jobs", "history"):  # a user with no account and no job: a refusal, not an empty table
        assert "no user nosuchuser" in _reason(cluster, cluster.run(command, "--user", "nosuchuser"), 1)


def test_version():
    out = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "--version"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("reckon ") and "protocol version" in out.stdout, out


def test_a_closed_pipe_ends_quietly(cluster):
    cluster.start_controller()
    cluster.submit("true")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`| head`) is gone before reckon writes
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
        env["RECKON_CONTROLLER"] = cluster.url
        result = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "jobs"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, env=env, timeout=30)
    finally:
        os.close(write_end)
    assert result.stderr == "", result.stderr
    assert result.returncode == 141, result  # as a shell tool killed by SIGPIPE


class _FrozenController:
    """A listener on loopback that looks like a stopped (SIGSTOP) or stuck controller.

    ``answer_handshake=False``: accepts TCP (the kernel does) and never says a
    word.  True: completes the WebSocket handshake, then never replies.
    """

    def __init__(self, answer_handshake: bool) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        if answer_handshake:
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            key = next(line.split(b":", 1)[1].strip() for line in data.split(b"\r\n")
                       if line.lower().startswith(b"sec-websocket-key:"))
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")

    def close(self) -> None:
        self.stop.set()
        for s in [*self.held, self.sock]:
            s.close()


@pytest.mark.parametrize("answer_handshake,expected", [(False, "handshake"), (True, "did not reply")])
def test_a_frozen_controller_times_out_with_its_name(cluster, answer_handshake, expected):
    frozen = _FrozenController(answer_handshake)
    try:
        url = f"ws://127.0.0.1:{frozen.port}"
        reason = _reason(cluster, cluster.run("jobs", "--timeout", "1", controller=url), 1)
        assert expected in reason and url in reason and "1s" in reason, reason
    finally:
        frozen.close()


def test_a_reserve_of_all_the_memory_is_one_line_and_leaves_no_cgroup(cluster):
    """--reserve-mem at least the machine's memory is found at start (the memory may be detected):
    one line, status 2, and the agent's base cgroups are gone again."""
    import glob

    name = f"reserve{os.getpid()}"
    result = cluster.run("agent", "--name", name, "--state-dir", str(cluster.base / "agent-reserve"),
                         "--controller", "ws://127.0.0.1:1", "--mem", "2G", "--reserve-mem", "4G", "--slots", "1")
    reason = _reason(cluster, result, 2)
    assert reason == "reckon: --reserve-mem 4G leaves no memory of 2G for jobs", reason
    assert not glob.glob(f"/sys/fs/cgroup/*/reckon*/{name}-*") and not glob.glob(f"/sys/fs/cgroup/*/{name}-*")
