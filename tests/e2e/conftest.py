"""End-to-end fixtures: the real `reckon` CLI and daemons as processes on loopback.

``cluster`` (a ``Cluster``) starts ``reckon controller --listen 127.0.0.1:0``
(the port is parsed from its first stdout line and reused on restart),
``reckon agent`` processes (each in its own session, cwd ``tmp_path``,
stderr to ``tmp_path/<name>.log``), runs CLI commands and parses their JSON.

Rules every e2e test follows:

* synchronise on conditions (``wait_for``), never on fixed sleeps;
* a hang guard everywhere: every wait has a timeout, every CLI call too, and
  the autouse ``hang_guard`` fixture (SIGALRM) ends a test that overruns;
* teardown kills every process the test started, then every job process
  group and supervisor named by a runner pid file under ``tmp_path``, then any
  process whose cwd or command line still points under ``tmp_path``.

The tests are synchronous: each daemon and each CLI call is its own process,
so there is nothing to interleave in the test process.  The few raw protocol
probes open their own ``trio.run``.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import pytest

from reckon.daemon.agent import cgroups
from reckon.daemon.agent.launcher import read_records

HANG = 30.0  # seconds: the default guard of one wait, never reached by a passing test
TEST_GUARD = 150  # seconds: a whole test (setup, body, teardown), never reached either
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")

T = TypeVar("T")


def reckon_argv() -> list[str]:
    """The installed console script (the CLI contract), else ``python -m reckon.daemon.cli``."""
    script = Path(sys.executable).parent / "reckon"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "reckon.daemon.cli"]


def hermetic_env(**extra: str) -> dict[str, str]:
    """The test's environment without any RECKON_* setting that would leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    env.update(extra)
    return env


# ---- waiting on conditions --------------------------------------------------------


