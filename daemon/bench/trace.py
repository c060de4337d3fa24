"""`reckon bench trace FILE`: a real workload log replayed through the controller model on simulated time.

The jobs of an SWF log (daemon/bench/swf.py) are submitted by their users at their submit times,
with their requested time as the spec's ``time_limit``, to agents whose CPUs add up to the log's
machine (``--agents 1x100``: one agent of 100 CPUs; ``10x10``: ten of ten, a job asking more than
one agent has is dropped and counted).  What runs them is the production code: the controller
model (``Controller.handle`` with the daemon's events: agents join, ``SubmitJob`` with the user as
the caller, the scheduler's proposals as ``DispatchProposed``, the agents' ``Started`` and
``Finished`` reports) and the scheduler the daemon uses, fed by the model's notes exactly as
daemon/controller/core.py ``_schedule`` feeds it.  Only the agents are simulated: an agent starts a
dispatched job at once and reports it finished when its trace run time has passed, or at its time
limit if the log says it ran longer (as reckon's supervisor stops it there).

Time is an event queue (a heap of finishes, and the log's submits in order): every event at one
instant is handled, then the scheduler is asked, as the daemon's loop does one batch.  The model's
``now`` is the simulated clock; nothing sleeps.  The figures are computed from the controller's
own job records (submitted, started, finished), next to the same figures of the production log
from its recorded waits over the same jobs.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobSpec
from reckon.model.permissions import Caller
from reckon.model.scheduler import POLICIES, Scheduler
from reckon.model.state import apply as apply_fact

from reckon.daemon.bench.swf import FAILED, SwfJob, SwfTrace, replay_skip

TAU = 10.0  # seconds: the bounded slowdown's floor on run time (Feitelson's usual 10 s)
UID_BASE = 10_000  # a log's user n runs as uid UID_BASE + n (and its group as gid UID_BASE + g)
UNKNOWN_USER = 9_999  # the uid of a job whose log line has no user
SCHEDULERS = POLICIES


class TraceError(ValueError):
    """A replay that cannot run as asked (a usage error: one line)."""


def parse_layout(text: str) -> tuple[int, int]:
    """``AxC`` -> (A agents, C CPUs each)."""
    count, sep, cpus = text.lower().partition("x")
    if not sep or not count.isdigit() or not cpus.isdigit() or int(count) < 1 or int(cpus) < 1:
        raise TraceError(f"--agents {text!r}: give agents x CPUs each, as 1x100 or 10x10")
    return int(count), int(cpus)


class Done(NamedTuple):
    """One replayed (or logged) job's times, for the figures."""

    user: int
    submit: float
    start: float
    end: float
    procs: int


@dataclass(frozen=True)
class Figures:
    jobs: int
    mean_wait: float
    mean_bounded_slowdown: float
    utilization: float
    makespan: float  # first submit to last end, seconds
    worst_user: int | None  # the user with the highest mean wait
    worst_user_mean_wait: float
    worst_user_jobs: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def figures(done: Iterable[Done], cpus: int) -> Figures:
    """Mean wait, mean bounded slowdown (tau 10 s: max(1, (wait + run) / max(run, tau))),
    utilization (CPU-seconds used / (CPUs x (last end - first submit))) and the user with the
    highest mean wait."""
    jobs = list(done)
    if not jobs:
        return Figures(0, 0.0, 0.0, 0.0, 0.0, None, 0.0, 0)
    waits = 0.0
    slowdowns = 0.0
    used = 0.0
    per_user: dict[int, list[float]] = defaultdict(lambda: [0.0, 0])
    for j in jobs:
        wait, run = j.start - j.submit, j.end - j.start
        waits += wait
        slowdowns += max(1.0, (wait + run) / max(run, TAU))
        used += run * j.procs
        mine = per_user[j.user]
        mine[0] += wait
        mine[1] += 1
    first = min(j.submit for j in jobs)
    last = max(j.end for j in jobs)
    makespan = last - first
    worst, (total, count) = max(per_user.items(), key=lambda kv: (kv[1][0] / kv[1][1], -kv[0]))
    return Figures(jobs=len(jobs), mean_wait=waits / len(jobs), mean_bounded_slowdown=slowdowns / len(jobs),
                   utilization=used / (cpus * makespan) if makespan > 0 else 0.0, makespan=makespan,
                   worst_user=worst, worst_user_mean_wait=total / count, worst_user_jobs=int(count))


