"""The agent simulator: N protocol-true agents in one process, over real WebSockets (issue #24).

Each simulated agent is the real agent daemon (daemon/agent/daemon.py ``AgentDaemon``: its core
loop, ticker, connection loop with backoff and keepalive, the real agent model with its joins,
heartbeats, resync rounds, outbox and acks) with two parts swapped for cheap ones:

* ``MemoryAgentStore``: the durable records, outbox, history and join generation in memory.  It
  outlives the agent's "process", so a restarted agent comes back with its durable state, as it
  would from its state directory; writes the daemon deferred and never committed are lost, as in a
  crash.
* ``SimRunner`` on a ``SimMachine``: the null executor.  A job "runs" for a duration drawn from a
  seeded RNG and exits with a drawn code; its "process" belongs to the machine, not the agent, so
  it survives an agent restart and is adopted afterwards (running, or its exit status), as the
  real supervisors are.

The simulator records every execution it ran (``Truth``); ``check_exactly_once`` compares that
with the controller's job table and its fact log after a run: every job's outcome recorded
exactly once, and the one the simulator ran.

Faults on demand (``Faults``): drop an agent's connection (no close handshake, as a cut cable),
freeze it (its core takes no event: no heartbeat, no read, no exit; the controller gives it up
after its heartbeat timeout), restart it (its tasks cancelled mid-flight, started again from its
store after a pause).
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

import trio

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, LocalStatus
from reckon.model.jobs import JobSpec

from reckon.daemon.agent.attempts import AlreadyLaunched, ExitStatus, Key, Outcome, check_key
from reckon.daemon.agent.daemon import AgentDaemon
from reckon.daemon.agent.options import AgentOptions

log = logging.getLogger("reckon.simagents")

SIGTERM = 15


# ---- durations --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Durations:
    """A job duration distribution: ``0`` / ``fixed:S``, ``exp:MEAN``, ``uniform:LOW:HIGH`` (seconds)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "Durations":
        parts = text.split(":")
        try:
            values = [float(p) for p in parts[1:]]
        except ValueError:
            raise ValueError(f"bad duration distribution {text!r}: numbers after the kind") from None
        if any(not math.isfinite(v) or v < 0 for v in values):
            raise ValueError(f"bad duration distribution {text!r}: seconds must be finite and >= 0")
        if len(parts) == 1 and parts[0] in ("0", "null"):
            return cls("fixed", 0.0)
        if parts[0] == "fixed" and len(values) == 1:
            return cls("fixed", values[0])
        if parts[0] == "exp" and len(values) == 1:
            return cls("exp", values[0])
        if parts[0] == "uniform" and len(values) == 2 and values[0] <= values[1]:
            return cls("uniform", values[0], values[1])
        raise ValueError(f"bad duration distribution {text!r}: 0, fixed:S, exp:MEAN or uniform:LOW:HIGH")

    @property
    def mean(self) -> float:
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def draw(self, rng: random.Random) -> float:
        if self.kind == "fixed" or self.a == 0 and self.kind == "exp":
            return self.a
        if self.kind == "exp":
            return rng.expovariate(1 / self.a)
        return rng.uniform(self.a, self.b)


# ---- the truth ----------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Execution:
    """One execution the simulator ran: who ran which attempt, and how it ended."""

    job: str
    attempt: int
    agent: str
    started: float
    finished: float | None = None
    exit_code: int | None = None
    signal: int | None = None  # set when it was killed (SIGTERM) rather than ending by itself


@dataclass(slots=True)
class Truth:
    executions: dict[str, list[Execution]] = field(default_factory=dict)  # job id -> its executions
    ack_latencies: list[float] = field(default_factory=list)  # seconds from an exit to its first ack

    def begun(self, execution: Execution) -> None:
        self.executions.setdefault(execution.job, []).append(execution)


