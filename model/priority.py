"""Job priorities (issue #22): Slurm's multifactor priority and classic fair share, pure.

A pending job's priority is ``int(sum(weight * factor)) - nice + adjustment``:

- age: ``min(queued time / age_max, 1)``;
- fair share: ``2 ** (-U / S)`` (Slurm's classic formula), ``U`` the owner's decayed usage over
  everyone's, ``S`` the owner's share over the shares of every user known (configured, or with
  usage); 1 for a user who has used nothing (or when nobody has);
- partition: its priority tier over the highest tier of the partitions (0 without partitions);
- job size: favours small jobs, ``1 - cpus / cluster CPUs`` (clamped to [0, 1]): on a cluster
  where a big job waits for free CPUs anyway, a small one going first costs it little and cuts
  the queue's slowdown (Slurm's ``PriorityFavorSmall``);
- nice: the user's own ``--nice`` (the spec's; Slurm's ``priority -= nice``), and the operator's
  adjustment (``reckon update JOB --priority N``: the record's ``priority_adjust``).

Usage (``UsageTable``) is CPU-seconds decayed with a half-life, kept by ``state.apply`` from the
facts alone (the fact that ends an attempt -- ``JobFinished``, ``JobRequeued``,
``JobCancelConfirmed`` -- with the attempt's CPUs, start and that fact's end time), so the table
after a replay is the one the live controller had.  Decay is computed from the facts' times and
the ``now`` the priorities are asked at: no clock is read.  A RUNNING attempt adds what it used so far, from its
record (start time, CPUs), at the time the priorities are computed.

Priorities themselves are volatile: ``Priorities`` recomputes them from the state and ``now`` (on
submit, and every ``recompute_every`` seconds, at most ``recompute_batch`` jobs per call), and
the ones that changed reach the scheduler as notes (its queue is keyed by ``-priority``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

# Job records and partitions are taken as they come (typed Any): model/jobs.py imports this
# module for its checks, so this one imports neither.
JobRecord = Any
Partition = Any

DAY = 86400.0
NICE_MAX = 10000  # Slurm's range for --nice: -10000..10000 (negative only for operators)
ADJUST_MAX = 1 << 30  # the operator's adjustment, either way
_LN2 = math.log(2.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityConfig:
    """The weights of the factors (each factor is in [0, 1]) and the fair share's parameters.

    ``daemon/bench/trace.py`` turns priorities off by zeroing every ``weight_*`` field."""

    weight_fairshare: int = 10000
    # Age outweighs fair share after half a day: on the KTH SP2 trace (docs/performance.md) a
    # larger age weight over a shorter age_max cut the mean wait and kept the worst user's wait
    # from growing (fair share alone starved the heaviest users' jobs).
    weight_age: int = 20000
    weight_partition: int = 1000
    weight_jobsize: int = 0  # off: it would reorder jobs of one user by size (set it to favour small jobs)
    age_max: float = DAY  # seconds of queueing at which the age factor reaches 1
    half_life: float = 7 * DAY  # usage halves every this many seconds
    recompute_every: float = 30.0  # seconds between two recomputations of every pending job's priority
    # Jobs recomputed per controller call at most: a sweep over 100k pending jobs spans 50 ticks of
    # ~50 ms each (docs/performance.md), rather than a few ticks of seconds each.
    recompute_batch: int = 2000
    shares: tuple[tuple[str, int], ...] = ()  # (user, share), sorted; a user not named has share 1

    def __post_init__(self) -> None:
        for name in ("weight_fairshare", "weight_age", "weight_partition", "weight_jobsize"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= 1 << 24:
                raise ValueError(f"priority {name} must be an integer in 0..{1 << 24}, got {value!r}")
        for name in ("age_max", "half_life", "recompute_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise ValueError(f"priority {name} must be a positive number of seconds, got {value!r}")
        if type(self.recompute_batch) is not int or self.recompute_batch < 1:
            raise ValueError(f"priority recompute_batch must be a positive integer, got {self.recompute_batch!r}")
        if not isinstance(self.shares, tuple):
            raise ValueError("priority shares must be a tuple of (user, share) pairs")
        previous = None
        for pair in self.shares:
            if (not isinstance(pair, tuple) or len(pair) != 2 or type(pair[0]) is not str or not pair[0]
                    or type(pair[1]) is not int or not 1 <= pair[1] <= 1 << 20):
                raise ValueError(f"priority shares: each is (user, share in 1..{1 << 20}), got {pair!r}")
            if previous is not None and pair[0] <= previous:
                raise ValueError(f"priority shares must be sorted by user, each once ({pair[0]!r})")
            previous = pair[0]

    @property
    def on(self) -> bool:
        return any((self.weight_fairshare, self.weight_age, self.weight_partition, self.weight_jobsize))


def check_nice(nice: Any) -> None:
    if type(nice) is not int or not -NICE_MAX <= nice <= NICE_MAX:
        raise ValueError(f"nice must be an integer in -{NICE_MAX}..{NICE_MAX}, got {nice!r}")


def check_adjust(value: Any) -> None:
    if type(value) is not int or not -ADJUST_MAX <= value <= ADJUST_MAX:
        raise ValueError(f"priority must be an integer in -{ADJUST_MAX}..{ADJUST_MAX}, got {value!r}")


# ---- usage: decayed CPU-seconds, from the facts -----------------------------------------------


def decay(value: float, since: float, now: float, half_life: float) -> float:
    """``value`` measured at ``since``, decayed to ``now``."""
    return value * 2.0 ** (-(now - since) / half_life) if now != since else value


def attempt_usage(cpus: int, start: float, end: float, half_life: float) -> float:
    """CPU-seconds of an attempt from ``start`` to ``end``, each second decayed to ``end``:
    ``cpus * integral of 2**(-(end - s) / h) ds``."""
    run = max(0.0, end - start)
    return cpus * half_life / _LN2 * (1.0 - 2.0 ** (-run / half_life))


@dataclass(slots=True)
class UsageTable:
    """Per-user decayed CPU-seconds: user -> [value, the time it is measured at].

    ``charge`` folds one ended attempt in at its end time; a value is decayed to the time of
    each charge (or the charge to the value's time, for an end reported out of order), so the
    table is a function of the facts in log order: the same live and after replay."""

    half_life: float = 7 * DAY
    users: dict[str, list[float]] = field(default_factory=dict)
    total: list[float] = field(default_factory=lambda: [0.0, 0.0])

    def charge(self, user: str, cpus: int, start: float, end: float) -> None:
        amount = attempt_usage(cpus, start, end, self.half_life)
        for cell in (self.users.setdefault(user, [0.0, end]), self.total):
            value, since = cell
            if end >= since:
                cell[0], cell[1] = decay(value, since, end, self.half_life) + amount, end
            else:
                cell[0] = value + decay(amount, end, since, self.half_life)

    def at(self, user: str, now: float) -> float:
        cell = self.users.get(user)
        return decay(cell[0], cell[1], now, self.half_life) if cell is not None else 0.0

    def total_at(self, now: float) -> float:
        return decay(self.total[0], self.total[1], now, self.half_life)

    def rows(self) -> dict[str, Any]:
        """The snapshot's form (and the digest's)."""
        return {"half_life": self.half_life, "total": list(self.total),
                "users": [[user, cell[0], cell[1]] for user, cell in sorted(self.users.items())]}

    @classmethod
    def from_rows(cls, data: Any) -> "UsageTable":
        if not isinstance(data, dict) or not isinstance(data.get("users"), list):
            raise ValueError("snapshot usage must be a map with users")
        table = cls(half_life=float(data["half_life"]), total=[float(v) for v in data["total"]])
        for user, value, since in data["users"]:
            table.users[str(user)] = [float(value), float(since)]
        return table

    def key(self) -> tuple:
        return (self.half_life, tuple(self.total), tuple((u, tuple(c)) for u, c in sorted(self.users.items())))


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageDecaySet:
    """The config's half-life at a start, which differs from the one recorded last: usage decays
    with this one from here on (what was used before stays as decayed so far).  A fact, so a
    replay, a restore and a standby decay usage exactly as the live controller did."""

    KIND: ClassVar[str] = "usage_decay_set"
    VERSION: ClassVar[int] = 1
    half_life: float

    def __post_init__(self) -> None:
        if isinstance(self.half_life, bool) or not isinstance(self.half_life, (int, float)) \
                or not 0 < self.half_life < 1e9:
            raise ValueError(f"half_life must be a positive number of seconds, got {self.half_life!r}")


# ---- factors ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Factors:
    """One job's factors (each in [0, 1]) and what they add up to: what ``reckon priority`` shows."""

    age: float
    fairshare: float
    partition: float
    jobsize: float
    nice: int
    adjust: int
    priority: int

    def to_dict(self) -> dict[str, Any]:
        return {"age": self.age, "fairshare": self.fairshare, "partition": self.partition,
                "jobsize": self.jobsize, "nice": self.nice, "adjust": self.adjust, "priority": self.priority}