def logged(jobs: Iterable[SwfJob]) -> list[Done] | None:
    """The production log's own times of ``jobs`` (start = submit + recorded wait), or None if some wait is unknown."""
    out = []
    for j in jobs:
        if j.wait is None or j.run is None or j.procs is None:
            return None
        start = j.submit + j.wait
        out.append(Done(_user(j), j.submit, start, start + j.run, j.procs))
    return out


def _user(job: SwfJob) -> int:
    return job.user if job.user is not None else UNKNOWN_USER - UID_BASE


@dataclass
class Selection:
    """The jobs a replay runs and those it leaves out, with why."""

    jobs: list[SwfJob]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count


def select(trace: SwfTrace, *, max_cpus: int, limit: int | None = None) -> Selection:
    """The first ``limit`` job lines (all: None), less those ``replay_skip`` leaves out and those
    asking more CPUs than one agent has (``max_cpus``)."""
    chosen: list[SwfJob] = []
    skipped: dict[str, int] = defaultdict(int)
    for job in trace.jobs[:limit] if limit is not None else trace.jobs:
        why = replay_skip(job)
        if why is None and job.procs is not None and job.procs > max_cpus:
            why = f"asks more than {max_cpus} CPUs (one agent's)"
        if why is not None:
            skipped[why] += 1
        else:
            chosen.append(job)
    chosen.sort(key=lambda j: (j.submit, j.number))  # the format sorts by submit time; be sure
    return Selection(chosen, dict(skipped))


def setup(kind: str, fairshare: bool, config: ControllerConfig | None = None) -> tuple[ControllerConfig, Scheduler]:
    """The controller's config and the scheduler of a replay, as the daemon builds them.

    ``kind``: ``fifo`` (the queue's order, every job that fits) or ``backfill`` (EASY).
    ``fairshare`` on: the config's priorities (fair share, age, size: model/priority.py); off: every
    priority weight 0, so the queue is in submission order, as the production EASY scheduler's."""
    if kind not in SCHEDULERS:
        raise TraceError(f"--scheduler {kind!r}: one of {', '.join(SCHEDULERS)}")
    config = dataclasses.replace(config or ControllerConfig(), scheduler=kind)
    if not fairshare:
        priority = config.priority
        zero = {f.name: 0 for f in dataclasses.fields(priority) if f.name.startswith("weight_")}
        config = dataclasses.replace(config, priority=dataclasses.replace(priority, **zero))
    return config, Scheduler(config.user_limits, policy=config.scheduler, reserve_after=config.reserve_after)


@dataclass
class Timings:
    """Wall seconds of the replay and where they went."""

    total: float = 0.0
    cpu: float = 0.0  # the process's CPU seconds over the same span (the wall time less the machine's other load)
    controller: float = 0.0  # Controller.handle, every event
    scheduler_place: float = 0.0  # Scheduler.place
    scheduler_notify: float = 0.0  # Scheduler.notify
    passes: int = 0  # place calls
    events: int = 0  # Controller.handle calls


