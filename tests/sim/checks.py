"""The invariants the simulation checks against the world's truth (docs/invariants.md, "Daemon simulation").

Each check returns a list of violations, every one starting with its
invariant ID; ``Checker`` keeps what must hold across steps (terminal outcomes
seen before).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reckon.model import facts as F
from reckon.model.jobs import JobRecord, JobState
from reckon.model.state import ControllerState

from tests.model import resource_checks

from tests.sim.world import Process, World, submission_of

OPERATOR_FORGOT = "agent forgotten by the operator"  # model.controller's requeue reason for `reckon forget`


def _processes_of(world: World, job: JobRecord) -> list[Process]:
    """The world's processes of this job's current attempt, of this very submission."""
    sub = submission_of(job.spec)
    return [p for p in world.processes.values()
            if p.job == job.id and p.attempt == job.attempt and p.submission == sub]


@dataclass
class Checker:
    world: World
    terminal_seen: dict[int, tuple] = field(default_factory=dict)  # submission -> (state, outcome)
    # Every requeue the log has shown, (job, attempt) -> reason: a rollback erases facts from the
    # log, not from what happened (an operator's forget stays allowed), and a requeue it erased
    # that the restored copy makes again is the same requeue (one allowance, not two).
    requeued: dict[tuple[str, int], str] = field(default_factory=dict)

    def safety(self, jobs: dict[str, JobRecord], facts: list[F.Fact]) -> list[str]:
        """What must hold after every step, faults or not."""
        return [*self.run_at_most_once(facts), *self.true_outcome(jobs), *self.true_start_time(jobs),
                *self.terminal_stable(jobs)]

    def resources(self, state: ControllerState, facts: list[F.Fact]) -> list[str]:
        """INV-NO-OVERCOMMIT and INV-GPU-ONCE on the controller's live state (tests/model/resource_checks.py)."""
        return [*resource_checks.no_overcommit(state, facts), *resource_checks.gpu_once(state, facts)]

    def run_at_most_once(self, facts: list[F.Fact]) -> list[str]:
        """INV-SIM-RUN-AT-MOST-ONCE: a submission runs at most once, unless the operator allowed it
        (``reckon forget`` of an agent gone for good requeues its jobs).  A requeue of an attempt that
        never started allows nothing: the next attempt is the first run."""
        runs: dict[int, list[Process]] = {}
        for proc in self.world.processes.values():
            runs.setdefault(proc.submission, []).append(proc)
        for fact in facts:
            if isinstance(fact, F.JobRequeued):
                self.requeued.setdefault((fact.job, fact.attempt), fact.reason)
        justified: dict[str, int] = {}
        for (job, _attempt), reason in self.requeued.items():
            if reason == OPERATOR_FORGOT:
                justified[job] = justified.get(job, 0) + 1
        out = []
        for sub, procs in sorted(runs.items()):
            allowed = 1 + justified.get(procs[0].job, 0)
            if len(procs) > allowed:
                where = ", ".join(f"{p.job}.{p.attempt} on {p.host} at t={p.started_fake:.2f}" for p in procs[:6])
                where += ", ..." if len(procs) > 6 else ""
                out.append(f"INV-SIM-RUN-AT-MOST-ONCE: submission {sub} ran {len(procs)} times ({where})")
        return out

    def true_outcome(self, jobs: dict[str, JobRecord]) -> list[str]:
        """INV-TRUE-OUTCOME: a recorded outcome is the end of a process of that (job, attempt) and submission."""
        out = []
        for job in jobs.values():
            if job.exit_code is None and job.signal is None:  # no outcome (a cancel before it ran has a time only)
                continue
            recorded = (job.exit_code, job.signal, job.finished_at)
            truth = [(p.exit_code, p.signal, p.finished_at) for p in _processes_of(self.world, job) if not p.alive]
            if recorded not in truth:
                others = [f"{p.job}.{p.attempt} submission {p.submission} on {p.host}: "
                          f"{(p.exit_code, p.signal, p.finished_at)}"
                          for p in self.world.processes.values() if p.job == job.id]
                out.append(f"INV-TRUE-OUTCOME: job {job.id} (submission {submission_of(job.spec)}) attempt "
                           f"{job.attempt} recorded {recorded}; the world's processes of that job: {others}")
        return out

    def true_start_time(self, jobs: dict[str, JobRecord]) -> list[str]:
        """INV-TRUE-START-TIME: a recorded start time is when a process of that (job, attempt) started."""
        out = []
        for job in jobs.values():
            if job.started_at is None:
                continue
            if job.started_at not in [p.started_at for p in _processes_of(self.world, job)]:
                out.append(f"INV-TRUE-START-TIME: job {job.id} attempt {job.attempt} recorded start "
                           f"{job.started_at}, no process of it started then")
        return out

    def rolled_back(self) -> None:
        """The operator restored an older controller state: what it decided after that copy is
        forgotten, by the operator's choice.  Outcomes come back from the agents (and must be the
        same), but a cancel of a job that had not run is gone: it may now run."""
        # An outcome is an exit code or a signal (a cancel before the job ran has its time only).
        self.terminal_seen = {sub: seen for sub, seen in self.terminal_seen.items()
                              if seen[1] is not None or seen[2] is not None}

    def terminal_stable(self, jobs: dict[str, JobRecord]) -> list[str]:
        """INV-TERMINAL-STABLE: a submission's terminal state and outcome never change."""
        out = []
        for job in jobs.values():
            if not job.terminal:
                continue
            now = (job.state, job.exit_code, job.signal, job.finished_at)
            before = self.terminal_seen.setdefault(submission_of(job.spec), now)
            if before != now:
                out.append(f"INV-TERMINAL-STABLE: job {job.id} was {before}, is now {now}")
        return out

    def settled(self, jobs: dict[str, JobRecord], agents_of: dict[str, str]) -> list[str]:
        """After the faults stop and the cluster had time to settle (``agents_of``: host -> agent name)."""
        out = []
        by_sub = {submission_of(j.spec): j for j in jobs.values()}
        for proc in self.world.alive():
            job = by_sub.get(proc.submission)
            if job is not None and (job.cancel_requested or job.state is JobState.CANCELLED):
                out.append(f"INV-SIM-CANCEL-STOPS-PROCESS: job {job.id} (submission {proc.submission}) is "
                           f"{job.state.value} with a cancel requested, and its process {proc.job}.{proc.attempt} "
                           f"on {proc.host} (started t={proc.started_fake:.2f}) still runs")
            elif (job is None or job.id != proc.job or job.state is not JobState.RUNNING
                  or job.attempt != proc.attempt or job.agent != agents_of.get(proc.host)):
                state = "unknown to the controller" if job is None else (
                    f"{job.id} {job.state.value} attempt {job.attempt} on {job.agent}")
                out.append(f"INV-LIVENESS-AGREE: process {proc.job}.{proc.attempt} (submission {proc.submission}) "
                           f"runs on {proc.host}, but its job is {state}")
        return out

    def finished(self, jobs: dict[str, JobRecord]) -> list[str]:
        """INV-SIM-NOTHING-STUCK: once every process has ended, every job is terminal;
        INV-LIVENESS-OUTCOME: one that ran has the world's outcome (checked by ``true_outcome``)."""
        out = [f"INV-SIM-NOTHING-STUCK: job {j.id} (submission {submission_of(j.spec)}) is still "
               f"{j.state.value} (attempt {j.attempt}, agent {j.agent})" for j in jobs.values() if not j.terminal]
        for job in jobs.values():
            ran = [p for p in _processes_of(self.world, job) if not p.alive]
            if (job.terminal and ran and job.exit_code is None and job.signal is None
                    and job.state is not JobState.CANCELLED):
                out.append(f"INV-LIVENESS-OUTCOME: job {job.id} ran (ended {ran[0].finished_at}) but is "
                           f"{job.state.value} with no outcome")
        return out