def check_exactly_once(submitted: Sequence[str], jobs: Sequence[dict], finish_facts: dict[str, int],
                       truth: Truth) -> list[str]:
    """Every problem with the run's record, one line each (none: every job's outcome was recorded
    exactly once, and it is the outcome of the one execution that ended by itself).

    ``jobs``: the controller's job objects; ``finish_facts``: JobFinished facts per job in its log."""
    problems: list[str] = []
    by_id = {j["id"]: j for j in jobs}
    wanted = set(submitted)
    for job_id in sorted(set(truth.executions) - wanted):
        problems.append(f"job {job_id}: ran, but this run never submitted it")
    for job_id in submitted:
        job = by_id.get(job_id)
        runs = truth.executions.get(job_id, [])
        ended = [r for r in runs if r.finished is not None and r.signal is None]  # ended by itself
        if len(ended) > 1:
            problems.append(f"job {job_id}: ran {len(ended)} times to its end "
                            f"({', '.join(f'{r.attempt} on {r.agent}' for r in ended)})")
        if job is None:
            problems.append(f"job {job_id}: submitted, unknown to the controller")
            continue
        if job["state"] not in ("COMPLETED", "FAILED", "CANCELLED"):
            problems.append(f"job {job_id}: still {job['state']}")
            continue
        facts = finish_facts.get(job_id, 0)
        if facts != 1:
            problems.append(f"job {job_id}: {facts} finish facts in the log, not one")
        if job["state"] == "CANCELLED":
            continue
        matching = [r for r in ended if (r.attempt, r.agent, r.exit_code) == (job["attempt"], job["agent"],
                                                                              job["exit_code"])]
        if len(matching) != 1:
            problems.append(f"job {job_id}: recorded {job['state']} exit {job['exit_code']} attempt "
                            f"{job['attempt']} on {job['agent']}, but the simulator ran "
                            + (", ".join(f"{r.attempt} on {r.agent} exit {r.exit_code}" for r in runs) or "nothing"))
    return problems


# ---- the machines and their null executor -------------------------------------------------


