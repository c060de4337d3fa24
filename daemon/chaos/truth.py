"""Jobs that record their own truth, and the verdict that compares it with the controller's record.

Every execution of a chaos job is a ``sh -c`` script that

1. creates ``<name>.<pid>.begin`` in the truth directory (a shell builtin, so
   an execution that is killed at once still leaves its mark),
2. takes its start time (``date +%s.%N``), sleeps, takes its end time,
3. reads which attempt it is from its own stdout (the agent opens
   ``jobs/<job>.<attempt>.stdout`` as fd 1 of every attempt),
4. writes ``<name>.<pid>.end`` atomically (a temporary file renamed into
   place): name, stdout path, pid, start time, chosen outcome, end time,
5. exits with its chosen exit code, or kills itself with its chosen signal.

The supervisor takes ``started_at`` just before it forks the job and
``finished_at`` as soon as ``waitid`` reports the job's end, so for a true
record ``started_at <= own start`` and ``own end <= finished_at``, each gap
being process start-up or exit (milliseconds, up to seconds on a loaded
machine): the verdict requires them in ``[0, FINISH_SLACK]`` and ``[0, START_SLACK]``
and reports the
largest seen.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from reckon.daemon.chaos.schedule import ChaosJob

FINISH_SLACK = 1.0  # seconds: the largest gap accepted between a job's own end and the recorded finish
START_SLACK = 2.0  # seconds: ... between the recorded start and the job's own start (fork + exec of sh, date)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def job_command(job: ChaosJob, truth_dir: Path, mem: int | None = None) -> list[str]:
    """The job's script; a hog (``job.hog``, with ``mem`` its limit) ends in an allocation of twice
    its limit, in its main process, which only the agent's memory limit stops (no end record)."""
    d, n = str(truth_dir), job.name
    if job.hog:
        if mem is None:
            raise ValueError(f"job {n} is a memory hog, but the run sets no --mem")
        # dd reads /dev/zero into one buffer of bs bytes: every page of it is touched.
        return ["sh", "-c", f": > {d}/{n}.$$.begin; sleep {job.sleep}; "
                            f"exec dd if=/dev/zero of=/dev/null bs={2 * mem} count=1 2>/dev/null"]
    outcome = f"exit:{job.exit_code}" if job.signal is None else f"signal:{job.signal}"
    end = f"exit {job.exit_code}" if job.signal is None else f"kill -{job.signal} $$"
    script = (f": > {d}/{n}.$$.begin; b=$(date +%s.%N); sleep {job.sleep}; e=$(date +%s.%N); "
              f"o=$(readlink /proc/$$/fd/1); u=$(id -u); "
              f"printf '%s %s %s %s %s %s %s\\n' {n} \"$o\" $$ \"$b\" {outcome} \"$e\" $u > {d}/.{n}.$$.tmp "
              f"&& mv {d}/.{n}.$$.tmp {d}/{n}.$$.end; {end}")
    return ["sh", "-c", script]


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """One execution's own record (an ``.end`` file)."""

    name: str
    agent: str     # the agent whose jobs/ directory held its stdout
    job: str       # the job id and attempt the agent ran it as
    attempt: int
    pid: int
    started: float
    exit_code: int | None
    signal: int | None
    finished: float
    uid: int | None = None  # the uid it ran as (None: a record without one)


def parse_end(line: str) -> Execution:
    fields = line.split()
    name, stdout, pid, started, outcome, finished = fields[:6]
    if len(fields) not in (6, 7):
        raise ValueError(f"an end record has 6 or 7 fields, not {len(fields)}")
    jobs_dir = Path(stdout).parent
    job, attempt, _ = Path(stdout).name.rsplit(".", 2)
    kind, _, value = outcome.partition(":")
    return Execution(name=name, agent=jobs_dir.parent.name, job=job, attempt=int(attempt), pid=int(pid),
                     started=float(started), exit_code=int(value) if kind == "exit" else None,
                     signal=int(value) if kind == "signal" else None, finished=float(finished),
                     uid=int(fields[6]) if len(fields) == 7 else None)