class Replay:
    """One replay: a controller model, its scheduler, simulated agents, a simulated clock."""

    def __init__(self, agents: int, cpus: int, *, scheduler: Scheduler, config: ControllerConfig,
                 base: float = 0.0) -> None:
        self.controller = Controller(config)
        # No ControllerStarted here (no log, no start gate): the config's half-life is the fact a
        # start would record (model/startup.py), applied through the same seam.
        half_life = config.priority.half_life
        if half_life != self.controller.state.usage.half_life:
            apply_fact(self.controller.state, F.UsageDecaySet(half_life=float(half_life)))
        self.scheduler = scheduler
        self.base = base  # the epoch time of the log's time 0
        self.timings = Timings()
        self.names = [f"node{i + 1:03d}" for i in range(agents)]
        self.cpus = cpus
        self._conn = {name: i + 1 for i, name in enumerate(self.names)}
        self._finishes: list[tuple[float, int, str]] = []  # (end, seq, job id), log time
        self._seq = 0
        self._ends: dict[str, tuple[float, bool, int | None]] = {}  # running job -> (end, timed out, exit code)
        self._runs: dict[str, SwfJob] = {}  # job id -> its log line
        self.timed_out = 0  # jobs stopped at their time limit (the log says they ran longer)
        self._starts: list[tuple[str, str, int, str | None]] = []  # (agent, job, attempt, uid) dispatched now

    # ---- the controller, as the daemon drives it ----------------------------------------------

    def _handle(self, event: E.ControllerEvent) -> list[E.Command]:
        t0 = time.perf_counter()
        commands = self.controller.handle(event)
        t1 = time.perf_counter()
        self.timings.controller += t1 - t0
        self.timings.events += 1
        notes = 0
        for cmd in commands:
            if isinstance(cmd, E.Notify):
                self.scheduler.notify(cmd.note)  # type: ignore[arg-type]
                notes += 1
            elif isinstance(cmd, E.Send) and isinstance(cmd.message, M.Dispatch):
                msg = cmd.message
                self._starts.append((self.names[cmd.conn - 1], msg.job, msg.attempt, msg.uid))
            elif isinstance(cmd, E.Close):
                raise RuntimeError(f"the controller closed agent connection {cmd.conn}: {cmd.reason}")
        if notes:
            self.timings.scheduler_notify += time.perf_counter() - t1
        return commands

    def _schedule(self, at: float) -> None:
        """daemon/controller/core.py ``_schedule``: dispatch what the scheduler proposes until it proposes nothing."""
        now = self.base + at
        while True:
            t0 = time.perf_counter()
            proposals = self.scheduler.place(now=now)
            self.timings.scheduler_place += time.perf_counter() - t0
            self.timings.passes += 1
            if not proposals:
                return
            for job, agent in proposals:
                self._handle(E.DispatchProposed(job=job, agent=agent, now=now))
            self._start_dispatched(at)

    def _start_dispatched(self, at: float) -> None:
        """The simulated agents: each dispatched job starts at once and ends after its run time
        (at its time limit, if it would run longer: reckon's supervisor stops it there)."""
        starts, self._starts = self._starts, []
        now = self.base + at
        for agent, job_id, attempt, uid in starts:
            conn = self._conn[agent]
            self._handle(E.MessageFromAgent(conn=conn, message=M.Started(job=job_id, attempt=attempt, started_at=now,
                                                                         uid=uid), now=now))
            line = self._runs[job_id]
            run = float(line.run or 0.0)
            limit = self.controller.state.jobs[job_id].spec.time_limit
            timed_out = limit is not None and run > limit
            if timed_out:
                run = float(limit)  # type: ignore[arg-type]
                self.timed_out += 1
            self._ends[job_id] = (now, timed_out, 1 if line.status == FAILED else 0)
            self._seq += 1
            heapq.heappush(self._finishes, (at + run, self._seq, job_id))

    def _finish(self, job_id: str, now: float) -> None:
        job = self.controller.state.jobs[job_id]
        started, timed_out, exit_code = self._ends.pop(job_id)
        report = M.Finished(job=job_id, attempt=job.attempt, exit_code=None if timed_out else exit_code,
                            signal=15 if timed_out else None, finished_at=now, started_at=started, uid=job.uid,
                            timed_out=timed_out)
        self._handle(E.MessageFromAgent(conn=self._conn[job.agent or ""], message=report, now=now))

    # ---- the replay -------------------------------------------------------------------------

    def join_agents(self, now: float) -> None:
        for name in self.names:
            join = M.Join(agent=name, slots=self.cpus, version=M.PROTOCOL_VERSION, running=0)
            self._handle(E.AgentJoined(conn=self._conn[name], join=join, token=bytes(M.TOKEN_BYTES), now=now))

    def submit(self, line: SwfJob, now: float) -> str:
        user = _user(line)
        group = line.group if line.group is not None else user
        caller = Caller(uid=UID_BASE + user, gid=UID_BASE + group, user=f"user{user}")
        spec = JobSpec(name=f"swf{line.number}", command=("true",), slots=line.procs or 1,
                       time_limit=float(line.requested_time) if line.requested_time else None)
        commands = self._handle(E.SubmitJob(spec=spec, now=now, uid=f"{line.number:016x}", queue_anyway=True,
                                            caller=caller))
        job_id = next(f.job for c in commands if isinstance(c, E.Append) for f in c.facts
                      if isinstance(f, F.JobSubmitted))
        self._runs[job_id] = line
        return job_id

    def run(self, jobs: list[SwfJob]) -> dict[str, SwfJob]:
        """Replay ``jobs`` (sorted by submit time) to the end; job id -> its log line."""
        t0, cpu0 = time.perf_counter(), time.process_time()
        ids: dict[str, SwfJob] = {}
        if jobs:
            self.join_agents(self.base + jobs[0].submit)
        i, n = 0, len(jobs)
        finishes = self._finishes
        while i < n or finishes:
            at = min(jobs[i].submit if i < n else float("inf"), finishes[0][0] if finishes else float("inf"))
            now = self.base + at
            # One batch: every finish and submit at this instant, then one scheduling (core.py's loop).
            while finishes and finishes[0][0] <= at:
                _, _, job_id = heapq.heappop(finishes)
                self._finish(job_id, now)
            while i < n and jobs[i].submit <= at:
                ids[self.submit(jobs[i], now)] = jobs[i]
                i += 1
            # The controller's tick (lost agents, and priorities recomputed every priority_interval):
            # the daemon ticks every second; here at every instant something happens, as between
            # two such instants nothing the scheduler sees changes.
            self._handle(E.Tick(now=now, mono=at))
            self._schedule(at)
        self.timings.total = time.perf_counter() - t0
        self.timings.cpu = time.process_time() - cpu0
        return ids

    def done(self, ids: dict[str, SwfJob]) -> list[Done]:
        """The replayed jobs' times as the controller recorded them (epoch times, less the base)."""
        out = []
        for job_id, line in ids.items():
            job = self.controller.state.jobs[job_id]
            if job.started_at is None or job.finished_at is None:
                raise RuntimeError(f"job {job_id} (log job {line.number}) ended {job.state.value} without running")
            out.append(Done(_user(line), job.submitted_at - self.base, job.started_at - self.base,
                            job.finished_at - self.base, job.spec.slots))
        return out


