"""A Slurm site made of reckon: a controller and agents on loopback, reckon's Slurm commands in a
directory on PATH, and helpers to ask the controller what it recorded."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import pytest

from tests.e2e.conftest import Cluster, hermetic_env, reckon_argv, wait_for

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
# What each tool runs, by name: a test whose commands are missing skips, naming them.
COMMANDS = ("sbatch", "srun", "scancel", "squeue", "sacct", "sinfo", "scontrol")
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")
WAIT = 120.0  # seconds: generous, a loaded 2-core machine starts Python slowly


def slurm_id(job: dict) -> str:
    """The id Slurm's commands show for a reckon job: ARRAY_INDEX for an array member."""
    if job.get("array_id") is not None:
        return f"{job['array_id']}_{job['array_index']}"
    return job["id"]


class SlurmSite:
    """``bin``: the directory of Slurm commands, first on PATH; ``url``: the controller's."""

    def __init__(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.base = base
        self.monkeypatch = monkeypatch
        # One base for the daemons, the commands and the tools' work: the teardown kills whatever
        # still runs there (a job's children, a tool's forked workers).
        self.cluster = Cluster(base)
        self.bin = base / "bin"
        self.work = base / "work"
        self.work.mkdir()

    # ---- start ----------------------------------------------------------------------

    def start(self, agents: Iterable[str] = ("node1",), *, cpus: int = 4, mem: str = "8G",
              need: Iterable[str] = COMMANDS) -> "SlurmSite":
        """Start the controller and ``agents``, write the commands, point this process at them.

        Skips (one line why) when this reckon has no ``slurm-commands`` or lacks one of ``need``:
        the commands arrive on their own branches."""
        self._write_commands(need)
        c = self.cluster
        c.start_controller()
        for name in agents:
            # --allow-root-jobs: CI runs as root, and a Slurm job runs as whoever submitted it.
            c.start_agent(name, "--mem", mem, "--allow-root-jobs", slots=cpus)
        env = self.monkeypatch
        for key in [k for k in os.environ if k.startswith(("RECKON_", "SLURM_", "SBATCH_", "SRUN_"))]:
            env.delenv(key)
        env.setenv("RECKON_CONTROLLER", c.url)
        # The tools' own scripts (process_worker_pool.py, snakemake) and their Python come first
        # after the commands, also inside the jobs (sbatch exports the environment, as Slurm does).
        env.setenv("PATH", os.pathsep.join([str(self.bin), str(Path(sys.executable).parent),
                                            os.environ.get("PATH", "/usr/bin:/bin")]))
        # The jobs import this test's module (pickled functions refer to it by name).
        env.setenv("PYTHONPATH", str(ROOT))
        # Nothing read from or left in the machine's caches and configs (snakemake's source cache,
        # a dask config in ~/.config/dask).
        for var, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"), ("DASK_CONFIG", "dask")):
            env.setenv(var, str(self.base / sub))
        env.chdir(self.work)
        return self

    def _write_commands(self, need: Iterable[str]) -> None:
        result = subprocess.run([*reckon_argv(), "slurm-commands", str(self.bin)], capture_output=True,
                                text=True, env=hermetic_env(), timeout=60, stdin=subprocess.DEVNULL)
        # A failure, never a skip: CI must not pass without running the tools.
        if result.returncode != 0:
            raise AssertionError(f"reckon slurm-commands exited {result.returncode}: {result.stderr.strip()}")
        missing = [name for name in need if not (self.bin / name).exists()]
        assert not missing, f"reckon slurm-commands wrote no {', '.join(missing)}"
        if os.environ.get("RECKON_COMPAT_TRACE"):
            self._trace()

    def _trace(self) -> None:
        """RECKON_COMPAT_TRACE=FILE: every command line the tool (and its jobs) run, appended to
        FILE, through a /bin/sh wrapper in front of each launcher (how docs/compat.md's table was
        checked).  Off by default: the tests run the launchers as users do."""
        log = os.environ["RECKON_COMPAT_TRACE"]
        real = self.base / "bin.real"
        self.bin.rename(real)
        self.bin.mkdir()
        for launcher in real.iterdir():
            wrapper = self.bin / launcher.name
            wrapper.write_text(f'#!/bin/sh\n{{ printf "%s" "{launcher.name}"; for a in "$@"; do '
                               f'printf " [%s]" "$a"; done; echo; }} >> {shlex.quote(log)}\n'
                               f'exec {shlex.quote(str(launcher))} "$@"\n')
            wrapper.chmod(0o755)

    # ---- what reckon recorded ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.cluster.url

    def jobs(self) -> dict[str, dict]:
        """Every job the controller knows, by the id Slurm's commands show for it."""
        return {slurm_id(j): j for j in self.cluster.jobs().values()}

    def wait_terminal(self, ids: Iterable[str], timeout: float = WAIT) -> dict[str, dict]:
        ids = set(ids)

        def all_terminal() -> dict[str, dict] | None:
            jobs = self.jobs()
            return jobs if ids <= set(jobs) and all(jobs[i]["state"] in TERMINAL for i in ids) else None

        return wait_for(all_terminal, timeout=timeout, interval=0.5, what=f"jobs {sorted(ids)} terminal")

    def sh(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A command as the user would type it (this process's environment)."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    # ---- teardown --------------------------------------------------------------------

    def close(self) -> None:
        leftovers = self.cluster.close()
        for log in sorted(self.base.glob("*.log")):
            try:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            except OSError:
                tail = "(unreadable)"
            print(f"----- {log.name} (last lines) -----\n{tail}")
        if leftovers:
            print("killed at teardown:", *leftovers, sep="\n  ")


def until(predicate: Callable[[], T], *, timeout: float = WAIT, what: str) -> T:
    return wait_for(predicate, timeout=timeout, interval=0.5, what=what)


def elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f}s"