@dataclass
class Truth:
    begins: dict[str, int] = field(default_factory=dict)               # name -> executions begun
    ends: dict[str, list[Execution]] = field(default_factory=dict)     # name -> executions ended by themselves
    unreadable: list[str] = field(default_factory=list)


def read_truth(truth_dir: Path) -> Truth:
    truth = Truth()
    for entry in os.scandir(truth_dir):
        if entry.name.startswith("."):
            continue  # a temporary file: its execution was killed before the rename
        name, _, rest = entry.name.partition(".")
        if rest.endswith(".begin"):
            truth.begins[name] = truth.begins.get(name, 0) + 1
        elif rest.endswith(".end"):
            try:
                execution = parse_end(Path(entry.path).read_text())
            except (OSError, ValueError) as exc:
                truth.unreadable.append(f"{entry.name}: {exc}")
                continue
            truth.ends.setdefault(name, []).append(execution)
    return truth


@dataclass
class Verdict:
    jobs: int = 0
    lost: list[str] = field(default_factory=list)        # acknowledged but unknown, or ran and not recorded
    invented: list[str] = field(default_factory=list)    # an outcome (or job) no execution of it produced
    run_twice: list[str] = field(default_factory=list)   # more than one execution of one job
    stuck: list[str] = field(default_factory=list)       # not terminal after healing, and never ended
    start_missing: list[str] = field(default_factory=list)  # terminal and true, but no start time recorded
    finish_gaps: list[float] = field(default_factory=list)  # recorded finished_at - own end, seconds
    start_gaps: list[float] = field(default_factory=list)   # own start - recorded started_at, seconds
    by_state: dict[str, int] = field(default_factory=dict)
    executions: int = 0

    @property
    def passed(self) -> bool:
        # A terminal job without its start time fails too: the start is part of the truth (issue #9, item 6).
        return not (self.lost or self.invented or self.run_twice or self.stuck or self.start_missing)

    def counts(self) -> dict[str, int]:
        return {"jobs": self.jobs, "executions": self.executions, "lost": len(self.lost),
                "invented": len(self.invented), "run_twice": len(self.run_twice), "stuck": len(self.stuck),
                "start_missing": len(self.start_missing)}

    def gaps(self) -> dict[str, dict[str, float] | None]:
        def summary(values: list[float]) -> dict[str, float] | None:
            if not values:
                return None
            return {"min": min(values), "median": statistics.median(values), "max": max(values)}
        return {"finish_s": summary(self.finish_gaps), "start_s": summary(self.start_gaps)}