def replay(trace: SwfTrace, *, agents: int = 1, cpus: int = 100, scheduler: str = "fifo", fairshare: bool = False,
           limit: int | None = None, config: ControllerConfig | None = None) -> dict[str, Any]:
    """Replay ``trace`` and return its figures (and the production log's over the same jobs)."""
    config, sched = setup(scheduler, fairshare, config)
    selection = select(trace, max_cpus=cpus, limit=limit)
    base = float(trace.unix_start)
    rep = Replay(agents, cpus, scheduler=sched, config=config, base=base)
    ids = rep.run(selection.jobs)
    total_cpus = agents * cpus
    prod = logged(selection.jobs)
    return {
        "agents": agents, "cpus_per_agent": cpus, "scheduler": scheduler, "fairshare": fairshare,
        "reserve_after": config.reserve_after,
        "skipped": selection.skipped, "timed_out": rep.timed_out,
        "replayed": figures(rep.done(ids), total_cpus).to_dict(),
        "production": figures(prod, trace.max_procs or total_cpus).to_dict() if prod is not None else None,
        "timings": dict(rep.timings.__dict__),
    }


def _hours(seconds: float) -> str:
    return f"{seconds:,.0f} s ({seconds / 3600:.1f} h)"


def report_lines(out: dict[str, Any]) -> list[str]:
    r, p, t = out["replayed"], out["production"], out["timings"]
    lines = [f"{out['agents']} agent(s) x {out['cpus_per_agent']} CPUs, scheduler {out['scheduler']}, "
             f"fair share {'on' if out['fairshare'] else 'off'}"
             + (f", reservations after {_hours(out['reserve_after'])} queued" if out.get("reserve_after") else "")
             + f": {r['jobs']:,} jobs replayed"]
    for why, count in sorted(out["skipped"].items()):
        lines.append(f"  left out: {count:,} ({why})")
    if out["timed_out"]:
        lines.append(f"  stopped at their time limit: {out['timed_out']:,} (the log says they ran longer)")

    def block(name: str, f: dict[str, Any]) -> None:
        lines.append(f"{name}: mean wait {_hours(f['mean_wait'])}, mean bounded slowdown (tau 10 s) "
                     f"{f['mean_bounded_slowdown']:.1f}, utilization {f['utilization']:.3f}")
        lines.append(f"  worst user's mean wait: {_hours(f['worst_user_mean_wait'])} (user {f['worst_user']}, "
                     f"{f['worst_user_jobs']:,} jobs)")

    block("replayed", r)
    if p is not None:
        block("production log (its recorded waits, same jobs)", p)
    lines.append(f"replay wall time {t['total']:.1f} s ({t['cpu']:.1f} s CPU): controller model {t['controller']:.1f} s "
                 f"({t['events']:,} events), scheduler place {t['scheduler_place']:.1f} s ({t['passes']:,} passes), "
                 f"notify {t['scheduler_notify']:.1f} s")
    return lines


