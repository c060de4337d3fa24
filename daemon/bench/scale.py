"""`reckon bench scale`: the controller alone, under many simulated agents (issue #24).

A real controller process (SQLite, durable) and one simulator process, this one, holding N
protocol-true agents (daemon/bench/simagents.py) over real WebSocket connections.  The figures
are the controller's: its CPU (``/proc/PID/stat``) and resident memory, never the simulator's
(that is reported beside them, so one can see whether it was the bound).  Phases:

1. **idle**: every agent joined and heartbeating, no jobs: controller CPU % and CPU per agent
   per second (the heartbeat handling cost), resident memory per agent.
2. **throughput**: ``--jobs`` null jobs (0 s) submitted at once: jobs/s from the submit to all
   terminal, controller CPU per job.
3. **latency**: the cluster filled to ``--load`` of its slots with jobs that end evenly over one
   mean ``--duration``, then jobs of ``--duration`` arriving open-loop for ``--latency`` seconds at
   the rate those ends free slots (load / mean duration): a steady load while the window is shorter
   than the arrivals' own shortest job (20 s of the default 20-40 s).  Dispatch
   latency (the controller's ``submitted_at`` to the agent's ``started_at``), and ack latency
   (an exit on the agent to the controller's ack arriving there), median and p99.

Throughout the job phases, a ``status`` call every 0.2 s: its round trip is a turn of the
controller's core loop (the controller exposes no event-loop lag of its own).  Faults (drop,
freeze, restart: ``--drop-rate`` ...) run during the job phases.  At the end every job is waited
on to be terminal, the controller is stopped, and the simulator's truth is compared with the
controller's job table and fact log: every outcome recorded exactly once (``check_exactly_once``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio

from reckon.daemon.bench.figures import summary
from reckon.daemon.bench.simagents import Durations, FaultRates, Simulator, Truth, check_exactly_once
from reckon.daemon.cli.demo import count_finish_facts
from reckon.daemon.client import Client
from reckon.daemon.procs import LocalCluster

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
NULL = Durations("fixed", 0.0)
STATUS_EVERY = 0.2  # seconds between the loop-turn probes
ARRIVAL_TICK = 0.05  # seconds between the open-loop submits


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleConfig:
    agents: int = 100
    slots: int = 8
    idle: float = 10.0  # seconds measured idle (0: skip)
    jobs: int = 10_000  # null jobs of the throughput phase (0: skip)
    latency: float = 20.0  # seconds of open-loop arrivals (0: skip)
    load: float = 0.8
    durations: Durations = Durations("uniform", 20.0, 40.0)
    fail_rate: float = 0.0
    faults: FaultRates = FaultRates()
    seed: int = 0
    heartbeat_interval: float = 2.0  # the agents'
    controller_args: tuple[str, ...] = ()
    settle_timeout: float = 600.0
    keep: bool = False


@dataclass(slots=True)
class ScaleResult:
    figures: dict[str, Any] = field(default_factory=dict)
    submitted: list[str] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    finish_facts: dict[str, int] = field(default_factory=dict)
    truth: Truth = field(default_factory=Truth)
    problems: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)


def proc_cpu(pid: int | str) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_system_cpu(pid: int | str) -> float:
    """System (kernel) CPU seconds of a process so far: sockets and epoll, against its Python work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def proc_rss(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "max": ordered[-1], "n": len(ordered)}


def raise_fd_limit() -> None:
    """Thousands of connections: the soft limit up to the hard one (the controller inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _Meter:
    """CPU of the controller and of this process (the simulator) between two readings."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = self.controller0 = self.sim0 = 0.0
        self.start()

    def start(self) -> None:
        self.t0, self.controller0, self.sim0 = time.perf_counter(), proc_cpu(self.pid), proc_cpu("self")

    def read(self) -> tuple[float, float, float]:
        """(wall seconds, controller CPU seconds, simulator CPU seconds) since ``start``."""
        return (time.perf_counter() - self.t0, proc_cpu(self.pid) - self.controller0,
                proc_cpu("self") - self.sim0)


