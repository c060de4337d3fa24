"""`reckon demo`: the failure demo on loopback, with a verdict.

A controller and two agents run as separate processes in a temporary
directory.  About 40 jobs with mixed outcomes run; mid-run the controller is
killed with SIGKILL and restarted, and one agent is killed while it runs jobs
and restarted.  Every job writes the moment it ends into a truth file, so the
verdict can check that every outcome was recorded exactly once (one finish
fact per job in the controller's log) with the exit code, signal and finish
time the job really had.  Exit status 0 only when the verdict holds.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from reckon.daemon.client import Client, ClientError
from reckon.daemon.procs import LocalCluster

AGENT_ARGS = ("--kill-grace", "2")
FINISH_TOLERANCE = 1.0  # seconds between the job's own last timestamp and the recorded finish


@dataclass(frozen=True)
class DemoJob:
    name: str
    sleep: float
    exit_code: int | None
    signal: int | None

    def command(self, truth_dir: Path) -> list[str]:
        truth = truth_dir / self.name
        end = "kill -KILL $$" if self.signal else f"exit {self.exit_code}"
        return ["sh", "-c", f"sleep {self.sleep}; date +%s.%N > {truth}; {end}"]


def demo_jobs(count: int) -> list[DemoJob]:
    jobs = []
    for i in range(count):
        sleep = [0.2, 0.5, 1.0, 2.0, 3.5, 5.0][i % 6]
        if i % 10 == 7:
            jobs.append(DemoJob(f"job-{i:02d}", sleep, None, 9))
        elif i % 4 == 1:
            jobs.append(DemoJob(f"job-{i:02d}", sleep, 1 + i % 5, None))
        else:
            jobs.append(DemoJob(f"job-{i:02d}", sleep, 0, None))
    return jobs


async def _query(cluster: LocalCluster, op: str, **kw) -> dict | None:
    try:
        async with Client(cluster.url, None) as client:
            return await client.call(op, **kw)
    except ClientError:
        return None


def _progress(t: float, jobs: list[dict] | None, note: str) -> None:
    if jobs is None:
        print(f"  t={t:5.1f}s  controller unreachable  {note}", flush=True)
        return
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    states = "  ".join(f"{s.lower()} {counts.get(s, 0):2d}" for s in ("PENDING", "RUNNING", "COMPLETED", "FAILED"))
    print(f"  t={t:5.1f}s  {states}  {note}", flush=True)


async def _demo(args: argparse.Namespace, base: Path) -> int:
    truth_dir = base / "truth"
    truth_dir.mkdir()
    jobs = demo_jobs(args.jobs)
    cluster = LocalCluster(base)
    try:
        with trio.fail_after(120):
            return await _scenario(cluster, jobs, truth_dir, base)
    finally:
        cluster.stop_all()


async def _scenario(cluster: LocalCluster, jobs: list[DemoJob], truth_dir: Path, base: Path) -> int:
    print(f"reckon demo: a controller and 2 agents (4 slots each) in {base}")
    await cluster.start_controller()
    for name in ("agent-1", "agent-2"):
        await cluster.start_agent(name, 4, *AGENT_ARGS)
    async with Client(cluster.url, None) as client:
        specs = [{"name": j.name, "command": j.command(truth_dir), "cwd": None, "env": [], "slots": 1}
                 for j in jobs]
        ids = (await client.call("submit_many", specs=specs))["jobs"]
    by_id = dict(zip(ids, jobs))
    print(f"submitted {len(ids)} jobs: exit 0, non-zero exits, SIGKILL, sleeps of 0.2-5 s")
    t0 = time.monotonic()
    phase = "running"
    outage_start = restart_at = serving_after = recovered_at = None
    finished_in_outage: set[str] = set()
    agent_restarted = False
    while True:
        await trio.sleep(0.5)
        t = time.monotonic() - t0
        listing = await _query(cluster, "jobs") if phase != "down" else None
        note = ""
        if phase == "running" and t >= 2.0:
            cluster.kill("controller")
            outage_start, phase, note = time.time(), "down", "<- controller killed (SIGKILL)"
        elif phase == "down" and t >= 6.0:
            finished_in_outage = {p.name for p in truth_dir.iterdir()
                                  if float(p.read_text()) >= (outage_start or 0)}
            restart_at = time.monotonic()
            serving_after = await cluster.start_controller()
            phase, note = "recovering", f"<- controller restarted, serving after {serving_after:.2f}s"
        elif phase == "recovering" and listing is not None:
            final = {j["name"] for j in listing["jobs"] if j["state"] in ("COMPLETED", "FAILED")}
            if finished_in_outage <= final:
                recovered_at = time.monotonic()
                phase = "recovered"
                note = f"<- all {len(finished_in_outage)} outage completions recorded"
        if phase == "recovered" and not agent_restarted and listing is not None:
            busy = [j for j in listing["jobs"] if j["state"] == "RUNNING" and j["agent"] == "agent-2"]
            if busy:
                cluster.kill("agent-2")
                await cluster.start_agent("agent-2", 4, *AGENT_ARGS)
                agent_restarted = True
                note = f"<- agent-2 killed (SIGKILL) with {len(busy)} job(s) running, restarted"
            else:
                agent_restarted = True
        _progress(t, listing["jobs"] if listing else None, note)
        if listing is not None and phase == "recovered" and agent_restarted and all(
                j["state"] in ("COMPLETED", "FAILED", "CANCELLED") for j in listing["jobs"]):
            break
    final_jobs = (await _query(cluster, "jobs"))["jobs"]
    cluster.stop_all()
    finish_facts = await count_finish_facts(base / "controller")
    return _verdict(final_jobs, by_id, truth_dir, finish_facts, serving_after,
                    (recovered_at - restart_at) if recovered_at and restart_at else None, len(finished_in_outage))


async def count_finish_facts(state_dir: Path) -> dict[str, int]:
    from reckon.model.facts import JobFinished

    from reckon.daemon.store.facts import FactStore

    store = await FactStore.open(state_dir)
    try:
        _, facts, _ = await store.load()
    finally:
        await store.aclose()
    counts: dict[str, int] = {}
    for fact in facts:
        if isinstance(fact, JobFinished):
            counts[fact.job] = counts.get(fact.job, 0) + 1
    return counts


def _verdict(final: list[dict], by_id: dict[str, DemoJob], truth_dir: Path, finish_facts: dict[str, int],
             serving_after: float | None, recovery: float | None, outage_count: int) -> int:
    problems = []
    print()
    print(f"{'ID':>3}  {'NAME':8}  {'STATE':9}  {'EXIT':>4}  {'SIG':>3}  {'FINISHED (recorded)':19}  {'TRUTH-DELTA':>11}  FACTS")
    for job in sorted(final, key=lambda j: int(j["id"])):
        want = by_id[job["id"]]
        truth_file = truth_dir / want.name
        truth = float(truth_file.read_text()) if truth_file.exists() else None
        delta = None if truth is None or job["finished_at"] is None else job["finished_at"] - truth
        facts = finish_facts.get(job["id"], 0)
        expected_state = "COMPLETED" if want.exit_code == 0 else "FAILED"
        ok = (job["state"] == expected_state and job["exit_code"] == want.exit_code
              and job["signal"] == want.signal and delta is not None and 0 <= delta <= FINISH_TOLERANCE
              and facts == 1)
        if not ok:
            problems.append(f"{want.name}: state {job['state']} exit {job['exit_code']} signal {job['signal']} "
                            f"delta {delta} facts {facts} (wanted {expected_state} exit {want.exit_code} "
                            f"signal {want.signal}, one fact)")
        print(f"{job['id']:>3}  {want.name:8}  {job['state']:9}  {str(job['exit_code'] if job['exit_code'] is not None else '-'):>4}  "
              f"{str(job['signal'] or '-'):>3}  {time.strftime('%H:%M:%S', time.localtime(job['finished_at'] or 0))}"
              f".{int((job['finished_at'] or 0) % 1 * 1000):03d}         {'-' if delta is None else f'{delta * 1000:8.1f} ms'}  {facts:>5}"
              f"{'' if ok else '  <-- WRONG'}")
    print()
    print(f"controller restart: serving {serving_after:.2f}s after process start" if serving_after else "")
    if recovery is not None:
        print(f"recovery: the {outage_count} completions made during the outage were recorded "
              f"{recovery:.2f}s after the restart began")
    if problems:
        print(f"VERDICT: FAIL: {len(problems)} job(s) wrong")
        for p in problems:
            print("  " + p)
        return 1
    print(f"VERDICT: PASS: all {len(final)} outcomes recorded exactly once, with the exit code, signal and "
          f"finish time each job really had (within {FINISH_TOLERANCE:.0f}s of its own last timestamp)")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed demo still stops its cluster
    base = Path(tempfile.mkdtemp(prefix="reckon-demo-"))
    try:
        return trio.run(_demo, args, base)
    finally:
        if args.keep:
            print(f"(kept {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)
