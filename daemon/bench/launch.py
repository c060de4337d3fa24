"""`reckon bench launch`: the agent's launch path alone, without controller or protocol.

One ``JobRunner`` (the agent's: its launcher, a supervisor per job, the
job's files in a fresh state directory) runs N ``true`` jobs, at most C at a
time, and the figure is jobs/s from the first launch to the last exit.  The
CPU of the whole path (the runner's process, the launcher, the supervisors
and the jobs) is taken from ``getrusage`` of this process and its reaped
children: it is what one node pays per job, whatever the controller does.
"""

from __future__ import annotations

import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

from reckon.model.jobs import JobSpec

from reckon.daemon.agent.runner import JobRunner


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def launch_run(jobs: int, concurrency: int, keep: bool = False) -> tuple[float, float]:
    """(jobs/s, CPU seconds per job) of one run."""
    base = Path(tempfile.mkdtemp(prefix="reckon-bench-launch-"))
    spec = JobSpec(name="bench", command=("true",))
    try:
        # The runner's exit reaps the launcher, so every process of the run is in the CPU figure.
        cpu0 = _cpu()
        async with JobRunner(base / "agent") as runner:
            free = trio.Semaphore(concurrency)
            all_done = trio.Event()

            async def collect() -> None:
                done = 0
                async for outcome in runner.exits:
                    if getattr(outcome, "exit_code", None) != 0:
                        raise RuntimeError(f"a bench job did not exit 0: {outcome}")
                    done += 1
                    free.release()
                    if done == jobs:
                        all_done.set()
                        return

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect)
                for i in range(1, jobs + 1):
                    await free.acquire()
                    await runner.start(str(i), 1, spec)
                await all_done.wait()
            elapsed = time.perf_counter() - t0
        return jobs / elapsed, (_cpu() - cpu0) / jobs
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"kept {base}", file=sys.stderr)
