"""What a chaos run does, drawn up front from its seed: the jobs and the faults.

Everything random in a run comes from one ``random.Random(seed)`` here, before
anything starts, so ``--seed`` replays the same job mix and the same fault
schedule (the same faults, targets, offsets and durations; the processes'
own timing still varies from run to run).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

CONTROLLER = "controller"


class FaultKind(enum.Enum):
    KILL = "kill"          # SIGKILL (a crash), restarted after the fault's duration
    TERM = "term"          # SIGTERM (a clean stop), restarted after the fault's duration
    STOP = "stop"          # SIGSTOP, SIGCONT after the fault's duration
    CUT = "cut"            # the agent's connections closed and refused (agents only)
    STALL = "stall"        # the agent's connections kept open, no byte moves (agents only)
    PARTITION = "partition"  # every agent's connections cut at once (target: the controller)


#: Relative weights of the fault kinds, per target.
CONTROLLER_FAULTS = ((FaultKind.KILL, 3), (FaultKind.TERM, 2), (FaultKind.STOP, 2), (FaultKind.PARTITION, 1))
AGENT_FAULTS = ((FaultKind.KILL, 3), (FaultKind.TERM, 2), (FaultKind.STOP, 2), (FaultKind.CUT, 2),
                (FaultKind.STALL, 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    at: float        # seconds after the first submission
    target: str      # CONTROLLER or an agent's name
    kind: FaultKind
    duration: float  # seconds until the target is healed (restarted, continued, reconnected)

    def __post_init__(self) -> None:
        if not (self.at >= 0 and self.duration > 0):
            raise ValueError(f"a fault needs at >= 0 and duration > 0, got {self.at}, {self.duration}")
        if self.target == CONTROLLER and self.kind in (FaultKind.CUT, FaultKind.STALL):
            raise ValueError(f"{self.kind.value} applies to agents, not the controller")

    def describe(self) -> str:
        return f"t={self.at:6.1f}s  {self.kind.value:9} {self.target:10} for {self.duration:4.1f}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosJob:
    name: str               # unique within the run: how a job's truth records find it
    submit_at: float        # seconds after the first submission
    sleep: float            # seconds the job sleeps between its two timestamps
    exit_code: int | None   # what it chooses to exit with ...
    signal: int | None      # ... or the signal it kills itself with
    user: str | None = None  # who submits it (--users; None: token mode, the run's own user)
    hog: bool = False        # it allocates past its --mem: the agent's limit must end it, FAILED oom

    def __post_init__(self) -> None:
        if (self.exit_code is None) == (self.signal is None):
            raise ValueError(f"job {self.name}: exactly one of exit_code and signal")


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    seed: int
    jobs: tuple[ChaosJob, ...]
    faults: tuple[Fault, ...]


SLEEPS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0)
EXIT_CODES = ((0, 70), (1, 10), (2, 5), (3, 5), (42, 5))  # (code, weight); signals take the rest (5)


def _weighted(rng: random.Random, pairs: tuple) -> object:
    items, weights = zip(*pairs)
    return rng.choices(items, weights)[0]


def make_plan(*, seed: int, duration: float, agents: list[str], jobs: int, fault_every: float,
              max_outage: float, users: tuple[str, ...] = (), hog_share: float = 0.0) -> Plan:
    """Jobs spread evenly over ``duration``; faults as a Poisson process (mean gap ``fault_every``).

    A fault is drawn only for a target that is healthy at that moment, so two
    faults never overlap on one target (they do overlap across targets).  With ``users``, each
    job's submitter is drawn among them, and ``hog_share`` of the jobs allocate past their
    memory limit; a plan without them draws exactly what it drew before (a seed replays).
    """
    rng = random.Random(seed)
    people = random.Random(seed ^ 0x5EED)  # a stream of its own: the jobs and faults stay the seed's
    chaos_jobs = []
    for i in range(jobs):
        code = _weighted(rng, EXIT_CODES + ((None, 5),))
        user = people.choice(users) if users else None
        hog = hog_share > 0 and people.random() < hog_share
        chaos_jobs.append(ChaosJob(name=f"chaos-{i:06d}", submit_at=duration * i / max(jobs, 1),
                                   sleep=rng.choice(SLEEPS), exit_code=code, signal=9 if code is None else None,
                                   user=user, hog=hog))
    faults = []
    busy_until = {target: 0.0 for target in (CONTROLLER, *agents)}
    t = rng.expovariate(1 / fault_every)
    while t < duration:
        target = rng.choice(list(busy_until))
        kind = _weighted(rng, CONTROLLER_FAULTS if target == CONTROLLER else AGENT_FAULTS)
        length = round(rng.uniform(0.3, max_outage), 1)
        # A partition touches every agent's link: it needs them all healthy, like the controller.
        needed = list(busy_until) if kind is FaultKind.PARTITION else [target]
        if all(busy_until[n] <= t for n in needed):
            faults.append(Fault(at=round(t, 2), target=target, kind=kind, duration=length))
            for n in needed:
                busy_until[n] = t + length + 1.0  # a second to come back before the next fault
        t += rng.expovariate(1 / fault_every)
    return Plan(seed=seed, jobs=tuple(chaos_jobs), faults=tuple(faults))