class CliFailed(Exception):
    def __init__(self, args: Iterable[str], result: subprocess.CompletedProcess) -> None:
        super().__init__(f"reckon {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        self.result = result


def wait_for(predicate: Callable[[], T], *, timeout: float = HANG, interval: float = 0.05,
             what: str | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy and return that.

    A ``CliFailed`` (say, the controller is restarting) counts as "not yet".
    After ``timeout`` seconds the test fails, naming the condition and the
    last value or error seen.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = predicate()
        except CliFailed as exc:
            value, last = None, exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__name__", "condition")
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {name}; last: {last!r}")
        time.sleep(interval)


# ---- processes ------------------------------------------------------------------------


def proc_start(pid: int) -> int | None:
    """/proc start time of a live (non-zombie) process, else None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        fields = data[data.rindex(b")") + 2:].split()
    except (OSError, ValueError):
        return None
    return None if fields[0] in (b"Z", b"X", b"x") else int(fields[19])


def alive(pid: int, start: int | None = None) -> bool:
    st = proc_start(pid)
    return st is not None and (start is None or st == start)


def read_json(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


@dataclass
class Daemon:
    key: str
    argv: list[str]
    proc: subprocess.Popen
    log: Path


def _read_line(proc: subprocess.Popen, timeout: float, log: Path) -> str:
    """The daemon's first stdout line, without blocking past ``timeout``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no start-up line from {proc.args} in {timeout:.0f}s; log:\n{_tail(log)}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait(timeout=5)
                raise AssertionError(f"{proc.args} exited {proc.returncode} before starting; log:\n{_tail(log)}")
            buf += chunk
    line = buf.split(b"\n", 1)[0].decode()
    # With --log-format json the line is a JSON object like every log line: its message is the line.
    return json.loads(line)["message"] if line.startswith("{") else line


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Cluster:
    """A controller and agents as real processes under ``base``; see the module docstring."""

    # The helpers, for tests (which use the fixture, never import this module).
    wait_for = staticmethod(wait_for)
    alive = staticmethod(alive)
    read_json = staticmethod(read_json)
    TERMINAL = TERMINAL

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = 0
        self.token: str | None = None
        self.token_file: Path | None = None
        self.controller_args: list[str] = []
        self.agent_args: dict[str, list[str]] = {}
        self.daemons: dict[str, Daemon] = {}
        self._all: list[subprocess.Popen] = []
        self.controller_urls: str | None = None  # several controllers (PostgreSQL store): agents' and CLI's URLs
        self.scheme = "ws"  # "wss" after use_tls
        self.ca: Path | None = None  # the CA the CLI and agents trust (RECKON_CA), after use_tls
        self.auth_env: dict[str, str] = {}  # RECKON_AUTH and RECKON_MUNGE_SOCKET, after use_munge

    # ---- paths ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.controller_urls or f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def controller_dir(self) -> Path:
        return self.base / "controller"

    def agent_dir(self, name: str) -> Path:
        return self.base / f"agent-{name}"

    def log_path(self, key: str) -> Path:
        return self.base / f"{key}.log"

    def log_text(self, key: str) -> str:
        try:
            return self.log_path(key).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def use_token(self, token: str) -> None:
        """From now on: the controller and agents get --token-file, the CLI gets RECKON_TOKEN."""
        self.token = token
        self.token_file = self.base / "token"
        self.token_file.write_text(token + "\n")
        self.token_file.chmod(0o600)

    def use_tls(self, cert: Path, key: Path, ca: Path) -> None:
        """From now on: the controller serves wss:// with ``cert``/``key``; the CLI and agents trust ``ca``."""
        self.scheme, self.ca = "wss", ca
        self.controller_args = [*self.controller_args, "--tls-cert", str(cert), "--tls-key", str(key)]

    def use_munge(self, socket: str) -> None:
        """From now on: the controller, the agents and the CLI authenticate with MUNGE through the
        munged at ``socket`` (RECKON_AUTH, RECKON_MUNGE_SOCKET), and no token."""
        self.auth_env = {"RECKON_AUTH": "munge", "RECKON_MUNGE_SOCKET": socket}

    def _tls_env(self) -> dict[str, str]:
        return {**({"RECKON_CA": str(self.ca)} if self.ca is not None else {}), **self.auth_env}

    # ---- daemons ------------------------------------------------------------------

    def _spawn(self, key: str, argv: list[str], **env: str) -> Daemon:
        log = self.log_path(key)
        with open(log, "ab") as logf:
            proc = subprocess.Popen(reckon_argv() + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=logf, cwd=self.base, env=hermetic_env(**self._tls_env(), **env),
                                    start_new_session=True)
        self._all.append(proc)
        daemon = self.daemons[key] = Daemon(key=key, argv=argv, proc=proc, log=log)
        return daemon

    def start_controller(self, *extra: str) -> float:
        """Start (or restart, on the same port) the controller; seconds until it serves.

        ``extra`` options are remembered for restarts.
        """
        if extra:
            self.controller_args = list(extra)
        assert "controller" not in self.daemons or self.daemons["controller"].proc.poll() is not None
        argv = ["controller", "--listen", f"127.0.0.1:{self.port}", "--state-dir", str(self.controller_dir),
                *self.controller_args]
        if self.token_file is not None:
            argv += ["--token-file", str(self.token_file)]
        t0 = time.monotonic()
        daemon = self._spawn("controller", argv)
        line = _read_line(daemon.proc, HANG, daemon.log)
        prefix = f"reckon controller listening on {self.scheme}://127.0.0.1:"
        assert line.startswith(prefix), f"unexpected first line {line!r}"
        port = int(line[len(prefix):])
        assert self.port in (0, port), f"restarted on port {port}, not {self.port}"
        self.port = port
        return time.monotonic() - t0

    def start_ha_controller(self, key: str, store: str, *extra: str) -> int:
        """Start a controller on the PostgreSQL store ``store`` under ``key``; its port."""
        argv = ["controller", "--listen", "127.0.0.1:0", "--store", store, *extra]
        if self.token_file is not None:
            argv += ["--token-file", str(self.token_file)]
        daemon = self._spawn(key, argv)
        line = _read_line(daemon.proc, HANG, daemon.log)
        found = re.match(r"reckon controller listening on wss?://127\.0\.0\.1:(\d+) ", line)
        assert found, f"unexpected first line {line!r}"
        return int(found[1])

    def start_agent(self, name: str, *extra: str, slots: int = 4, wait_joined: bool = True,
                    token_file: Path | None = None, key: str | None = None) -> Daemon:
        """Start (or restart, with the same options) an agent.

        Short intervals keep the tests fast: reconnect backoff cap 0.5 s,
        heartbeat 0.5 s, kill grace 2 s (``extra`` may override any of them).
        ``key`` (default: the name) names its process, state directory and log:
        a second agent under one name (a cloned machine) needs a key of its own.
        """
        key = key or name
        if key not in self.agent_args or extra or token_file is not None:
            args = ["--slots", str(slots), "--reconnect-max", "0.5", "--heartbeat-interval", "0.5",
                    "--kill-grace", "2", *extra]
            token = token_file or self.token_file
            if token is not None:
                args += ["--token-file", str(token)]
            self.agent_args[key] = args
        assert key not in self.daemons or self.daemons[key].proc.poll() is not None
        argv = ["agent", "--name", name, "--state-dir", str(self.agent_dir(key)),
                "--controller", self.url, *self.agent_args[key]]
        daemon = self._spawn(key, argv)
        line = _read_line(daemon.proc, HANG, daemon.log)
        assert line.startswith(f"reckon agent {name} running"), f"unexpected first line {line!r}"
        if wait_joined:
            self.wait_node(name, ("IDLE", "MIXED", "BUSY"))
        return daemon

    def start_dev(self, *extra: str, tmpdir: Path) -> tuple[Daemon, str]:
        """Start ``reckon dev`` (temporary directories under ``tmpdir``); the daemon and its first line.
        The CLI helpers talk to its controller from then on."""
        daemon = self._spawn("dev", ["dev", "--listen", "127.0.0.1:0", *extra], TMPDIR=str(tmpdir))
        line = _read_line(daemon.proc, HANG, daemon.log)
        found = re.match(r"reckon dev: controller on ws://127\.0\.0\.1:(\d+), ", line)
        assert found, f"unexpected first line {line!r}"
        self.port = int(found[1])
        return daemon, line

    def pid(self, key: str) -> int:
        return self.daemons[key].proc.pid

    def running(self, key: str) -> bool:
        return key in self.daemons and self.daemons[key].proc.poll() is None

    def kill(self, key: str, sig: int = signal.SIGKILL) -> float:
        """Signal a daemon and reap it; the wall-clock time once it is gone."""
        proc = self.daemons[key].proc
        proc.send_signal(sig)
        proc.wait(timeout=HANG)
        return time.time()

    def stop(self, key: str) -> float:
        """SIGTERM (a clean stop); SIGKILL if it does not stop in time.  Seconds it took."""
        proc = self.daemons[key].proc
        t0 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"{key} did not stop within 15 s of SIGTERM")
        return time.monotonic() - t0

    def signal(self, key: str, sig: int) -> None:
        self.daemons[key].proc.send_signal(sig)

    # ---- the CLI ------------------------------------------------------------------

    def run(self, *args: str, token: str | None | bool = True, controller: str | None = None,
            timeout: float = HANG) -> subprocess.CompletedProcess:
        """Run ``reckon ARGS`` against this cluster; the completed process (any exit status).

        ``token``: True for the cluster's token (if any), a string for that
        token (RECKON_TOKEN), None/False for none.
        """
        env = hermetic_env(RECKON_CONTROLLER=controller or self.url, **self._tls_env())
        tok = self.token if token is True else token or None
        if tok:
            env["RECKON_TOKEN"] = tok
        return subprocess.run(reckon_argv() + list(args), capture_output=True, text=True, env=env,
                              cwd=self.base, timeout=timeout, stdin=subprocess.DEVNULL)

    @staticmethod
    def one_line_reason(result: subprocess.CompletedProcess) -> str:
        """The CLI's failure contract: non-zero, nothing on stdout, one `reckon: ...` line on stderr."""
        assert result.returncode != 0, result
        assert result.stdout == "", result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, f"expected a one-line reason, got {result.stderr!r}"
        assert lines[0].startswith("reckon: "), lines[0]
        return lines[0]

    def cli(self, *args: str, **kw: Any) -> str:
        result = self.run(*args, **kw)
        if result.returncode != 0:
            raise CliFailed(args, result)
        return result.stdout

    def cli_json(self, *args: str, **kw: Any) -> Any:
        return json.loads(self.cli(*args, "--json", **kw))

    def submit(self, *command: str, name: str | None = None) -> str:
        args = ["submit"] + (["--name", name] if name else []) + ["--", *command]
        out = self.cli(*args)
        return out.strip()

    def submit_many(self, specs: list[dict]) -> list[str]:
        """Many jobs through one connection (`submit_many`, as the demo does): a burst costs no forks."""
        import trio

        from reckon.daemon.client import call

        async def go() -> list[str]:
            with trio.fail_after(HANG):
                return (await call(self.url, self.token, "submit_many", specs=specs))["jobs"]

        return trio.run(go)

    def jobs(self, state: str | None = None) -> dict[str, dict]:
        args = ["jobs"] + (["--state", state] if state else [])
        return {j["id"]: j for j in self.cli_json(*args)}

    def job(self, job_id: str) -> dict:
        return self.cli_json("show", job_id)

    def nodes(self) -> dict[str, dict]:
        return {n["name"]: n for n in self.cli_json("nodes")}

    # ---- conditions ---------------------------------------------------------------

    def wait_node(self, name: str, states: Iterable[str], timeout: float = HANG) -> dict:
        states = tuple(states)

        def node_in_state() -> dict | None:
            node = self.nodes().get(name)
            return node if node is not None and node["state"] in states else None

        return wait_for(node_in_state, timeout=timeout, what=f"node {name} in {states}")

    def wait_job(self, job_id: str, states: Iterable[str] = TERMINAL, timeout: float = HANG,
                 interval: float = 0.05) -> dict:
        states = tuple(states)

        def job_in_state() -> dict | None:
            job = self.job(job_id)
            return job if job["state"] in states else None

        return wait_for(job_in_state, timeout=timeout, interval=interval, what=f"job {job_id} in {states}")

    def wait_jobs(self, ids: Iterable[str], states: Iterable[str] = TERMINAL, timeout: float = HANG,
                  interval: float = 0.2) -> dict[str, dict]:
        ids, states = list(ids), tuple(states)

        def all_in_state() -> dict[str, dict] | None:
            jobs = self.jobs()
            return jobs if all(jobs[i]["state"] in states for i in ids) else None

        return wait_for(all_in_state, timeout=timeout, interval=interval,
                        what=f"{len(ids)} jobs in {states}")

    def wait_file(self, path: Path, timeout: float = HANG) -> Path:
        wait_for(path.exists, timeout=timeout, interval=0.02, what=f"{path} to exist")
        return path

    # ---- the agents' runner files (daemon/agent/launcher.py: jobs/<job>.<attempt>.run) ---------

    def run_records(self, agent: str, job: str, attempt: int = 1) -> tuple[dict | None, dict | None]:
        """The (pid, status) records of an attempt's .run file."""
        return read_records(self.agent_dir(agent) / "jobs" / f"{job}.{attempt}.run") or (None, None)

    def pid_file(self, agent: str, job: str, attempt: int = 1) -> dict | None:
        return self.run_records(agent, job, attempt)[0]

    def status_file(self, agent: str, job: str, attempt: int = 1) -> dict | None:
        return self.run_records(agent, job, attempt)[1]

    def attempts(self) -> dict[Path, tuple[dict | None, dict | None]]:
        """Every attempt's (pid, status) records, by its .run file, across all agents."""
        return {path: read_records(path) or (None, None) for path in self.base.glob("agent-*/jobs/*.run")}

    def statuses(self) -> dict[tuple[str, str, int], dict]:
        """Every status record of every agent: (agent dir, job, attempt) -> status."""
        out = {}
        for path in self.base.glob("agent-*/jobs/*.run"):
            job, _, attempt = path.name[:-len(".run")].rpartition(".")
            status = (read_records(path) or (None, None))[1]
            if status is not None:
                out[(path.parents[1].name, job, int(attempt))] = status
        return out

    # ---- the controller's fact log ----------------------------------------------------

    def facts(self) -> list:
        """Every fact in the controller's log (the controller must be stopped)."""
        assert not self.running("controller"), "stop the controller before reading its log"
        import trio

        from reckon.daemon.store.facts import FactStore

        async def load() -> list:
            store = await FactStore.open(self.controller_dir)
            try:
                snapshot, facts, _ = await store.load()
            finally:
                await store.aclose()
            assert snapshot is None, "a snapshot pruned the log: raise --snapshot-every"
            return facts

        return trio.run(load)

    # ---- teardown -------------------------------------------------------------------

    def close(self) -> list[str]:
        """Kill everything this cluster started or left behind; describe what had to be killed late."""
        for proc in self._all:
            if proc.poll() is None:
                proc.kill()
        for proc in self._all:
            try:
                proc.wait(timeout=HANG)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdout is not None:
                proc.stdout.close()
        leftovers = []
        # Supervisors and job process groups named by the runners' pid records.
        for path in self.base.glob("agent-*/jobs/*.run"):
            info = (read_records(path) or (None, None))[0] or {}
            for pid_key, start_key, group in (("job_pid", "job_start", True),
                                              ("supervisor", "supervisor_start", False)):
                pid, start = info.get(pid_key), info.get(start_key)
                if isinstance(pid, int) and pid > 0 and alive(pid, start):
                    leftovers.append(f"{pid_key} {pid} of {path.parent.name}")
                    try:
                        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        # Anything else still working under tmp_path (launchers, grandchildren of jobs).
        deadline = time.monotonic() + 10
        while True:
            strays = list(_processes_under(self.base))
            if not strays or time.monotonic() > deadline:
                break
            for pid, desc in strays:
                leftovers.append(f"stray {pid}: {desc}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        # A supervisor killed (here, or by the test) never removes its attempt's cgroup, and no
        # later agent of this test's identity starts to clean it: remove them, and the bases.
        for state_dir in self.base.glob("agent-*"):
            for spec in agent_cgroups(state_dir):
                cgroup = cgroups.Cgroup(spec)
                cgroup.kill_all()
                if not cgroup.remove():  # and the agent's base directories, once empty
                    leftovers.append(f"cgroup {' '.join(cgroup.all_dirs)}")
        return leftovers


def agent_cgroups(state_dir: Path) -> list[dict]:
    """The v1 cgroups of the attempts of the agent whose state directory this is
    (``<mount>/reckon/<name>-<identity>/<job>.<attempt>``, daemon/agent/resources.py), as
    ``cgroups.Cgroup`` specs; none without v1 cgroups or before the agent made its identity."""
    try:
        with sqlite3.connect(f"file:{state_dir / 'agent.db'}?mode=ro", uri=True, timeout=5) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('identity', 'name')"))
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except (OSError, sqlite3.Error):
        return []
    if "identity" not in meta or "name" not in meta:
        return []
    name = cgroups.safe_name(f"{meta['name']}-{meta['identity'][:12]}")
    attempts: dict[str, dict[str, str]] = {}
    for line in mounts:
        fields = line.split()
        if len(fields) < 4 or fields[2] != "cgroup":
            continue
        base = Path(fields[1]) / "reckon" / name
        for controller in set(fields[3].split(",")) & set(cgroups.V1_CONTROLLERS):
            for d in (base.iterdir() if base.is_dir() else ()):
                if d.is_dir():
                    attempts.setdefault(d.name, {})[controller] = str(d)
    return [{"v": 1, "dirs": dirs} for _, dirs in sorted(attempts.items())]


def _processes_under(base: Path) -> Iterable[tuple[int, str]]:
    """Live processes (not this one) whose cwd or command line is under ``base``."""
    needle = str(base)
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd == needle or cwd.startswith(needle + "/") or needle in cmdline) and alive(pid):
            yield pid, cmdline.strip()[:200]


# ---- fixtures ----------------------------------------------------------------------------


class HangGuardExpired(Exception):
    pass


@pytest.fixture(autouse=True)
def hang_guard():
    """End a test that overruns TEST_GUARD seconds, whatever it is blocked in."""

    def expired(signum: int, frame: Any) -> None:
        raise HangGuardExpired(f"the test ran longer than {TEST_GUARD}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_GUARD)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        leftovers = c.close()
        # Shown by pytest only when the test failed: the daemons' own account.
        for log in sorted(tmp_path.glob("*.log")):
            print(f"----- {log.name} (last lines) -----\n{_tail(log)}")
        if leftovers:
            print("killed at teardown:", *leftovers, sep="\n  ")


@pytest.fixture
def truth_dir(tmp_path: Path) -> Path:
    """Where jobs write the moment they end (``date +%s.%N``), as their own witness."""
    d = tmp_path / "truth"
    d.mkdir()
    return d
