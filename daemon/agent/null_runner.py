"""Runners without processes, for benchmarks: the ``JobRunner`` API (daemon/agent/runner.py)
with jobs that "exit 0" at once (``NullRunner``) or when told (``HoldRunner``)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Literal, Sequence

import trio

from reckon.model import messages as M
from reckon.model.jobs import JobSpec

from reckon.daemon.agent.attempts import AlreadyLaunched, ExitStatus, Key, Outcome, check_key

__all__ = ["NullRunner", "HoldRunner"]


class NullRunner:
    """The JobRunner API without processes: every job "exits 0" as soon as it starts.

    For benchmarks of the controller and the protocol alone.
    """

    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.state_dir = Path(state_dir).absolute() if state_dir is not None else Path(os.devnull)
        self._send_exit, self._recv_exit = trio.open_memory_channel[Outcome](math.inf)
        self._started: set[Key] = set()

    async def __aenter__(self) -> "NullRunner":
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        self._send_exit.close()
        return False

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Outcome]:
        return self._recv_exit

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        check_key(job, attempt)
        if (job, attempt) in self._started:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self._started.add((job, attempt))
        now = time.time()
        self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=0, signal=None,
                                               started_at=now, finished_at=now))
        return now

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        check_key(job, attempt)

    async def send_signal(self, job: str, attempt: int, sig: int, *, batch_only: bool = False,
                          full: bool = False) -> int:
        check_key(job, attempt)
        return 0  # no processes

    async def adopt(self, keys: Sequence[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        for job, attempt in keys:
            check_key(job, attempt)
        return {(job, attempt): "lost" for job, attempt in keys}

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        check_key(job, attempt)
        out, err = M.output_paths(str(self.state_dir / "jobs"), "flat", job, attempt)
        return Path(out), Path(err)

    def on_disk(self) -> list[Key]:
        return []

    def forget(self, job: str, attempt: int) -> None:
        check_key(job, attempt)


class HoldRunner(NullRunner):
    """Like NullRunner, but every job keeps "running" until ``release_all()``.

    For the resync benchmark: jobs are placed, the agent is cut off, then they
    all finish at once while it is away (the agent calls ``release_all`` on SIGUSR1).
    """

    def __init__(self, state_dir: Path | str | None = None) -> None:
        super().__init__(state_dir)
        self._held: list[Key] = []

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        check_key(job, attempt)
        if (job, attempt) in self._started:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self._started.add((job, attempt))
        self._held.append((job, attempt))
        return time.time()

    def release_all(self) -> int:
        now = time.time()
        held, self._held = self._held, []
        for job, attempt in held:
            self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=0, signal=None,
                                                   started_at=None, finished_at=now))
        return len(held)