@dataclass(slots=True)
class ShareView:
    """What every job's fair-share factor needs, computed once per recomputation: O(users)."""

    config: PriorityConfig
    usage: UsageTable
    now: float
    running: dict[str, float]  # user -> usage of its RUNNING attempts so far (decayed to now)
    total_usage: float
    total_shares: int
    max_tier: int
    cluster_cpus: int
    _cache: dict[str, float] = field(default_factory=dict)

    def fairshare(self, user: str | None) -> float:
        if user is None:
            return 1.0
        cached = self._cache.get(user)
        if cached is not None:
            return cached
        used = self.usage.at(user, self.now) + self.running.get(user, 0.0)
        if used <= 0.0 or self.total_usage <= 0.0:
            value = 1.0
        else:
            shares = dict(self.config.shares)
            share = shares.get(user, 1)
            total = self.total_shares + (0 if user in shares or user in self.usage.users else 1)
            value = 2.0 ** (-(used / self.total_usage) / (share / total))
        self._cache[user] = value
        return value


def share_view(config: PriorityConfig, usage: UsageTable, jobs: Iterable[JobRecord],
               partitions: dict[str, Partition], cluster_cpus: int, now: float) -> ShareView:
    """``jobs``: the RUNNING ones (their usage so far counts)."""
    running: dict[str, float] = {}
    for job in jobs:
        if job.owner is not None and job.started_at is not None:
            running[job.owner.user] = running.get(job.owner.user, 0.0) + attempt_usage(
                job.spec.slots, job.started_at, now, usage.half_life)
    shares = dict(config.shares)
    total_shares = sum(shares.values()) + sum(1 for user in usage.users if user not in shares)
    total_usage = usage.total_at(now) + sum(running.values())
    max_tier = max((p.priority_tier for p in partitions.values()), default=0)
    return ShareView(config, usage, now, running, total_usage, max(total_shares, 1), max_tier, cluster_cpus)


def factors(job: JobRecord, view: ShareView, tier: int | None) -> Factors:
    """The job's factors at ``view.now`` (``tier``: its partition's tier, None without partitions)."""
    c = view.config
    age = min(max(view.now - job.submitted_at, 0.0) / c.age_max, 1.0)
    fairshare = view.fairshare(job.owner.user if job.owner is not None else None)
    partition = tier / view.max_tier if tier is not None and view.max_tier > 0 else 0.0
    jobsize = min(max(1.0 - job.spec.slots / view.cluster_cpus, 0.0), 1.0) if view.cluster_cpus > 0 else 0.0
    nice, adjust = job.spec.nice, job.priority_adjust
    total = int(c.weight_age * age + c.weight_fairshare * fairshare + c.weight_partition * partition
                + c.weight_jobsize * jobsize) - nice + adjust
    return Factors(age, fairshare, partition, jobsize, nice, adjust, total)
