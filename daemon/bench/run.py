"""`reckon bench`: figures measured the same way every time.

Every benchmark runs the real controller and agents as separate processes on
loopback (the production code, durable storage on), repeats its measurement
(`--runs`, default 5) and reports min / median / max.  `--json` prints one
JSON object of figures instead of the human summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from reckon.daemon.bench.figures import summary, summary_text
from reckon.daemon.client import Client, ClientError
from reckon.daemon.procs import LocalCluster

HANG_GUARD = 1800.0  # seconds: no single run may take longer than this
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


async def _with_cluster(keep: bool, body: Callable[[LocalCluster], Awaitable[Any]]) -> Any:
    base = Path(tempfile.mkdtemp(prefix="reckon-bench-"))
    cluster = LocalCluster(base)
    try:
        with trio.fail_after(HANG_GUARD):
            return await body(cluster)
    finally:
        cluster.stop_all()
        if keep:
            print(f"(kept {base})", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


async def _wait(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 600.0,
                interval: float = 0.02) -> None:
    with trio.move_on_after(timeout):
        while not await predicate():
            await trio.sleep(interval)
        return
    raise RuntimeError(f"timed out waiting for {what}")


async def _counts(client: Client) -> dict[str, int]:
    return (await client.call("status"))["status"]["jobs"]


async def _submit(client: Client, specs: list[dict], chunk: int = 10_000) -> list[str]:
    ids: list[str] = []
    for i in range(0, len(specs), chunk):
        ids += (await client.call("submit_many", specs=specs[i:i + chunk]))["jobs"]
    return ids


def _spec(command: list[str], name: str = "bench") -> dict:
    return {"name": name, "command": command, "cwd": None, "env": [], "slots": 1}


# ---- throughput -------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """CPU seconds so far of each process still there (a database backend may end meanwhile)."""
    out = {}
    for pid in pids:
        try:
            out[pid] = _cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            pass
    return out


async def _throughput_run(args: argparse.Namespace, cpu: dict[str, list[float]], pg: Any = None) -> float:
    """jobs/s of one run; appends the run's CPU per job (controller, all agents) to ``cpu``.
    ``pg``: the ``BenchDatabases`` to keep the facts in (a fresh database), else SQLite."""
    async def body(cluster: LocalCluster) -> float:
        if pg is None:
            await cluster.start_controller()
        else:
            url = await cluster.start_ha_controller("controller", await trio.to_thread.run_sync(pg.new_database))
            cluster.port = int(url.rsplit(":", 1)[1])  # the agents dial it

            async def leads() -> bool:
                try:
                    async with Client(cluster.url, None) as client:
                        return bool(await client.call("status"))
                except ClientError:  # "not the leader" for a moment: it takes epoch 1 at its first poll
                    return False
            await _wait(leads, "the controller to lead")
        agents = [f"agent-{i}" for i in range(args.agents)]
        for name in agents:
            await cluster.start_agent(name, args.slots, "--executor", args.executor)
        async with Client(cluster.url, None) as client:
            async def all_joined() -> bool:
                nodes = (await client.call("nodes"))["nodes"]
                return sum(n["state"] == "IDLE" for n in nodes) == args.agents
            await _wait(all_joined, "agents to join")
            specs = [_spec(["true"])] * args.jobs
            pids = {"controller": [cluster.pid("controller")], "agents": [cluster.pid(a) for a in agents]}
            if pg is not None:  # SQLite works inside the controller's process; PostgreSQL in its own
                pids["database"] = await trio.to_thread.run_sync(pg.server_pids)
            before = {k: _cpu_by_pid(v) for k, v in pids.items()}
            t0 = time.perf_counter()
            await _submit(client, specs)

            async def done() -> bool:
                counts = await _counts(client)
                return sum(counts.get(s, 0) for s in TERMINAL) >= args.jobs
            await _wait(done, "all jobs to finish", interval=0.05)
            elapsed = time.perf_counter() - t0
            for key, v in pids.items():  # (the agents' own processes: not the per-job supervisors)
                after = _cpu_by_pid(v)
                used = sum(after[p] - before[key][p] for p in after.keys() & before[key].keys())
                cpu.setdefault(key, []).append(used / args.jobs)
            failed = (await _counts(client)).get("FAILED", 0)
            if failed:
                raise RuntimeError(f"{failed} benchmark job(s) failed: see the agents' logs")
            return args.jobs / elapsed
    return await _with_cluster(args.keep, body)


# ---- resync -----------------------------------------------------------------------------

_ROUND_LINE = re.compile(rb"ended after ([0-9.]+)s, ([0-9.]+)s since its join \((\d+) job")


def _agent_count(agent_dir: Path, sql: str) -> int:
    """Read the agent's own durable records (read-only; WAL lets us share the file)."""
    try:
        with sqlite3.connect(f"file:{agent_dir / 'agent.db'}?mode=ro", uri=True) as db:
            return db.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return -1


