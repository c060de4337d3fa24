"""`reckon chaos`: plan the run from the seed, run it, judge it, report (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

from reckon.daemon.chaos.run import ChaosConfig, ChaosInterrupted, ChaosRun, dumps, kill_job_processes, print_report, report
from reckon.daemon.chaos.schedule import make_plan


def run_chaos(args: argparse.Namespace) -> int:
    if args.agents < 1 or args.slots < 1:
        print("reckon: --agents and --slots must be at least 1", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    jobs = args.jobs if args.jobs is not None else max(1, round(args.rate * args.duration))
    agents = tuple(f"agent-{i}" for i in range(1, args.agents + 1))
    if not 0 <= args.hog_share <= 1:
        print("reckon: --hog-share must be between 0 and 1", file=sys.stderr)
        return 2
    if args.users and os.geteuid() != 0:
        print("reckon: chaos --users runs jobs as those users: it must run as root", file=sys.stderr)
        return 2
    plan = make_plan(seed=seed, duration=args.duration, agents=list(agents), jobs=jobs,
                     fault_every=args.fault_every, max_outage=args.max_outage, users=args.users,
                     hog_share=args.hog_share if args.mem is not None else 0.0)
    config = ChaosConfig(plan=plan, agents=agents, slots=args.slots, duration=args.duration,
                         settle_timeout=args.settle_timeout, quiet=args.json, users=args.users,
                         munge_socket=args.munge_socket, mem=args.mem)
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