class JobClock:
    """One timer for every simulated job (a task per job would cost more than the jobs)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, "SimMachine", Key]] = []
        self._seq = 0
        self._changed = trio.Event()

    def at(self, when: float, machine: "SimMachine", key: Key) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, machine, key))
        if self._heap[0][1] == self._seq:  # a new earliest deadline: the timer waits less
            self._changed.set()

    async def run(self) -> None:
        while True:
            now = time.time()
            while self._heap and self._heap[0][0] <= now:
                _, _, machine, key = heapq.heappop(self._heap)
                machine.finish(key, now)
            wait = self._heap[0][0] - now if self._heap else math.inf
            self._changed = trio.Event()
            with trio.move_on_after(wait):
                await self._changed.wait()


class SimMachine:
    """A host's job "processes": they outlive its agent (as supervisors do), until the agent
    forgets them."""

    def __init__(self, sim: "Simulator", host: str) -> None:
        self.sim = sim
        self.host = host
        self.running: dict[Key, Execution] = {}
        self.statuses: dict[Key, ExitStatus] = {}  # ended, not yet forgotten (a supervisor's status file)
        self.launched: set[Key] = set()
        self.runner: SimRunner | None = None  # the current agent's, while one is up

    def start(self, job: str, attempt: int) -> float:
        key = (job, attempt)
        if key in self.launched:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self.launched.add(key)
        now = time.time()
        execution = Execution(job=job, attempt=attempt, agent=self.host, started=now,
                              exit_code=1 if self.sim.rng.random() < self.sim.fail_rate else 0)
        self.sim.truth.begun(execution)
        self.running[key] = execution
        duration = self.sim.durations.draw(self.sim.rng)
        if duration <= 0:
            self.finish(key, now)
        else:
            self.sim.clock.at(now + duration, self, key)
        return now

    def finish(self, key: Key, now: float, signal: int | None = None) -> None:
        execution = self.running.pop(key, None)
        if execution is None:
            return  # killed before its time came
        execution.finished, execution.signal = now, signal
        exit_code = None if signal is not None else execution.exit_code
        status = ExitStatus(job=key[0], attempt=key[1], exit_code=exit_code, signal=signal,
                            started_at=execution.started, finished_at=now)
        self.statuses[key] = status
        self.sim.finished_at[key] = now
        if self.runner is not None:
            self.runner.exited(status)


class SimRunner:
    """The ``JobRunner`` API (daemon/agent/runner.py) on a ``SimMachine``."""

    def __init__(self, machine: SimMachine) -> None:
        self.machine = machine
        self.state_dir = Path("/nonexistent") / machine.host
        self._send_exit, self._recv_exit = trio.open_memory_channel[Outcome](math.inf)

    async def __aenter__(self) -> "SimRunner":
        self.machine.runner = self
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        if self.machine.runner is self:
            self.machine.runner = None
        self._send_exit.close()
        return False

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Outcome]:
        return self._recv_exit

    def exited(self, status: ExitStatus) -> None:
        try:
            self._send_exit.send_nowait(status)
        except trio.ClosedResourceError:
            pass  # the agent is going down: adoption finds the status

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner=None, gpus=()) -> float:
        check_key(job, attempt)
        return self.machine.start(job, attempt)

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        check_key(job, attempt)
        self.machine.finish((job, attempt), time.time(), signal=SIGTERM)

    async def send_signal(self, job: str, attempt: int, sig: int, *, batch_only: bool = False,
                          full: bool = False) -> int:
        check_key(job, attempt)
        return 0

    async def adopt(self, keys: Sequence[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        out: dict[Key, Literal["running", "lost"] | ExitStatus] = {}
        for key in keys:
            check_key(*key)
            out[key] = ("running" if key in self.machine.running
                        else self.machine.statuses.get(key, "lost"))
        return out

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        check_key(job, attempt)
        out, err = M.output_paths(str(self.state_dir / "jobs"), "flat", job, attempt)
        return Path(out), Path(err)

    def on_disk(self) -> list[Key]:
        return []

    def forget(self, job: str, attempt: int) -> None:
        check_key(job, attempt)
        self.machine.statuses.pop((job, attempt), None)


# ---- the durable state ----------------------------------------------------------------------


class MemoryAgentStore:
    """The agent's durable state (daemon/store/agent.py's ``apply``) in memory; it outlives restarts."""

    def __init__(self) -> None:
        self.records: dict[Key, LocalJob] = {}  # insertion order kept, as the SQLite store keeps it
        self.outbox: dict[Key, M.Finished] = {}
        self.cluster: str | None = None
        self.generation = 0
        self.identity = secrets.token_hex(16)

    async def apply(self, commands: Sequence[Any]) -> None:
        for cmd in commands:
            if isinstance(cmd, E.StoreRecord):
                record = cmd.record
                self.records[(record.job, record.attempt)] = record
            elif isinstance(cmd, E.DeleteRecord):
                self.records.pop((cmd.job, cmd.attempt), None)
            elif isinstance(cmd, E.OutboxPut):
                self.outbox[(cmd.report.job, cmd.report.attempt)] = cmd.report
            elif isinstance(cmd, E.OutboxDelete):
                self.outbox.pop((cmd.job, cmd.attempt), None)
            elif isinstance(cmd, E.StoreCluster):
                self.cluster = cmd.cluster
            elif isinstance(cmd, E.StoreGeneration):
                self.generation = cmd.generation
            else:
                raise TypeError(f"not a store command: {cmd!r}")

    async def aclose(self) -> None:
        pass


# ---- the agents -------------------------------------------------------------------------------


class SimAgentDaemon(AgentDaemon):
    """The real daemon; a frozen agent's events wait, and each first ack's latency is noted."""

    sim_agent: "SimAgent"

    async def feed(self, event: Any, conn: Any = None) -> None:
        await self.sim_agent.thawed.wait()
        if isinstance(event, E.MessageFromController) and isinstance(event.message, M.Ack):
            key = (event.message.job, event.message.attempt)
            sim = self.sim_agent.sim
            finished = sim.finished_at.pop(key, None)
            if finished is not None:
                sim.truth.ack_latencies.append(time.time() - finished)
        await super().feed(event, conn)

    async def ticker(self) -> None:
        """The daemon's ticker, waking when the model asks (its next heartbeat or retry) rather than
        at least once a second: 10,000 agents' one-second safety ticks are the simulator's cost, not
        the controller's (a tick sends nothing the model did not ask for)."""
        while True:
            wakeup = self.model.next_wakeup()
            cap = self.sim_agent.sim.heartbeat_interval
            delay = cap if self._tick_queued or wakeup is None else min(cap, max(0.0, wakeup - time.time()))
            with trio.move_on_after(delay):
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            if not self._tick_queued:
                self._tick_queued = True
                await self.feed(E.Tick(now=time.time(), jitter=random.random()))