def judge(planned: list[ChaosJob], acknowledged: set[str], recorded: list[dict], truth: Truth,
          finish_facts: dict[str, int], uids: dict[str, int] | None = None) -> Verdict:
    """Compare every planned job's record (the controller's ``jobs`` objects) with its own truth.
    ``uids``: each submitting user's uid (a run with --users): a job's record must name its
    submitter and its execution must have run as that uid."""
    verdict = Verdict(jobs=len(planned), executions=sum(truth.begins.values()))
    by_name: dict[str, list[dict]] = {}
    for job in recorded:
        by_name.setdefault(job["name"], []).append(job)
        verdict.by_state[job["state"]] = verdict.by_state.get(job["state"], 0) + 1
    planned_names = {j.name for j in planned}
    for name in sorted(set(by_name) - planned_names):
        verdict.invented.append(f"{name}: a job this run never submitted")
    for want in planned:
        records = by_name.get(want.name, [])
        ends = truth.ends.get(want.name, [])
        begins = truth.begins.get(want.name, 0)
        if begins > 1 or len(ends) > 1:
            runs = ", ".join(f"{e.job}.{e.attempt} on {e.agent} pid {e.pid}" for e in ends)
            verdict.run_twice.append(f"{want.name}: {max(begins, len(ends))} executions ({runs})")
        if not records:
            if want.name in acknowledged or ends:
                verdict.lost.append(f"{want.name}: {'acknowledged' if want.name in acknowledged else 'ran'}"
                                    f" but unknown to the controller")
            else:
                verdict.stuck.append(f"{want.name}: never submitted")
            continue
        if len(records) > 1:
            verdict.invented.append(f"{want.name}: {len(records)} jobs of one submission "
                                    f"({', '.join(r['id'] for r in records)})")
        job = records[0]
        facts = finish_facts.get(job["id"], 0)
        if want.user is not None and job.get("user") != want.user:
            verdict.invented.append(f"{want.name} (job {job['id']}): owned by {job.get('user')!r}, "
                                    f"submitted by {want.user!r}")
        if want.hog:
            _judge_hog(verdict, want, job, facts, begins, ends)
            continue
        if job["state"] not in TERMINAL:
            (verdict.lost if ends else verdict.stuck).append(
                f"{want.name} (job {job['id']}): still {job['state']} attempt {job['attempt']}"
                + (f" on {job['agent']}" if job["agent"] else "") + (", though it ended" if ends else ""))
            continue
        if facts != 1:
            verdict.invented.append(f"{want.name} (job {job['id']}): {facts} terminal facts, not one")
        if len(ends) != 1:
            if not ends:
                verdict.invented.append(f"{want.name} (job {job['id']}): {job['state']} exit {job['exit_code']} "
                                        f"signal {job['signal']}, but no execution ended by itself "
                                        f"({begins} begun)")
            continue
        run = ends[0]
        expected_state = "COMPLETED" if run.exit_code == 0 else "FAILED"
        wrong = []
        if (job["state"], job["exit_code"], job["signal"]) != (expected_state, run.exit_code, run.signal):
            wrong.append(f"{job['state']} exit {job['exit_code']} signal {job['signal']}, "
                         f"ran {expected_state} exit {run.exit_code} signal {run.signal}")
        if (run.exit_code, run.signal) != (want.exit_code, want.signal):
            wrong.append(f"the execution chose exit {run.exit_code} signal {run.signal}, planned "
                         f"{want.exit_code} {want.signal}")
        if uids is not None and want.user is not None and run.uid != uids[want.user]:
            wrong.append(f"ran as uid {run.uid}, submitted by {want.user} (uid {uids[want.user]})")
        if (job["id"], job["attempt"], job["agent"]) != (run.job, run.attempt, run.agent):
            wrong.append(f"recorded {job['id']}.{job['attempt']} on {job['agent']}, ran as "
                         f"{run.job}.{run.attempt} on {run.agent}")
        finish_gap = None if job["finished_at"] is None else job["finished_at"] - run.finished
        if finish_gap is None or not 0 <= finish_gap <= FINISH_SLACK:
            wrong.append(f"finished_at {job['finished_at']}, own end {run.finished:.6f}")
        else:
            verdict.finish_gaps.append(finish_gap)
        if job["started_at"] is None:
            verdict.start_missing.append(f"{want.name} (job {job['id']})")
        else:
            start_gap = run.started - job["started_at"]
            if not 0 <= start_gap <= START_SLACK:
                wrong.append(f"started_at {job['started_at']}, own start {run.started:.6f}")
            else:
                verdict.start_gaps.append(start_gap)
        if wrong:
            verdict.invented.append(f"{want.name} (job {job['id']}): " + "; ".join(wrong))
    return verdict


def _judge_hog(verdict: Verdict, want: ChaosJob, job: dict, facts: int, begins: int, ends: list) -> None:
    """A job that allocates past its limit: run once, stopped by the limit, FAILED reason oom."""
    if job["state"] not in TERMINAL:
        verdict.stuck.append(f"{want.name} (job {job['id']}): still {job['state']}")
        return
    if facts != 1:
        verdict.invented.append(f"{want.name} (job {job['id']}): {facts} terminal facts, not one")
    if ends:
        verdict.invented.append(f"{want.name} (job {job['id']}): a memory hog ended by itself: its limit held nothing")
    if begins == 0:
        verdict.invented.append(f"{want.name} (job {job['id']}): {job['state']} reason {job.get('reason')}, "
                                f"but it never began")
    elif (job["state"], job.get("reason")) != ("FAILED", "oom"):
        verdict.invented.append(f"{want.name} (job {job['id']}): a memory hog recorded {job['state']} "
                                f"reason {job.get('reason')!r}, not FAILED reason 'oom'")
    if job["started_at"] is None:
        verdict.start_missing.append(f"{want.name} (job {job['id']})")