async def _resync_run(args: argparse.Namespace, jobs: int) -> float:
    async def body(cluster: LocalCluster) -> float:
        await cluster.start_controller()
        await cluster.start_agent("agent-1", jobs, "--executor", "hold")
        async with Client(cluster.url, None) as client:
            await _submit(client, [_spec(["true"])] * jobs)

            async def all_running() -> bool:  # on the agent itself, not only dispatched
                return await trio.to_thread.run_sync(
                    _agent_count, cluster.base / "agent-1", "SELECT count(*) FROM local_job") == jobs
            await _wait(all_running, f"{jobs} jobs to run", interval=0.1)
        cluster.kill("controller")  # the agent is cut off...
        cluster.signal("agent-1", signal.SIGUSR1)  # ...while every job finishes

        async def all_in_outbox() -> bool:
            return await trio.to_thread.run_sync(
                _agent_count, cluster.base / "agent-1", "SELECT count(*) FROM outbox") == jobs
        await _wait(all_in_outbox, "the completions to reach the outbox", interval=0.1)
        await cluster.start_controller()
        log = cluster.log_path("controller")

        async def round_done() -> bool:
            return any(int(m.group(3)) == jobs for m in _ROUND_LINE.finditer(log.read_bytes()))
        await _wait(round_done, "the rejoin round", interval=0.05)
        match = next(m for m in _ROUND_LINE.finditer(log.read_bytes()) if int(m.group(3)) == jobs)
        async with Client(cluster.url, None) as client:
            counts = await _counts(client)
        if counts.get("COMPLETED", 0) != jobs:
            raise RuntimeError(f"after the round: {counts}, expected {jobs} COMPLETED")
        return float(match.group(2))
    return await _with_cluster(args.keep, body)


# ---- recovery ---------------------------------------------------------------------------


async def _recovery_run(args: argparse.Namespace, outage: float) -> float:
    async def body(cluster: LocalCluster) -> float:
        await cluster.start_controller()
        await cluster.start_agent("agent-1", 2)
        async with Client(cluster.url, None) as client:
            job = (await client.call("submit", spec=_spec(["sleep", "0.5"])))["job"]["id"]

            async def running() -> bool:
                return (await client.call("show", job=job))["job"]["state"] == "RUNNING"
            await _wait(running, "the job to start", interval=0.01)
        cluster.kill("controller")
        await trio.sleep(outage)  # the outage itself: the job ends inside it
        t0 = time.monotonic()
        serving = await cluster.start_controller()
        async with Client(cluster.url, None) as client:
            async def final() -> bool:
                return (await client.call("show", job=job))["job"]["state"] in TERMINAL
            await _wait(final, "the job to be recorded", interval=0.005)
        return time.monotonic() - t0 - serving
    return await _with_cluster(args.keep, body)


# ---- restart ----------------------------------------------------------------------------


async def _restart_run(args: argparse.Namespace, facts: int, prepared: Path) -> float:
    async def body(cluster: LocalCluster) -> float:
        shutil.copytree(prepared, cluster.base / "controller")
        return await cluster.start_controller()
    return await _with_cluster(args.keep, body)