class SimAgent:
    def __init__(self, sim: "Simulator", name: str, slots: int) -> None:
        self.sim = sim
        self.name = name
        self.slots = slots
        self.store = MemoryAgentStore()
        self.machine = SimMachine(sim, name)
        self.daemon: SimAgentDaemon | None = None
        self.scope: trio.CancelScope | None = None
        self.stopped = trio.Event()
        self.thawed = trio.Event()
        self.thawed.set()
        self.connections = 0  # WebSocket sessions opened, over all its lives

    def options(self) -> AgentOptions:
        return AgentOptions(name=self.name, slots=self.slots, state_dir=Path("/nonexistent") / self.name,
                            controller=self.sim.url, token=self.sim.token, executor="null",
                            reconnect_initial=self.sim.reconnect_initial, reconnect_max=self.sim.reconnect_max,
                            kill_grace=1.0, model={"heartbeat_interval": self.sim.heartbeat_interval},
                            # Keepalive pings no more often than heartbeats (the default 5 s, or slower).
                            ping_interval=max(5.0, self.sim.heartbeat_interval),
                            pong_timeout=max(10.0, 2 * self.sim.heartbeat_interval))

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """One life of the agent, from its store, until cancelled (``crash``)."""
        self.stopped = trio.Event()
        try:
            with trio.CancelScope() as self.scope:
                options = self.options()
                async with SimRunner(self.machine) as runner:
                    records = list(self.store.records.values())
                    config = AgentConfig(name=self.name, slots=self.slots, identity=self.store.identity,
                                         instance=secrets.token_hex(16), log_dir=str(options.state_dir / "jobs"),
                                         **options.model)
                    agent = Agent(config, records, list(self.store.outbox.values()), self.store.cluster,
                                  self.store.generation)
                    daemon = SimAgentDaemon(options, self.store, runner, agent)
                    daemon.sim_agent = self
                    running = [r.key for r in records if r.status is LocalStatus.RUNNING]
                    if running:
                        await daemon.adopt(await runner.adopt(running))
                    self.daemon = daemon
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(daemon.core_loop, nursery)
                        nursery.start_soon(daemon.exits)
                        nursery.start_soon(daemon.ticker)
                        nursery.start_soon(daemon.connection_loop)
                        task_status.started()
        finally:
            if self.daemon is not None:
                self.connections += self.daemon._generation
            self.daemon = None
            self.stopped.set()

    @property
    def joined(self) -> bool:
        return self.daemon is not None and self.daemon.joined.is_set()

    def drop(self) -> None:
        """Cut the connection without a close handshake; the agent reconnects with its backoff."""
        conn = self.daemon._conn if self.daemon is not None else None
        if conn is not None and conn.attempt is not None:
            conn.attempt.cancel()

    async def freeze(self, seconds: float) -> None:
        self.thawed = trio.Event()
        try:
            await trio.sleep(seconds)
        finally:
            self.thawed.set()

    async def restart(self, nursery: trio.Nursery, down: float) -> None:
        """A crash (nothing deferred is written), a pause, a start from the durable store."""
        if self.scope is None or self.daemon is None:
            return
        with trio.CancelScope(shield=True):  # the end of the fault phase must not leave it down
            self.scope.cancel()
            await self.stopped.wait()
            self.thawed.set()
            await trio.sleep(down)
            await nursery.start(self.run)


