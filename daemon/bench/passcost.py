"""`reckon bench pass`: what one scheduling pass costs at cluster sizes the daemons cannot reach here.

The scheduler is a pure model (model/scheduler.py) fed by notes, so its cost is measured on its own,
in this process, with the notes a controller would send: A agents of C slots, every agent full of
RUNNING jobs (each with a time limit and a start in the past, so backfill has ends to reckon with)
and P PENDING jobs of 1..C slots from U users behind them.  Three passes are timed, each ``--runs``
times (median and worst):

- **full**: nothing is free, the pass places nothing (the usual state of a busy cluster): its cost
  is gathering the free agents, O(agents), plus meeting each partition's first blocked job and,
  under backfill, its reservation (O(agents + running jobs)).
- **one freed**: one job ends on one agent (its notes), and the pass fills that hole from the queue.
- **cold**: every agent empty (a cluster just started), one pass of ``--budget`` placements (the
  daemon's ``max_dispatch_per_batch``): its cost per placed job.

Each timed pass runs on a fresh copy of the same scheduler state (built once, copied with
``copy.deepcopy`` outside the timing), so every run times the same pass.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from typing import Any

from reckon.model.jobs import JobState
from reckon.model.scheduler import POLICIES, AgentNote, JobNote, Scheduler


class PassError(ValueError):
    """A benchmark that cannot run as asked (a usage error: one line)."""


def build(policy: str, agents: int, slots: int, pending: int, users: int, *, full: bool,
          now: float, seed: int = 1) -> tuple[Scheduler, tuple[str, str, int, int]]:
    """A scheduler as the notes of such a cluster leave it; (agent, job, its slots, the agent's
    used slots) of the first running job, for ``_free_one``."""
    rnd = random.Random(seed)
    s = Scheduler(policy=policy)
    first: tuple[str, str, int, int] = ("node00000", "", 0, 0)
    order = 0
    for a in range(agents):
        name = f"node{a:05d}"
        used = 0
        if full:
            while used < slots:
                width = min(rnd.randint(1, slots), slots - used)
                order += 1
                s.notify(JobNote(job=f"r{order}", order=order, state=JobState.RUNNING, slots=width, agent=name,
                                 user=f"user{rnd.randrange(users)}", time_limit=float(rnd.randint(600, 7200)),
                                 started=now - rnd.uniform(0, 600)))
                used += width
                if a == 0 and not first[1]:
                    first = (name, f"r{order}", width, 0)
        if a == 0:
            first = (first[0], first[1], first[2], used)
        s.notify(AgentNote(agent=name, slots=slots, used=used, connected=True, reconciling=False))
    for _ in range(pending):
        order += 1
        s.notify(JobNote(job=str(order), order=order, state=JobState.PENDING, slots=rnd.randint(1, slots),
                         agent=None, user=f"user{rnd.randrange(users)}", time_limit=float(rnd.randint(60, 7200))))
    return s, first


def _free_one(s: Scheduler, first: tuple[str, str, int, int], slots: int) -> None:
    """The first agent's first running job ends: its notes (the job, then the agent)."""
    name, job, width, used = first
    s.notify(JobNote(job=job, order=0, state=JobState.COMPLETED, slots=width, agent=None))
    s.notify(AgentNote(agent=name, slots=slots, used=used - width, connected=True, reconciling=False))


def _time(base: Scheduler, runs: int, prepare, limit: int | None, now: float) -> tuple[list[float], int]:
    """Seconds of each of ``runs`` passes over a fresh copy of ``base``; how many the last placed."""
    times, placed = [], 0
    for _ in range(runs):
        s = copy.deepcopy(base)
        if prepare is not None:
            prepare(s)
        t0 = time.perf_counter()
        placed = len(s.place(limit=limit, now=now))
        times.append(time.perf_counter() - t0)
    return times, placed


def measure(policy: str, agents: int, slots: int, pending: int, users: int, runs: int, budget: int) -> dict[str, Any]:
    now = 1_000_000.0
    full, first = build(policy, agents, slots, pending, users, full=True, now=now)
    cold, _ = build(policy, agents, slots, pending, users, full=False, now=now)
    out: dict[str, Any] = {"policy": policy, "agents": agents, "slots": slots, "pending": pending}
    for label, base, prepare, limit in (("full", full, None, budget), ("one_freed", full, lambda s: _free_one(s, first, slots), budget),
                                        ("cold", cold, None, budget)):
        times, placed = _time(base, runs, prepare, limit, now)
        out[label] = {"median_ms": statistics.median(times) * 1e3, "worst_ms": max(times) * 1e3, "placed": placed,
                      "per_placed_us": statistics.median(times) / placed * 1e6 if placed else None}
    return out


def run_pass_bench(args: Any) -> tuple[dict[str, Any], list[str]]:
    from reckon.daemon.client_common import UsageError

    for flag in ("agents", "slots", "pending", "users", "budget", "runs"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} {getattr(args, flag)}: give a positive number")
    policies = POLICIES if args.scheduler == "both" else (args.scheduler,)
    results = [measure(p, args.agents, args.slots, args.pending, args.users, args.runs, args.budget)
               for p in policies]
    lines = [f"one pass, {args.agents:,} agents x {args.slots} slots, {args.pending:,} pending jobs of 1..{args.slots} "
             f"slots, {args.users} users; median (worst) of {args.runs}:"]
    for r in results:
        f, o, c = r["full"], r["one_freed"], r["cold"]
        lines.append(f"  {r['policy']:<8} full (places nothing) {f['median_ms']:.1f} ms ({f['worst_ms']:.1f}); "
                     f"one job ended {o['median_ms']:.1f} ms ({o['worst_ms']:.1f}), {o['placed']} placed; "
                     f"cold {c['median_ms']:.0f} ms for {c['placed']:,} placed, "
                     f"{c['per_placed_us'] or 0:.0f} us per job")
    return {"pass": results}, lines
