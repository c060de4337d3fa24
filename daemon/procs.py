"""A controller and agents as real OS processes on loopback (demo, benchmarks).

Every process runs `python -m reckon.daemon.cli ...` in its own session with its
stderr in a log file under the base directory; `stop_all` ends every one of
them, whatever happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio


class LocalCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: dict[str, subprocess.Popen] = {}
        self.port = 0
        self.controller_env: dict[str, str] = {}  # set in the controllers' environment, on top of ours

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log_path(self, key: str) -> Path:
        return self.base / f"{key}.log"

    def _spawn(self, key: str, argv: list[str]) -> subprocess.Popen:
        env = {**os.environ, **self.controller_env} if argv[0] == "controller" else None
        with open(self.log_path(key), "ab") as logf:
            proc = subprocess.Popen([sys.executable, "-m", "reckon.daemon.cli", *argv], stdout=subprocess.PIPE,
                                    stderr=logf, start_new_session=True, env=env)
        self.procs[key] = proc
        return proc

    async def start_controller(self, *extra: str) -> float:
        """Start (or restart, on the same port) the controller; seconds until it serves."""
        t0 = time.monotonic()
        proc = self._spawn("controller", ["controller", "--listen", f"127.0.0.1:{self.port}",
                                          "--state-dir", str(self.base / "controller"), *extra])
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        if not line.startswith(b"reckon controller listening"):
            raise RuntimeError(f"controller did not start: {line!r}; see {self.log_path('controller')}")
        self.port = int(line.rsplit(b":", 1)[1])
        return time.monotonic() - t0

    async def start_ha_controller(self, key: str, store: str, *extra: str) -> str:
        """Start a controller on the PostgreSQL store ``store`` under ``key`` (a standby until it
        leads); its URL."""
        proc = self._spawn(key, ["controller", "--listen", "127.0.0.1:0", "--store", store, *extra])
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        if not line.startswith(b"reckon controller listening on ws://"):
            raise RuntimeError(f"controller {key} did not start: {line!r}; see {self.log_path(key)}")
        return line.split()[4].decode()

    async def start_agent(self, name: str, slots: int, *extra: str, controller: str | None = None) -> None:
        """Start (or restart) an agent; ``controller`` is the URL it dials (default: the controller's own)."""
        proc = self._spawn(name, ["agent", "--name", name, "--slots", str(slots),
                                  "--state-dir", str(self.base / name), "--controller", controller or self.url,
                                  *extra])
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        if not line.startswith(b"reckon agent"):
            raise RuntimeError(f"agent {name} did not start: {line!r}; see {self.log_path(name)}")

    def pid(self, key: str) -> int:
        return self.procs[key].pid

    def signal(self, key: str, signum: int) -> None:
        self.procs[key].send_signal(signum)

    def kill(self, key: str) -> None:
        """SIGKILL and reap: a crash, not a shutdown."""
        proc = self.procs.pop(key)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def terminate(self, key: str, grace: float = 15.0) -> bool:
        """SIGTERM and reap (a clean stop); SIGKILL after ``grace`` seconds.  True if it stopped in time."""
        proc = self.procs.pop(key)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
            return True
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return False

    def running(self, key: str) -> bool:
        return key in self.procs and self.procs[key].poll() is None

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped daemon would not see the SIGTERM
                proc.send_signal(signal.SIGTERM)
        for key in list(self.procs):
            proc = self.procs.pop(key)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