# ---- faults ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRates:
    """Faults per second across all the agents (Poisson arrivals, a uniformly drawn agent each)."""

    drop: float = 0.0
    freeze: float = 0.0
    restart: float = 0.0
    freeze_for: float = 3.0  # seconds a freeze lasts
    down_for: float = 1.0  # seconds a restarted agent stays down

    @property
    def any(self) -> bool:
        return self.drop + self.freeze + self.restart > 0


# ---- the simulator ---------------------------------------------------------------------------------


class Simulator:
    def __init__(self, url: str, agents: int, slots: int, *, durations: Durations, seed: int = 0,
                 fail_rate: float = 0.0, token: str | None = None, heartbeat_interval: float = 2.0,
                 reconnect_initial: float = 0.1, reconnect_max: float = 5.0, prefix: str = "sim") -> None:
        if agents < 1 or slots < 1:
            raise ValueError("agents and slots must be at least 1")
        if not 0 <= fail_rate <= 1:
            raise ValueError("fail_rate must be between 0 and 1")
        self.url = url
        self.token = token
        self.durations = durations
        self.rng = random.Random(seed)
        self.fail_rate = fail_rate
        self.heartbeat_interval = heartbeat_interval
        self.reconnect_initial, self.reconnect_max = reconnect_initial, reconnect_max
        self.truth = Truth()
        self.finished_at: dict[Key, float] = {}  # an exit's time, until its first ack
        self.clock = JobClock()
        self.agents = [SimAgent(self, f"{prefix}-{i:05d}", slots) for i in range(agents)]
        self.faults_done: dict[str, int] = {"drop": 0, "freeze": 0, "restart": 0}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, wave: int = 200, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start every agent, ``wave`` at a time (each wave joined before the next: a herd of
        thousands of handshakes at once is the restart bench's, not this one's); ready once all
        joined; runs until cancelled."""
        # A line per connection, per job, per dropped ping, x thousands: the run counts reconnections instead.
        for name in ("reckon.agent", "reckon.lifecycle"):
            logging.getLogger(name).setLevel(logging.ERROR)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.clock.run)
            for i in range(0, len(self.agents), wave):
                batch = self.agents[i:i + wave]
                for agent in batch:
                    await nursery.start(agent.run)
                await self.wait_joined(batch)
            task_status.started(self)

    async def wait_joined(self, agents: Sequence[SimAgent] | None = None, timeout: float = 600.0) -> None:
        agents = self.agents if agents is None else agents
        with trio.fail_after(timeout):
            for agent in agents:
                while not agent.joined:
                    await trio.sleep(0.01)

    async def faults(self, rates: FaultRates, seed: int = 1) -> None:
        """Inject faults until cancelled."""
        if not rates.any or self._nursery is None:
            return
        rng = random.Random(seed)
        total = rates.drop + rates.freeze + rates.restart
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(rng.expovariate(total))
                agent = rng.choice(self.agents)
                if not agent.joined or not agent.thawed.is_set():
                    continue  # one fault at a time per agent
                pick = rng.random() * total
                if pick < rates.drop:
                    agent.drop()
                    self.faults_done["drop"] += 1
                elif pick < rates.drop + rates.freeze:
                    nursery.start_soon(agent.freeze, rates.freeze_for)
                    self.faults_done["freeze"] += 1
                else:
                    nursery.start_soon(agent.restart, self._nursery, rates.down_for)
                    self.faults_done["restart"] += 1

    def running_jobs(self) -> int:
        return sum(len(a.machine.running) for a in self.agents)

    def connections(self) -> int:
        """WebSocket sessions the agents opened so far (a reconnect is one more than the agent count)."""
        return sum(a.connections + (a.daemon._generation if a.daemon is not None else 0) for a in self.agents)
