"""The chaos run itself: real daemons, a fault schedule, a heal, a verdict.

One controller and N agents run as processes (``daemon.procs.LocalCluster``);
each agent dials the controller through its own ``CuttableProxy``.  A
submitter feeds the planned jobs in at their times; one task per planned
fault waits for its moment, takes its target (one fault per target at a
time), applies it, waits its duration and heals it.  When the run's duration
is over and every fault is healed, the run waits for every job to be
terminal and for every job process to be gone, stops the daemons, reads the
controller's fact log and judges (``truth.judge``).
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from reckon.daemon.controller.options import VALIDATE_STATE_ENV
from reckon.daemon.auth.client import ClientAuth
from reckon.daemon.auth.munge import MungeError, resolve_socket
from reckon.daemon.client import Client, ClientError
from reckon.daemon.cli.demo import count_finish_facts
from reckon.daemon.procs import LocalCluster
from reckon.daemon.chaos.proxy import CuttableProxy
from reckon.daemon.chaos.schedule import CONTROLLER, ChaosJob, Fault, FaultKind, Plan
from reckon.daemon.chaos.truth import TERMINAL, Verdict, job_command, judge, read_truth

CONTROLLER_ARGS = ("--heartbeat-timeout", "3", "--round-timeout", "10")  # lost_after stays off
AGENT_ARGS = ("--reconnect-max", "0.5", "--heartbeat-interval", "0.5", "--retry-max", "2", "--kill-grace", "2")
SUBMIT_EVERY = 0.5  # seconds between submission batches
SUBMIT_GUARD = 60.0  # seconds one submission may take (a stopped controller holds it) before it counts as lost
TERM_GRACE = 15.0   # seconds a SIGTERMed daemon may take to stop before it is SIGKILLed (and reported)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosConfig:
    plan: Plan
    agents: tuple[str, ...]
    slots: int
    duration: float
    settle_timeout: float  # seconds after healing for every job to end (the hang guard of the end)
    quiet: bool            # progress on stderr only
    users: tuple[str, ...] = ()     # Unix users who submit the jobs (a MUNGE cluster); none: token mode
    munge_socket: str | None = None  # the local munged every daemon and submitter uses (with users)
    mem: int | None = None           # every job's memory limit, bytes (hog jobs allocate twice that)


class ChaosRun:
    def __init__(self, config: ChaosConfig, base: Path) -> None:
        self.config = config
        self.base = base
        self.truth_dir = base / "truth"
        self.work_dir = base / "work"  # every job's cwd: how the run finds job processes still alive
        self.cluster = LocalCluster(base)
        self.cluster.controller_env = {VALIDATE_STATE_ENV: "1"}  # every handle checks the state it leaves
        self.proxies: dict[str, CuttableProxy] = {}
        self.locks = {target: trio.Lock() for target in (CONTROLLER, *config.agents)}
        self.acknowledged: set[str] = set()   # names the controller confirmed submitted
        self.controller_starts = 0
        self.applied: list[dict[str, Any]] = []  # faults as applied: the report
        self.notes: list[str] = []               # anything abnormal in the run
        self.crashes: list[str] = []             # daemons that exited by themselves (restarted, as systemd would)
        self.t0 = 0.0
        self.interrupted = False

    def say(self, line: str) -> None:
        print(line, file=sys.stderr if self.config.quiet else sys.stdout, flush=True)

    def elapsed(self) -> float:
        return trio.current_time() - self.t0

    # ---- daemons ----------------------------------------------------------------------

    def _auth_args(self) -> tuple[str, ...]:
        if not self.config.users:
            return ()
        return ("--auth", "munge") + (("--munge-socket", self.config.munge_socket) if self.config.munge_socket else ())

    async def start_controller(self) -> None:
        await self.cluster.start_controller(*CONTROLLER_ARGS, *self._auth_args())
        self.controller_starts += 1

    async def start_agent(self, name: str) -> None:
        await self.cluster.start_agent(name, self.config.slots, *AGENT_ARGS, *self._auth_args(),
                                       controller=self.proxies[name].url)

    def _auth(self, user: str | None = None) -> ClientAuth | None:
        """The run's own calls as itself (root: an operator); a submitter's as its user, whose
        credential comes from ``munge`` run as that user (munged takes the uid from the socket)."""
        if not self.config.users:
            return None
        socket = resolve_socket(self.config.munge_socket)  # --munge-socket, else $RECKON_MUNGE_SOCKET, else munged's
        if user is None:
            return ClientAuth("munge", munge_socket=socket)
        argv = ["runuser", "-u", user, "--", "munge", "--no-input", "--socket", socket]

        def encode() -> str:
            done = subprocess.run(argv, capture_output=True, timeout=30)
            if done.returncode != 0:
                raise MungeError("unreachable", done.stderr.decode(errors="replace").strip() or "munge failed")
            return done.stdout.decode("ascii").strip()
        return ClientAuth("munge", munge_socket=socket, encode=encode)

    async def _call(self, op: str, timeout: float = 10.0, **fields: Any) -> dict | None:
        """One client call straight to the controller (never through a proxy); None if unavailable."""
        with trio.move_on_after(timeout):
            try:
                async with Client(self.cluster.url, self._auth()) as client:
                    return await client.call(op, **fields)
            except ClientError:
                return None
        return None

    # ---- faults -----------------------------------------------------------------------

    async def run_fault(self, fault: Fault) -> None:
        await trio.sleep_until(self._at(fault.at))
        targets = sorted(self.locks) if fault.kind is FaultKind.PARTITION else [fault.target]
        targets.sort(key=lambda t: (t != CONTROLLER, t))  # one global order: no two faults deadlock
        async with _all_locks([self.locks[t] for t in targets]):
            began = self.elapsed()
            self.say(f"  t={began:6.1f}s  fault: {fault.kind.value} {fault.target} for {fault.duration:.1f}s")
            await self._apply(fault)
            await trio.sleep(fault.duration)
            await self._heal(fault)
            self.applied.append({"at": round(began, 2), "planned_at": fault.at, "target": fault.target,
                                 "kind": fault.kind.value, "duration": fault.duration,
                                 "healed_after": round(self.elapsed() - began, 2)})

    async def _apply(self, fault: Fault) -> None:
        key, kind = fault.target, fault.kind
        if kind is FaultKind.KILL:
            await trio.to_thread.run_sync(self.cluster.kill, key)
        elif kind is FaultKind.TERM:
            if not await trio.to_thread.run_sync(self.cluster.terminate, key, TERM_GRACE):
                self.notes.append(f"{key} did not stop within {TERM_GRACE:.0f}s of SIGTERM (t={self.elapsed():.1f}s)")
        elif kind is FaultKind.STOP:
            self.cluster.signal(key, signal.SIGSTOP)
        elif kind is FaultKind.CUT:
            self.proxies[key].cut()
        elif kind is FaultKind.STALL:
            self.proxies[key].stall()
        elif kind is FaultKind.PARTITION:
            for proxy in self.proxies.values():
                proxy.cut()

    async def _heal(self, fault: Fault) -> None:
        key, kind = fault.target, fault.kind
        if kind in (FaultKind.KILL, FaultKind.TERM):
            await (self.start_controller() if key == CONTROLLER else self.start_agent(key))
        elif kind is FaultKind.STOP:
            self.cluster.signal(key, signal.SIGCONT)
        elif kind in (FaultKind.CUT, FaultKind.STALL):
            self.proxies[key].restore()
        elif kind is FaultKind.PARTITION:
            for proxy in self.proxies.values():
                proxy.restore()

    def _at(self, offset: float) -> float:
        return self.t0 + offset

    # ---- submissions ------------------------------------------------------------------

    async def submitter(self) -> None:
        """Submit every planned job at its time; resolve batches whose reply was lost."""
        jobs = list(self.config.plan.jobs)
        waiting: list[ChaosJob] = []          # due, not yet sent (or sent and known not to have arrived)
        uncertain: list[tuple[int, list[ChaosJob]]] = []  # (controller start it was sent to, batch)
        i = 0
        while i < len(jobs) or waiting or uncertain:
            while i < len(jobs) and jobs[i].submit_at <= self.elapsed():
                waiting.append(jobs[i])
                i += 1
            if uncertain and (uncertain[0][0] != self.controller_starts or i == len(jobs) and not waiting):
                waiting = await self._resolve(uncertain) + waiting
            if waiting:
                batch, waiting = waiting[:500], waiting[500:]
                again: list[ChaosJob] = []
                for user in sorted({j.user or "" for j in batch}):  # one batch per submitter
                    again += await self._submit([j for j in batch if (j.user or "") == user], uncertain)
                waiting = again + waiting
            await trio.sleep(SUBMIT_EVERY)

    def _spec(self, job: ChaosJob) -> dict[str, Any]:
        spec = {"name": job.name, "command": job_command(job, self.truth_dir, self.config.mem),
                "cwd": str(self.work_dir), "env": [], "slots": 1}
        if self.config.mem is not None:
            spec["mem"] = self.config.mem
        return spec

    async def _submit(self, batch: list[ChaosJob], uncertain: list) -> list[ChaosJob]:
        """Send one batch (of one submitter); the jobs to send again (none if it arrived or its fate is unknown)."""
        specs = [self._spec(j) for j in batch]
        sent_to, connected, answered = self.controller_starts, False, False
        with trio.move_on_after(SUBMIT_GUARD):
            try:
                async with Client(self.cluster.url, self._auth(batch[0].user)) as client:
                    connected = True
                    await client.call("submit_many", specs=specs)
                    answered = True
            except ClientError:
                pass
        if not answered:
            if not connected:
                return batch  # nothing was sent
            uncertain.append((sent_to, batch))  # sent, reply lost: look before sending again
            return []
        self.acknowledged.update(j.name for j in batch)
        return []

    async def _resolve(self, uncertain: list[tuple[int, list[ChaosJob]]]) -> list[ChaosJob]:
        """Of the batches whose reply was lost: the jobs the controller does not have."""
        listing = await self._call("jobs", timeout=30.0)
        if listing is None:
            return []  # still unavailable: ask again next time
        known = {j["name"] for j in listing["jobs"]}
        again = []
        for _, batch in uncertain:
            for job in batch:
                if job.name in known:
                    self.acknowledged.add(job.name)
                else:
                    again.append(job)
        uncertain.clear()
        return again

    # ---- the run ----------------------------------------------------------------------

    async def progress(self) -> None:
        while True:
            await trio.sleep(10)
            status = await self._call("status", timeout=2.0)
            counts = "controller unavailable" if status is None else "  ".join(
                f"{s.lower()} {status['status']['jobs'].get(s, 0)}" for s in ("PENDING", "RUNNING", *TERMINAL[:2]))
            self.say(f"  t={self.elapsed():6.1f}s  {counts}  faults applied {len(self.applied)}")

    async def run(self) -> tuple[Verdict, dict[str, Any]]:
        plan, config = self.config.plan, self.config
        self.truth_dir.mkdir()
        self.work_dir.mkdir()
        if config.users:  # the users' jobs write their truth here and work here: the base must let them in
            self.base.chmod(0o711)
            for shared in (self.truth_dir, self.work_dir):
                shared.chmod(0o1777)
        await self.start_controller()
        async with trio.open_nursery() as nursery:
            for name in config.agents:
                proxy = self.proxies[name] = CuttableProxy(self.cluster.port)
                await nursery.start(proxy.serve)
                await self.start_agent(name)
            await self._wait(self._all_joined, "every agent to join", 60.0)
            self.say(f"reckon chaos: seed {plan.seed}, {len(config.agents)} agents x {config.slots} slots, "
                     f"{len(plan.jobs)} jobs over {config.duration:g}s, {len(plan.faults)} faults planned, in {self.base}")
            self.t0 = trio.current_time()
            nursery.start_soon(self.progress)
            nursery.start_soon(self._stop_on_sigterm, nursery.cancel_scope)
            nursery.start_soon(self.watchdog)
            async with trio.open_nursery() as work:
                work.start_soon(self.submitter)
                for fault in plan.faults:
                    work.start_soon(self.run_fault, fault)
            healed_at = self.elapsed()
            self.say(f"  t={healed_at:6.1f}s  faults over, all jobs submitted: waiting for every job to end")
            try:
                await self._wait(self._all_terminal, "every job to be terminal", config.settle_timeout)
                await self._wait(self._no_job_processes, "every job process to end", 60.0)
            except ChaosStuck as exc:  # judge what there is: the unfinished jobs count as stuck
                self.notes.append(str(exc))
            settled_at = self.elapsed()
            final = await self._call("jobs", timeout=60.0)
            nursery.cancel_scope.cancel()
        if self.interrupted:
            raise ChaosInterrupted("SIGTERM: the run was stopped before its verdict")
        await trio.to_thread.run_sync(self.cluster.stop_all)
        finish_facts = await count_finish_facts(self.base / "controller")
        uids = {user: pwd.getpwnam(user).pw_uid for user in config.users} if config.users else None
        verdict = judge(list(plan.jobs), self.acknowledged, final["jobs"] if final else [],
                        read_truth(self.truth_dir), finish_facts, uids)
        return verdict, {"healed_at_s": round(healed_at, 1), "settled_at_s": round(settled_at, 1),
                         "controller_starts": self.controller_starts,
                         "proxy_connections": sum(p.connections for p in self.proxies.values())}

    async def watchdog(self) -> None:
        """Restart a daemon that exited by itself (no fault stopped it), as ``Restart=always`` would,
        and record the crash: it fails the verdict."""
        while True:
            await trio.sleep(1)
            for key, proc in list(self.cluster.procs.items()):
                if proc.poll() is None:
                    continue
                async with self.locks[key]:
                    if self.cluster.procs.get(key) is not proc:
                        continue  # a fault took it over meanwhile
                    del self.cluster.procs[key]
                    crash = (f"{key} exited by itself with status {proc.returncode} at t={self.elapsed():.1f}s "
                             f"(see {self.cluster.log_path(key)}); restarted")
                    self.crashes.append(crash)
                    self.say(f"  t={self.elapsed():6.1f}s  CRASH: {crash}")
                    await (self.start_controller() if key == CONTROLLER else self.start_agent(key))

    async def _stop_on_sigterm(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                self.interrupted = True
                scope.cancel()
                return

    async def _wait(self, predicate, what: str, timeout: float) -> None:
        with trio.move_on_after(timeout):
            while not await predicate():
                await trio.sleep(0.5)
            return
        raise ChaosStuck(f"timed out after {timeout:.0f}s waiting for {what}")

    async def _all_joined(self) -> bool:
        nodes = await self._call("nodes")
        return nodes is not None and sum(n["state"] == "IDLE" for n in nodes["nodes"]) == len(self.config.agents)

    async def _all_terminal(self) -> bool:
        status = await self._call("status")
        if status is None:
            return False
        counts = status["status"]["jobs"]
        return sum(counts.get(s, 0) for s in TERMINAL) >= len(self.config.plan.jobs) and not any(
            counts.get(s, 0) for s in ("PENDING", "RUNNING"))

    async def _no_job_processes(self) -> bool:
        return not list(job_processes(self.work_dir))


class ChaosInterrupted(Exception):
    """The run was told to stop (SIGTERM); its daemons are stopped on the way out."""


class ChaosStuck(Exception):
    """The run did not reach a condition in time: the verdict still judges what there is."""


def job_processes(work_dir: Path):
    """Pids of live processes (supervisors, jobs and their children) working in ``work_dir``."""
    needle = str(work_dir)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/cwd") != needle:
                continue
            state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            yield int(entry.name)


def kill_job_processes(work_dir: Path) -> list[int]:
    killed = []
    for _ in range(50):
        pids = list(job_processes(work_dir))
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        time.sleep(0.05)
    return killed


class _all_locks:
    """Hold several trio locks (taken in the given order)."""

    def __init__(self, locks: list[trio.Lock]) -> None:
        self.locks = locks

    async def __aenter__(self) -> None:
        for lock in self.locks:
            await lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        for lock in reversed(self.locks):
            lock.release()


def report(verdict: Verdict, plan: Plan, config: ChaosConfig, run_info: dict[str, Any], applied: list[dict],
           notes: list[str], crashes: list[str], wall: float) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for fault in applied:
        kind = f"{fault['kind']} {'controller' if fault['target'] == CONTROLLER else 'agent'}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"verdict": "PASS" if verdict.passed and not crashes else "FAIL", "seed": plan.seed,
            "duration_s": config.duration, "crashes": crashes,
            "wall_s": round(wall, 1), "agents": len(config.agents), "slots": config.slots,
            "users": list(config.users), "mem": config.mem, "hogs": sum(j.hog for j in plan.jobs),
            **verdict.counts(), "by_state": verdict.by_state, "faults": len(applied), "faults_by_kind": kinds,
            "time_gaps": verdict.gaps(), **run_info, "notes": notes,
            "problems": {"lost": verdict.lost, "invented": verdict.invented, "run_twice": verdict.run_twice,
                         "stuck": verdict.stuck, "start_missing": verdict.start_missing}}


def print_report(out: dict[str, Any]) -> None:
    gaps = out["time_gaps"]
    print(f"faults applied: {out['faults']} ({', '.join(f'{n} {k}' for k, n in sorted(out['faults_by_kind'].items()))})")
    if out["users"]:
        print(f"users: {', '.join(out['users'])}; memory limit {out['mem']} bytes per job, "
              f"{out['hogs']} job(s) allocating past it")
    print(f"jobs: {out['jobs']} ({', '.join(f'{n} {s}' for s, n in sorted(out['by_state'].items()))}), "
          f"executions: {out['executions']}, controller starts: {out['controller_starts']}")
    for key, label in (("finish_s", "recorded finish - job's own end"), ("start_s", "job's own start - recorded start")):
        if gaps[key]:
            g = gaps[key]
            print(f"{label}: min {g['min'] * 1e3:.1f} ms, median {g['median'] * 1e3:.1f} ms, max {g['max'] * 1e3:.1f} ms")
    for note in out["notes"]:
        print(f"note: {note}")
    for crash in out["crashes"]:
        print(f"crash: {crash}")
    for kind, items in out["problems"].items():
        for item in items[:20]:
            print(f"{kind}: {item}")
        if len(items) > 20:
            print(f"{kind}: ... and {len(items) - 20} more")
    print(f"VERDICT: {out['verdict']}: {out['lost']} lost, {out['invented']} invented, {out['run_twice']} run twice, "
          f"{out['stuck']} stuck, {len(out['crashes'])} crashed; {out['jobs']} jobs, seed {out['seed']} "
          f"(replay: --seed {out['seed']})")
    if out["start_missing"]:
        print(f"FAIL also because the start time is missing on {out['start_missing']} terminal job(s) "
              f"(issue #9, item 6)")


def dumps(out: dict[str, Any]) -> str:
    return json.dumps(out)