def _prepare_history(facts: int, where: Path) -> dict[str, Any]:
    """Write `facts` facts of realistic history with the production store and
    snapshot policy: jobs submitted, dispatched, started and finished."""
    from reckon.daemon.bench.history import write_history

    return trio.run(write_history, where, facts)


# ---- memory -----------------------------------------------------------------------------


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _memory_run(args: argparse.Namespace, jobs: int) -> float:
    async def body(cluster: LocalCluster) -> float:
        await cluster.start_controller()
        pid = cluster.pid("controller")
        async with Client(cluster.url, None) as client:
            await client.call("status")
            before = _rss(pid)
            await _submit(client, [_spec(["sleep", "1"], name=f"job-{i}") for i in range(jobs)])
            await client.call("status")
            after = _rss(pid)
        return (after - before) / jobs
    return await _with_cluster(args.keep, body)


# ---- driver -----------------------------------------------------------------------------


async def _runs(n: int, run: Callable[[], Awaitable[float]], label: str, quiet: bool) -> dict[str, float]:
    values = []
    for i in range(n):
        values.append(await run())
        if not quiet:
            print(f"  {label} run {i + 1}/{n}: {values[-1]:.4g}", file=sys.stderr, flush=True)
    return summary(values)


def run_bench(args: argparse.Namespace) -> int:
    """Run the bench ``args`` names and print its figures; a PostgreSQL server that cannot serve
    the bench is one line (daemon/bench/pgdatabases.py), before any process starts."""
    from reckon.daemon.bench.pgdatabases import BenchDatabaseError

    try:
        return _run_bench(args)
    except BenchDatabaseError as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return exc.status


