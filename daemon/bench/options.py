"""The options of `reckon bench` (argparse alone: the command line builds every parser on every call)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from reckon.daemon.args import path
from reckon.daemon.bench.pgdatabases import DSN_ENV, DSN_HELP
from reckon.daemon.durations import duration, duration_or_zero
from reckon.model.scheduler import POLICIES


def _durations(text: str):
    from reckon.daemon.bench.simagents import Durations  # (light: the parser is built on every call)

    try:
        return Durations.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="benchmarks: real processes on loopback, figures")
    which = p.add_subparsers(dest="bench", required=True, metavar="BENCH")

    def bench(name: str, help: str, epilog: str | None = None) -> argparse.ArgumentParser:
        q = which.add_parser(name, help=help, epilog=epilog,
                             description=help[0].upper() + help[1:] + "." if epilog else None)
        q.add_argument("--runs", type=int, default=5, help="repetitions (default 5)")
        q.add_argument("--json", action="store_true", help="print one JSON object of figures")
        q.add_argument("--keep", action="store_true", help="keep the temporary directories")
        return q

    q = bench("throughput", "submit N jobs at once; jobs/s until all are terminal")
    q.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2000)")
    q.add_argument("--agents", type=int, default=2, help="agents (default 2)")
    q.add_argument("--slots", type=int, default=32, help="slots per agent (default 32)")
    q.add_argument("--executor", choices=("process", "null"), default="process",
                   help="process: real `true` jobs; null: agents finish each job at once (default process)")
    q.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite",
                   help="where the controller keeps its facts: sqlite (--state-dir, the default) or postgres "
                        "(a fresh database on the server --dsn names; --store postgresql://...)")
    q.add_argument("--dsn", metavar="postgresql://...", default=os.environ.get(DSN_ENV),
                   help="with --store postgres: " + DSN_HELP)

    q = bench("launch", "one agent's launch path alone (launcher, supervisors, `true`): jobs/s and CPU per job")
    q.add_argument("--jobs", type=int, default=3000, help="jobs per run (default 3000)")
    q.add_argument("--concurrency", type=int, default=64, help="jobs running at once (default 64)")

    q = bench("resync", "N jobs finish while their agent is cut off; time from its rejoin to the round resolved")
    q.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000], help="job counts to measure")
    q.add_argument("--plot", type=path, help="also write an SVG plot of round time against job count here")

    q = bench("resync-stages", "one round in-process (no sockets, no disk): the cost of each stage per job")
    q.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 100000], help="job counts to measure")

    q = bench("recovery", "a job finishes while the controller is down; time from its return to the job final")
    q.add_argument("--outages", type=duration, nargs="+", default=[5.0, 20.0, 60.0],
                   help="controller outages to measure, seconds")

    q = bench("restart", "controller restart time with N facts of history")
    q.add_argument("--facts", type=int, nargs="+", default=[100_000, 1_000_000], help="history sizes to measure")

    q = bench("cli", "the command line as a shell loop drives it: submit/show/jobs latency, a bulk submit end to end")
    q.add_argument("--jobs", type=int, default=200, help="submits in the loop, and jobs in the bulk submit "
                                                         "(default 200)")
    q.add_argument("--slots", type=int, default=32, help="slots of the one agent (default 32)")
    q.add_argument("--executor", choices=("process", "null"), default="process",
                   help="process: real `true` jobs; null: the agent finishes each job at once (default process)")
    q.add_argument("--auth", choices=("token", "munge", "both"), default="token",
                   help="the cluster's authentication: token (loopback), munge (a MUNGE credential per CLI "
                        "call, and the credential's own cost: libmunge against the munge/unmunge programs), or "
                        "both, run after run (default token)")
    q.add_argument("--munge-socket", metavar="PATH",
                   help="the munged of --auth munge (default $RECKON_MUNGE_SOCKET, else munged's own); from a "
                        "checkout `python -m tests.munged -- reckon bench cli --auth both` starts a private one")
    q.add_argument("--slurm", nargs="*", choices=("sbatch", "squeue", "sacct"), default=["sbatch", "squeue", "sacct"],
                   metavar="COMMAND",
                   help="Slurm-style commands to time as workflow tools call them, from `reckon slurm-commands` "
                        "(default: sbatch squeue sacct; one this build lacks is skipped and said; none: --slurm)")

    q = bench("failover", "controllers on one PostgreSQL database: SIGKILL or SIGSTOP the leader; time until "
                          "the standby serves and until a completion made meanwhile is recorded",
              epilog="The PostgreSQL server is yours (--dsn). From a checkout, `python -m tests.pgserver "
                     "--durable -- reckon bench failover` (or `make bench-failover`) starts a private one "
                     "(fsync on) and runs the bench against it.")
    q.add_argument("--dsn", metavar="postgresql://...", default=os.environ.get(DSN_ENV), help=DSN_HELP)
    q.add_argument("--variant", choices=("kill", "freeze", "both"), default="both",
                   help="kill: SIGKILL the leader; freeze: SIGSTOP it, then SIGCONT it (default both)")
    q.add_argument("--lease", type=duration, default=5.0, help="the controllers' --lease, seconds (default 5)")
    q.add_argument("--slots", type=int, default=2, help="slots per agent, all filled with jobs (default 2)")

    q = bench("poll", "job throughput while P clients poll squeue/sacct-style queries; the poll latency and "
                      "the controller's CPU per poll")
    q.add_argument("--jobs", type=int, default=10_000, help="jobs per run (default 10000)")
    q.add_argument("--agents", type=int, default=2, help="null-executor agents (default 2)")
    q.add_argument("--slots", type=int, default=64, help="slots per agent (default 64)")
    q.add_argument("--clients", type=int, default=50, help="polling clients (default 50)")
    q.add_argument("--rate", type=float, default=10.0, help="polls per second of each client (default 10)")
    q.add_argument("--modes", nargs="+", choices=("fresh", "kept", "http"), default=["fresh", "kept", "http"],
                   help="fresh: a connection per poll (as each squeue process); kept: one per client; http: "
                        "GET /api/v1/query with keep-alive (default: all three)")
    q.add_argument("--whole", action="store_true",
                   help="poll for whole job objects, not the fields squeue %%i %%t and sacct JobIdRaw,State ask for")

    q = which.add_parser("trace", help="replay a workload log (SWF) through the controller model and scheduler on "
                                       "simulated time: wait, slowdown, utilization",
                         description="Replay a Standard Workload Format log (the Parallel Workloads Archive's) "
                                     "through the real controller model and scheduler on simulated time, and print "
                                     "mean wait, mean bounded slowdown, utilization and the worst user's mean wait, "
                                     "next to the production log's own figures.")
    q.add_argument("file", type=path, metavar="FILE", help="the SWF log")
    q.add_argument("--agents", default="1x100", metavar="AxC",
                   help="A agents of C CPUs each (default 1x100; 10x10 drops jobs asking more than 10 CPUs)")
    q.add_argument("--scheduler", choices=("fifo", "backfill"), default="fifo",
                   help="fifo: first fit in queue order; backfill: EASY backfill, the controller's default (default here: fifo)")
    q.add_argument("--fairshare", choices=("on", "off"), default="off", help="per-user fair share (default off)")
    q.add_argument("--reserve-after", type=duration_or_zero, default=0.0, metavar="DURATION",
                   help="backfill: reserve only for a blocked job queued this long (the controller's --reserve-after; "
                        "default 0)")
    q.add_argument("--limit", type=int, metavar="N", help="replay only the log's first N jobs")
    q.add_argument("--json", action="store_true", help="print one JSON object of figures")

    q = which.add_parser("pass", help="one scheduling pass timed on its own (the scheduler model, no daemons) at "
                                      "cluster sizes: full, one job ended, cold start",
                         description="Time one scheduling pass of the scheduler model over A agents full of running "
                                     "jobs and P pending jobs: with nothing free, after one job ended, and from a "
                                     "cold start (one batch of --budget placements).")
    q.add_argument("--agents", type=int, default=10_000, help="agents (default 10000)")
    q.add_argument("--slots", type=int, default=8, help="slots per agent (default 8)")
    q.add_argument("--pending", type=int, default=100_000, help="pending jobs (default 100000)")
    q.add_argument("--users", type=int, default=100, help="users the jobs belong to (default 100)")
    q.add_argument("--budget", type=int, default=2_000,
                   help="placements per pass, the daemon's max_dispatch_per_batch (default 2000)")
    q.add_argument("--scheduler", choices=(*POLICIES, "both"), default="both", help="policy (default both)")
    q.add_argument("--runs", type=int, default=5, help="repetitions of each pass (default 5)")
    q.add_argument("--json", action="store_true", help="print one JSON object of figures")

    q = bench("scale", "a real controller under N simulated agents in one process: the controller's CPU and "
                       "memory idle, jobs/s, dispatch and ack latency; every outcome checked exactly once")
    q.set_defaults(runs=1)
    q.add_argument("--agents", type=int, default=100, help="simulated agents (default 100)")
    q.add_argument("--slots", type=int, default=8, help="slots per agent (default 8)")
    q.add_argument("--idle", type=duration_or_zero, default=10.0, help="seconds measured with every agent idle (0: skip; "
                                                             "default 10)")
    q.add_argument("--jobs", type=int, default=10_000, help="null jobs submitted at once for jobs/s (0: skip; "
                                                           "default 10000)")
    q.add_argument("--latency", type=duration_or_zero, default=20.0,
                   help="seconds of open-loop arrivals at --load for dispatch and ack latency (0: skip; default 20)")
    q.add_argument("--load", type=float, default=0.8, help="the latency phase's share of slots busy (default 0.8)")
    q.add_argument("--duration", type=_durations, default="uniform:20:40",
                   help="the latency phase's job durations, a distribution (not one duration): fixed:S, exp:MEAN "
                        "or uniform:LOW:HIGH, in s (default uniform:20:40)")
    q.add_argument("--fail-rate", type=float, default=0.0, help="share of jobs that exit 1 (default 0)")
    q.add_argument("--drop-rate", type=float, default=0.0, help="connection drops per second, over all agents")
    q.add_argument("--freeze-rate", type=float, default=0.0, help="agent freezes per second, over all agents")
    q.add_argument("--restart-rate", type=float, default=0.0, help="agent restarts per second, over all agents")
    q.add_argument("--freeze-for", type=duration, default=3.0, help="seconds a freeze lasts (default 3)")
    q.add_argument("--down-for", type=duration, default=1.0, help="seconds a restarted agent is down (default 1)")
    q.add_argument("--seed", type=int, default=0, help="the simulator's RNG seed (default 0)")
    q.add_argument("--heartbeat", type=duration, default=2.0,
                   help="the agents' heartbeat interval (default 2, the agent's own); the controller's "
                        "--heartbeat-timeout is kept at 5 times it, at least its default 10 s: more agents than "
                        "the simulator's core can heartbeat at 2 s")

    q = bench("memory", "controller resident memory per job")
    q.add_argument("--jobs", type=int, nargs="+", default=[100_000, 1_000_000], help="job counts to measure")