def run_trace_bench(args: Any) -> tuple[dict[str, Any], list[str]]:
    """`reckon bench trace`: its figures and summary lines; a bad flag or file is a ``UsageError`` (one line)."""
    from reckon.daemon.bench.swf import SwfError, read
    from reckon.daemon.client_common import UsageError

    try:
        agents, cpus = parse_layout(args.agents)
        if args.limit is not None and args.limit < 1:
            raise TraceError(f"--limit {args.limit}: give a positive number of jobs")
        setup(args.scheduler, args.fairshare == "on")  # refuse before reading the file
        try:
            trace = read(args.file)
        except OSError as exc:
            raise TraceError(f"{args.file}: {exc.strerror or exc}") from None
        out = replay(trace, agents=agents, cpus=cpus, scheduler=args.scheduler, fairshare=args.fairshare == "on",
                     limit=args.limit, config=ControllerConfig(reserve_after=args.reserve_after))
    except (TraceError, SwfError) as exc:
        raise UsageError(str(exc)) from None
    out["file"] = str(args.file)
    if not out["replayed"]["jobs"]:
        raise UsageError(f"{args.file}: no job to replay")
    # The archive asks that its acknowledgement go with any figure quoted from a log.
    about = ", ".join(trace.header[k] for k in ("Computer", "Installation") if k in trace.header)
    thanks = trace.header.get("Acknowledge")
    out["log"] = {"about": about, "acknowledge": thanks}
    head = f"log {args.file}" + (f": {about}" if about else "") + (f" (thanks to {thanks})" if thanks else "")
    return {"trace": out}, [head, *report_lines(out)]
