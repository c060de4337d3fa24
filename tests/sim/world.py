"""The simulation's ground truth: every process the agents start, and how it really ends.

``World`` owns the processes; ``WorldRunner`` is the JobRunner API an agent
daemon sees (``daemon/agent/runner.py``), one per agent life, attached to the
world under the agent's state directory.  Processes outlive the runner that
started them (an agent crash does not stop its jobs): a later runner on the
same state directory finds them through ``adopt()``, as the real runner does
through its ``.run`` records.

A job's spec says what its process will do: ``command = ("sim", submission,
duration, exit_code)``.  ``submission`` is unique per submit, so the world can
tell two jobs that share an id (after a controller rollback) apart.

Faithful to the real runner's contract, including where that contract is a
bug of issue #9: ``kill()`` of an attempt this runner does not list as
running (still launching, say) does nothing, and a launch takes
``launch_time`` fake seconds (0: instantly) after the attempt is claimed.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import trio

from reckon.daemon.agent.attempts import AlreadyLaunched, ExitStatus, check_key
from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from reckon.model.resources import NodeResources

Key = tuple[str, int]


# What a simulated agent's machine offers beyond CPUs (issue #20), and what its jobs ask, by
# submission: every job fits one agent alone, so none waits forever, but they compete.
AGENT_RESOURCES = NodeResources(mem=1 << 30, gpus=(0, 1), gres=(("lic", 1),), enforcer="none",
                                unenforced=("cpus", "gpus", "kill", "mem", "pids"))
JOB_ASKS = ({}, {"gpus": 1, "mem": 256 << 20}, {"gpus": 1}, {"gres": (("lic", 1),)}, {"mem": 768 << 20})


def job_spec(submission: int, duration: float, exit_code: int) -> JobSpec:
    """The spec of a simulated job: what its process will do, and which submission it is."""
    return JobSpec(name=f"sim-{submission}", command=("sim", str(submission), repr(duration), str(exit_code)),
                   **JOB_ASKS[submission % len(JOB_ASKS)])


def submission_of(spec: JobSpec) -> int:
    return int(spec.command[1])


@dataclass(slots=True)
class Process:
    """One process of a (job, attempt) on one agent state directory: the truth about it."""

    host: str  # the agent state directory (its name) that started it
    job: str
    attempt: int
    submission: int
    started_at: float  # agent wall clock
    started_fake: float  # trio time, for messages
    exit_code: int | None = None
    signal: int | None = None
    finished_at: float | None = None  # agent wall clock; None while alive
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.finished_at is None

    def exit_status(self) -> ExitStatus:
        assert self.finished_at is not None
        return ExitStatus(job=self.job, attempt=self.attempt, exit_code=self.exit_code, signal=self.signal,
                          started_at=self.started_at, finished_at=self.finished_at)


class World:
    """Every process of the run, keyed by (host, job, attempt); the tasks that end them live here."""

    def __init__(self, nursery: trio.Nursery, wall: Any, *, launch_time: float = 0.0) -> None:
        self.nursery = nursery
        self.wall = wall  # the agents' machines' wall clock (module ``time`` stand-in)
        self.launch_time = launch_time
        self.processes: dict[tuple[str, str, int], Process] = {}
        self.claims: set[tuple[str, str, int]] = set()  # launched or launching (the runner's .stdout claim)
        self.runners: dict[str, WorldRunner] = {}  # host -> the open runner of its live agent

    def runner_factory(self):
        """What ``agent_daemon`` constructs in place of ``NullRunner(state_dir)``."""
        return lambda state_dir: WorldRunner(self, Path(state_dir).name)

    def alive(self) -> list[Process]:
        return [p for p in self.processes.values() if p.alive]

    def spawn(self, host: str, job: str, attempt: int, spec: JobSpec) -> Process:
        _, submission, duration, exit_code = spec.command
        proc = Process(host=host, job=job, attempt=attempt, submission=int(submission),
                       started_at=self.wall.time(), started_fake=trio.current_time())
        self.processes[(host, job, attempt)] = proc
        self.nursery.start_soon(self._live, proc, float(duration), int(exit_code))
        return proc

    async def _live(self, proc: Process, duration: float, exit_code: int) -> None:
        await trio.sleep(duration)
        if proc.alive:
            self.end(proc, exit_code=exit_code, sig=None)

    def end(self, proc: Process, *, exit_code: int | None, sig: int | None) -> None:
        """The process ends now; its open runner (if its agent is up and knows it) hears of it."""
        proc.exit_code, proc.signal, proc.finished_at = exit_code, sig, self.wall.time()
        runner = self.runners.get(proc.host)
        if runner is not None:
            runner.exited(proc)


class WorldRunner:
    """The runner API over the world, for one agent life (``daemon/agent/runner.py`` has the contract)."""

    def __init__(self, world: World, host: str) -> None:
        self.world = world
        self.host = host
        self.state_dir = Path(host)
        self._send_exit, self._recv_exit = trio.open_memory_channel[Any](math.inf)
        self._running: set[Key] = set()  # what this runner started or adopted and has not seen end

    async def __aenter__(self) -> "WorldRunner":
        self.world.runners[self.host] = self
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        if self.world.runners.get(self.host) is self:
            del self.world.runners[self.host]
        self._send_exit.close()
        return False

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Any]:
        return self._recv_exit

    def exited(self, proc: Process) -> None:
        key = (proc.job, proc.attempt)
        if key in self._running:
            self._running.discard(key)
            self._send_exit.send_nowait(proc.exit_status())

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        check_key(job, attempt)
        claim = (self.host, job, attempt)
        if claim in self.world.claims:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self.world.claims.add(claim)
        if self.world.launch_time:
            await trio.sleep(self.world.launch_time)  # a crash here leaves the claim and no process
        proc = self.world.spawn(self.host, job, attempt, spec)
        self._running.add((job, attempt))
        return proc.started_at

    async def send_signal(self, job: str, attempt: int, sig: int, *, batch_only: bool = False,
                          full: bool = False) -> int:
        check_key(job, attempt)
        return 0  # the simulated processes take no signals but the kill's

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        check_key(job, attempt)
        if (job, attempt) not in self._running:
            return  # the real runner's contract: unknown here (not yet started, or over) means no-op
        proc = self.world.processes[(self.host, job, attempt)]
        proc.killed = True
        self.world.end(proc, exit_code=None, sig=int(signal.SIGTERM))  # it dies at the first signal

    async def adopt(self, keys: Sequence[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        answer: dict[Key, Literal["running", "lost"] | ExitStatus] = {}
        for job, attempt in keys:
            check_key(job, attempt)
            proc = self.world.processes.get((self.host, job, attempt))
            if proc is None:
                answer[(job, attempt)] = "lost"  # claimed, never started: nobody can tell more
            elif proc.alive:
                self._running.add((job, attempt))
                answer[(job, attempt)] = "running"
            else:
                answer[(job, attempt)] = proc.exit_status()
        await trio.lowlevel.checkpoint()
        return answer

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        out, err = M.output_paths(str(self.state_dir / "jobs"), "flat", job, attempt)
        return Path(out), Path(err)

    def on_disk(self) -> list[Key]:
        return []

    def forget(self, job: str, attempt: int) -> None:
        check_key(job, attempt)