async def _submit(client: Client, n: int, submitted: list[str], chunk: int = 10_000) -> list[str]:
    spec = {"name": "scale", "command": ["true"], "cwd": None, "env": [], "slots": 1}
    ids: list[str] = []
    for i in range(0, n, chunk):
        ids += (await client.call("submit_many", specs=[spec] * min(chunk, n - i)))["jobs"]
    submitted += ids
    return ids


async def _until(client: Client, what: str, timeout: float, pred) -> None:
    with trio.move_on_after(timeout):
        while not pred((await client.call("status"))["status"]["jobs"]):
            await trio.sleep(0.05)
        return
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")


def _terminal(total: int):
    return lambda counts: sum(counts.get(s, 0) for s in TERMINAL) >= total


async def scale_run(config: ScaleConfig, say=lambda line: None) -> ScaleResult:
    """One run; its figures and what the exactly-once check compared."""
    raise_fd_limit()
    base = Path(tempfile.mkdtemp(prefix="reckon-bench-scale-"))
    cluster = LocalCluster(base)
    result = ScaleResult()
    fig = result.figures
    try:
        await cluster.start_controller("--rejoin-grace", "0", "--snapshot-every", "1000000000",
                                       *config.controller_args)
        pid = cluster.pid("controller")
        say(f"controller pid {pid}, in {base}")
        async with Client(cluster.url, None) as client:
            await client.call("status")
            rss0 = proc_rss(pid)
            sim = Simulator(cluster.url, config.agents, config.slots, durations=NULL, seed=config.seed,
                            fail_rate=config.fail_rate, heartbeat_interval=config.heartbeat_interval)
            async with trio.open_nursery() as nursery:
                t0 = time.perf_counter()
                meter = _Meter(pid)
                await nursery.start(sim.run)
                wall, ccpu, scpu = meter.read()
                fig["join_s"] = wall
                fig["join_controller_cpu_s"] = ccpu
                say(f"{config.agents} agents joined in {wall:.1f} s (controller CPU {ccpu:.1f} s)")
                if config.idle > 0:
                    await trio.sleep(min(3.0, config.idle))  # the joins' rounds and first heartbeats over
                    meter.start()
                    system0 = proc_system_cpu(pid)
                    await trio.sleep(config.idle)
                    wall, ccpu, scpu = meter.read()
                    system = proc_system_cpu(pid) - system0
                    rss = proc_rss(pid)
                    fig["idle"] = {"seconds": wall, "controller_cpu_pct": 100 * ccpu / wall,
                                   "controller_cpu_us_per_agent_s": 1e6 * ccpu / wall / config.agents,
                                   "controller_rss_bytes": rss,
                                   "controller_system_share": system / ccpu if ccpu else 0.0,
                                   "controller_bytes_per_agent": (rss - rss0) / config.agents,
                                   "simulator_cpu_pct": 100 * scpu / wall}
                    say(f"idle: controller {fig['idle']['controller_cpu_pct']:.1f} % CPU, "
                        f"{fig['idle']['controller_bytes_per_agent'] / 1024:.1f} KiB per agent; "
                        f"simulator {fig['idle']['simulator_cpu_pct']:.0f} %")
                probes: list[float] = []
                # The probe's own client (a call cancelled midway leaves its reply unread), opened
                # now: a handshake behind a big submit's turn of the loop can take seconds.
                async with Client(cluster.url, None) as probe_client, trio.open_nursery() as phases:
                    phases.start_soon(_probe, probe_client, probes)
                    phases.start_soon(sim.faults, config.faults, config.seed + 1)
                    if config.jobs > 0:
                        fig["throughput"] = await _throughput(client, sim, config, pid, result.submitted)
                        say(f"throughput: {fig['throughput']['jobs_per_s']:.0f} jobs/s, controller "
                            f"{fig['throughput']['controller_cpu_ms_per_job']:.3f} ms CPU per job")
                    if config.latency > 0:
                        fig["latency"] = await _latency(client, sim, config, pid, result.submitted)
                        d = fig["latency"]["dispatch_s"]
                        say(f"latency: dispatch median {d['median'] * 1e3:.1f} ms, p99 {d['p99'] * 1e3:.1f} ms"
                            if d else "latency: no job measured")
                    phases.cancel_scope.cancel()
                fig["status_round_trip_s"] = _quantiles(probes)
                fig["reconnections"] = sim.connections() - config.agents  # faults, or a controller too busy
                result.faults = dict(sim.faults_done)
                await sim.wait_joined(timeout=config.settle_timeout)  # healed: every agent back
                await _until(client, "every job terminal", config.settle_timeout, _terminal(len(result.submitted)))
                result.jobs = (await client.call("jobs"))["jobs"]
                fig["total_s"] = time.perf_counter() - t0
                fig["controller_peak_rss_bytes"] = _peak_rss(pid)
                nursery.cancel_scope.cancel()
        result.truth = sim.truth
        cluster.terminate("controller")
        result.finish_facts = await count_finish_facts(base / "controller")
        result.problems = check_exactly_once(result.submitted, result.jobs, result.finish_facts, result.truth)
        return result
    finally:
        cluster.stop_all()
        if config.keep:
            print(f"(kept {base})", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


async def _started(sim: Simulator, ids: list[str], timeout: float) -> None:
    """Until every job of ``ids`` has begun on a simulated agent (the simulator knows)."""
    with trio.move_on_after(timeout):
        for job in ids:
            while job not in sim.truth.executions:
                await trio.sleep(0.05)
        return
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {len(ids)} jobs to start on the agents")


async def _probe(client: Client, out: list[float]) -> None:
    while True:
        t0 = time.perf_counter()
        await client.call("status")
        out.append(time.perf_counter() - t0)
        await trio.sleep(STATUS_EVERY)


async def _throughput(client: Client, sim: Simulator, config: ScaleConfig, pid: int,
                      submitted: list[str]) -> dict[str, float]:
    sim.durations = NULL
    done_before = len(submitted)
    meter = _Meter(pid)
    await _submit(client, config.jobs, submitted)
    await _until(client, "the jobs to finish", config.settle_timeout, _terminal(done_before + config.jobs))
    wall, ccpu, scpu = meter.read()
    return {"jobs": config.jobs, "seconds": wall, "jobs_per_s": config.jobs / wall,
            "controller_cpu_ms_per_job": 1e3 * ccpu / config.jobs, "controller_cpu_pct": 100 * ccpu / wall,
            "simulator_cpu_pct": 100 * scpu / wall}


async def _latency(client: Client, sim: Simulator, config: ScaleConfig, pid: int,
                   submitted: list[str]) -> dict[str, Any]:
    # The fill's jobs end evenly over one mean duration, at the arrival rate below: the load stays
    # at `busy` through the window (as long as it is shorter than the arrivals' own shortest job).
    sim.durations = Durations("uniform", 0.0, config.durations.mean)
    busy = max(1, int(config.load * config.agents * config.slots))
    await _started(sim, await _submit(client, busy, submitted), config.settle_timeout)  # the cluster filled
    rate = busy / max(config.durations.mean, 1e-3)  # arrivals that keep `busy` slots busy
    sim.durations = config.durations
    sim.truth.ack_latencies.clear()
    measured: list[str] = []
    meter = _Meter(pid)
    t0 = trio.current_time()
    owed = 0.0
    while trio.current_time() - t0 < config.latency:
        owed += rate * ARRIVAL_TICK
        n = int(owed)
        if n:
            owed -= n
            measured += await _submit(client, n, submitted)
        await trio.sleep(ARRIVAL_TICK)
    wall, ccpu, scpu = meter.read()
    acks = list(sim.truth.ack_latencies)
    await _started(sim, measured, config.settle_timeout)
    wanted = set(measured)
    jobs = [j for j in (await client.call("jobs"))["jobs"] if j["id"] in wanted and j["started_at"] is not None]
    return {"busy_slots": busy, "arrival_rate_per_s": rate, "arrivals": len(measured), "seconds": wall,
            "dispatch_s": _quantiles([j["started_at"] - j["submitted_at"] for j in jobs]),
            "ack_s": _quantiles(acks), "controller_cpu_pct": 100 * ccpu / wall,
            "simulator_cpu_pct": 100 * scpu / wall}


# ---- the command ------------------------------------------------------------------------------


def config_of(args: argparse.Namespace) -> ScaleConfig:
    faults = FaultRates(drop=args.drop_rate, freeze=args.freeze_rate, restart=args.restart_rate,
                        freeze_for=args.freeze_for, down_for=args.down_for)
    return ScaleConfig(agents=args.agents, slots=args.slots, idle=args.idle, jobs=args.jobs, latency=args.latency,
                       load=args.load, durations=args.duration, fail_rate=args.fail_rate, faults=faults,
                       seed=args.seed, keep=args.keep, heartbeat_interval=args.heartbeat,
                       controller_args=("--heartbeat-timeout", str(max(10.0, 5 * args.heartbeat))))


def run_scale_bench(args: argparse.Namespace, quiet: bool) -> tuple[dict[str, Any], list[str]]:
    config = config_of(args)
    say = (lambda line: None) if quiet else (lambda line: print("  " + line, file=sys.stderr, flush=True))
    runs = []
    for i in range(args.runs):
        result = trio.run(scale_run, replace(config, seed=config.seed + i), say)
        if result.problems:
            shown = "\n  ".join(result.problems[:20])
            raise RuntimeError(f"the exactly-once check failed ({len(result.problems)} problems):\n  {shown}")
        runs.append(result)
    out: dict[str, Any] = {"agents": args.agents, "slots": args.slots, "runs": [r.figures for r in runs],
                           "faults": [r.faults for r in runs],
                           "jobs_checked": [len(r.submitted) for r in runs]}
    lines = [f"{args.agents} simulated agents x {args.slots} slots, heartbeat every {args.heartbeat:g} s, "
             f"{args.runs} run(s); exactly-once check "
             f"passed on {sum(len(r.submitted) for r in runs)} jobs"
             + (f" with faults {runs[-1].faults}" if config.faults.any else "")]

    def med(path: tuple[str, ...]) -> float | None:
        values = []
        for r in runs:
            v: Any = r.figures
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            if v is not None:
                values.append(v)
        return summary(values)["median"] if values else None

    if (v := med(("idle", "controller_cpu_pct"))) is not None:
        lines.append(f"idle: controller {v:.1f} % of a core ({med(('idle', 'controller_cpu_us_per_agent_s')):.1f} us "
                     f"CPU per agent per second), {med(('idle', 'controller_bytes_per_agent')) / 1024:.1f} KiB "
                     f"resident per agent; simulator {med(('idle', 'simulator_cpu_pct')):.0f} %; of the "
                     f"controller's CPU {100 * med(('idle', 'controller_system_share')):.0f} % in the kernel")
    if (v := med(("throughput", "jobs_per_s"))) is not None:
        lines.append(f"throughput, {args.jobs} null jobs: {v:.0f} jobs/s, controller "
                     f"{med(('throughput', 'controller_cpu_ms_per_job')):.3f} ms CPU per job "
                     f"({med(('throughput', 'controller_cpu_pct')):.0f} % of a core); simulator "
                     f"{med(('throughput', 'simulator_cpu_pct')):.0f} %")
    if (v := med(("latency", "dispatch_s", "median"))) is not None:
        lines.append(f"latency at {args.load:.0%} load ({med(('latency', 'arrival_rate_per_s')):.0f} arrivals/s): "
                     f"dispatch median {v * 1e3:.1f} ms, p99 {med(('latency', 'dispatch_s', 'p99')) * 1e3:.1f} ms; "
                     f"ack median {(med(('latency', 'ack_s', 'median')) or 0) * 1e3:.1f} ms, p99 "
                     f"{(med(('latency', 'ack_s', 'p99')) or 0) * 1e3:.1f} ms; controller "
                     f"{med(('latency', 'controller_cpu_pct')):.0f} %, simulator "
                     f"{med(('latency', 'simulator_cpu_pct')):.0f} %")
    if (v := med(("status_round_trip_s", "median"))) is not None:
        lines.append(f"a core-loop turn (`status` round trip) during the job phases: median {v * 1e3:.1f} ms, "
                     f"p99 {med(('status_round_trip_s', 'p99')) * 1e3:.1f} ms")
    lines.append(f"reconnections of the agents: {med(('reconnections',)):.0f} (faults, or pings unanswered "
                 f"for {max(10.0, 2 * args.heartbeat):g} s by a busy controller)")
    lines.append(f"controller peak resident memory {med(('controller_peak_rss_bytes',)) / 2**20:.0f} MiB; "
                 f"all joined in {med(('join_s',)):.1f} s")
    return out, lines