def _run_bench(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed bench still stops its cluster
    machine = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    quiet = args.json
    out: dict[str, Any] = {"bench": args.bench, "machine": machine}
    lines: list[str] = []
    if args.bench == "throughput":
        from contextlib import nullcontext

        from reckon.daemon.bench.pgdatabases import BenchDatabases

        cpu: dict[str, list[float]] = {}
        with BenchDatabases(args.dsn) if args.store == "postgres" else nullcontext() as pg:
            s = trio.run(_runs, args.runs, lambda: _throughput_run(args, cpu, pg), "throughput", quiet)
        cpu_per_job = {key: summary(values) for key, values in cpu.items()}
        out.update(jobs=args.jobs, agents=args.agents, slots=args.slots, executor=args.executor, store=args.store,
                   jobs_per_s=s, cpu_seconds_per_job=cpu_per_job)
        lines.append(f"throughput, {args.executor} executor, {args.agents} agents x {args.slots} slots, "
                     f"{args.jobs} jobs, {args.store} store: {summary_text(s, 'jobs/s', digits=0)}")
        for key, c in cpu_per_job.items():
            lines.append(f"CPU per job, {key}: {summary_text(c, 'ms', scale=1e3, digits=3)}")
    elif args.bench == "launch":
        from reckon.daemon.bench.launch import launch_run

        cpu_values: list[float] = []

        async def one() -> float:
            rate, cpu_per_job = await launch_run(args.jobs, args.concurrency, args.keep)
            cpu_values.append(cpu_per_job)
            return rate

        s = trio.run(_runs, args.runs, one, "launch", quiet)
        c = summary(cpu_values)
        out.update(jobs=args.jobs, concurrency=args.concurrency, jobs_per_s=s, cpu_seconds_per_job=c)
        lines.append(f"launch path alone, {args.jobs} `true` jobs, {args.concurrency} at a time: "
                     f"{summary_text(s, 'jobs/s', digits=0)}")
        lines.append(f"CPU per job (agent, launcher, supervisor, job): {summary_text(c, 'ms', scale=1e3, digits=2)}")
    elif args.bench == "resync":
        out["rounds"] = []
        for n in args.jobs:
            s = trio.run(_runs, args.runs, lambda n=n: _resync_run(args, n), f"resync {n}", quiet)
            per_job = {k: (v / n if k != "runs" else v) for k, v in s.items()}
            out["rounds"].append({"jobs": n, "seconds": s, "per_job_seconds": per_job})
            lines.append(f"resync, {n} jobs: {summary_text(s, 's', digits=3)}; per job {per_job['median'] * 1e6:.1f} us")
        if args.plot is not None:
            from reckon.daemon.bench.plot import line_plot

            args.plot.write_text(line_plot(
                [(r["jobs"], r["seconds"]["median"]) for r in out["rounds"]],
                title="Rejoin resync: join to round resolved (median)", xlabel="jobs on the agent (log scale)",
                ylabel="seconds"))
            lines.append(f"plot written to {args.plot}")
    elif args.bench == "resync-stages":
        from reckon.daemon.bench.stages import STAGES, run_round

        out["rounds"] = []
        for n in args.jobs:
            runs = [run_round(n) for _ in range(args.runs)]
            stages = {stage: summary([r[stage] / n for r in runs]) for stage in STAGES}
            total = summary([sum(r.values()) / n for r in runs])
            out["rounds"].append({"jobs": n, "per_job_seconds": stages, "total_per_job_seconds": total})
            lines.append(f"resync stages, {n} jobs (median of {args.runs}, per job):")
            lines += [f"  {stage}: {s['median'] * 1e6:.1f} us" for stage, s in stages.items()]
            lines.append(f"  total: {summary_text(total, 'us', scale=1e6, digits=1)}")
    elif args.bench == "recovery":
        out["outages"] = []
        for outage in args.outages:
            s = trio.run(_runs, args.runs, lambda o=outage: _recovery_run(args, o), f"outage {outage:g}s", quiet)
            out["outages"].append({"outage_s": outage, "recovery_s": s})
            lines.append(f"recovery after a {outage:g} s outage (from serving again to the job final): "
                         f"{summary_text(s, 's', digits=3)}")
    elif args.bench == "restart":
        out["histories"] = []
        for n in args.facts:
            with tempfile.TemporaryDirectory(prefix="reckon-history-") as tmp:
                info = _prepare_history(n, Path(tmp))
                s = trio.run(_runs, args.runs, lambda n=n, tmp=tmp: _restart_run(args, n, Path(tmp)),
                             f"restart {n}", quiet)
            out["histories"].append({"facts": n, **info, "restart_s": s})
            lines.append(f"restart with {n} facts ({info['jobs']} jobs, {info['facts_after_snapshot']} facts "
                         f"after the last snapshot): {summary_text(s, 's')}")
    elif args.bench == "cli":
        from reckon.daemon.bench.cli import run_cli_bench

        figures, cli_lines = run_cli_bench(args, quiet)
        out.update(figures)
        lines += cli_lines
    elif args.bench == "failover":
        from reckon.daemon.bench.failover import run_failover_bench

        figures, failover_lines = run_failover_bench(args, quiet)
        out.update(figures)
        lines += failover_lines
    elif args.bench == "poll":
        from reckon.daemon.bench.poll import run_poll_bench

        figures, poll_lines = run_poll_bench(args, quiet)
        out.update(figures)
        lines += poll_lines
    elif args.bench == "trace":
        from reckon.daemon.bench.trace import run_trace_bench

        figures, trace_lines = run_trace_bench(args)
        out.update(figures)
        lines += trace_lines
    elif args.bench == "pass":
        from reckon.daemon.bench.passcost import run_pass_bench

        figures, pass_lines = run_pass_bench(args)
        out.update(figures)
        lines += pass_lines
    elif args.bench == "scale":
        from reckon.daemon.bench.scale import run_scale_bench

        figures, scale_lines = run_scale_bench(args, quiet)
        out.update(figures)
        lines += scale_lines
    elif args.bench == "memory":
        out["sizes"] = []
        for n in args.jobs:
            s = trio.run(_runs, args.runs, lambda n=n: _memory_run(args, n), f"memory {n}", quiet)
            out["sizes"].append({"jobs": n, "bytes_per_job": s})
            lines.append(f"controller memory at {n} jobs: {summary_text(s, 'bytes/job', digits=0)}")
    if args.json:
        print(json.dumps(out))
    else:
        print(f"reckon bench {args.bench} on {machine['cpus']} CPUs, Python {machine['python']}")
        for line in lines:
            print("  " + line)
    return 0
