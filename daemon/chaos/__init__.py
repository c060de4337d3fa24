"""`reckon chaos`: real processes, seeded faults, and a verdict on every job.

A controller and several agents run on loopback as real processes; the
agents reach the controller through proxies the run can cut or stall.  Jobs
record their own truth (``truth.py``); faults (SIGKILL, SIGTERM,
SIGSTOP/SIGCONT of the controller and of agents, connection cuts and
stalls, partitions) follow a schedule drawn from the seed (``schedule.py``);
``run.py`` drives it all, heals, waits and judges.  Exit status 0 on PASS,
1 on FAIL.  How it works and a recorded long run: docs/chaos.md.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from daemon.chaos.run import ChaosConfig, ChaosInterrupted, ChaosRun, dumps, kill_job_processes, print_report, report
from daemon.chaos.schedule import make_plan


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("chaos", parents=[common],
                       help="a chaos run: real daemons, seeded faults, every job checked against its own truth")
    p.add_argument("--seed", type=int, default=None, help="replay this fault schedule and job mix (default: random)")
    p.add_argument("--duration", type=_positive, default=60.0, help="seconds of submissions and faults (default 60)")
    p.add_argument("--agents", type=int, default=3, help="agents (default 3)")
    p.add_argument("--slots", type=int, default=4, help="slots per agent (default 4)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--jobs", type=int, default=None, help="jobs in all, spread over the duration")
    group.add_argument("--rate", type=_positive, default=3.0, help="jobs per second (default 3)")
    p.add_argument("--fault-every", type=_positive, default=4.0, help="mean seconds between faults (default 4)")
    p.add_argument("--max-outage", type=_positive, default=6.0, help="longest fault, seconds (default 6)")
    p.add_argument("--settle-timeout", type=_positive, default=300.0,
                   help="seconds after the last fault for every job to end (default 300)")
    p.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--dir", type=Path, default=None, help="run in this (new) directory instead of a temporary one")


def run_chaos(args: argparse.Namespace) -> int:
    if args.agents < 1 or args.slots < 1:
        print("reckon: --agents and --slots must be at least 1", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    jobs = args.jobs if args.jobs is not None else max(1, round(args.rate * args.duration))
    agents = tuple(f"agent-{i}" for i in range(1, args.agents + 1))
    plan = make_plan(seed=seed, duration=args.duration, agents=list(agents), jobs=jobs,
                     fault_every=args.fault_every, max_outage=args.max_outage)
    config = ChaosConfig(plan=plan, agents=agents, slots=args.slots, duration=args.duration,
                         settle_timeout=args.settle_timeout, quiet=args.json)
    if args.dir is not None:
        args.dir.mkdir(parents=True)
        base = args.dir.absolute()
    else:
        base = Path(tempfile.mkdtemp(prefix="reckon-chaos-"))
    chaos = ChaosRun(config, base)
    t0 = time.monotonic()
    try:
        verdict, info = trio.run(chaos.run)
    except (ChaosInterrupted, KeyboardInterrupt) as exc:
        print(f"reckon chaos: stopped ({exc or 'interrupted'}); seed {seed}, directory kept: {base}", file=sys.stderr)
        return 130
    except BaseException:
        print(f"reckon chaos: the run broke off; seed {seed}, directory kept: {base}", file=sys.stderr)
        raise
    finally:
        chaos.cluster.stop_all()
        kill_job_processes(chaos.work_dir)
    out = report(verdict, plan, config, info, chaos.applied, chaos.notes, chaos.crashes, time.monotonic() - t0)
    passed = out["verdict"] == "PASS"
    if not passed:
        args.keep = True
    if args.json:
        print(dumps(out))
    else:
        print_report(out)
    if args.keep:
        print(f"(kept {base})", file=sys.stderr)
    elif args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if passed else 1
