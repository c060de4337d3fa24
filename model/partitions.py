"""Partitions, as Slurm has them: named sets of agents with per-job limits, group access, a tier.

A partition names its agents by patterns (``Partition.nodes``): an agent's name, a Slurm hostlist
expression (``node[01-10,20]``: a zero-padded range keeps its width), a glob (``gpu*``), or ``ALL``.
Agents join at any time, so membership is a match of the name, never an expansion; an agent may be
in several partitions.  A cluster with no partition behaves as before: every job runs anywhere and
its ``partition`` stays None.

The durable record is the state's ``partitions`` map, changed only by facts (applied the same way
live and in replay):

- ``PartitionsConfigured``: the controller's config file at a start, recorded when it differs from
  the one recorded last: the partitions become exactly the file's.  A start with an unchanged file
  records nothing, so an operator's run-time changes survive restarts and failovers, and a file
  edited since wins (as ``scontrol reconfigure`` rereads slurm.conf).  The log alone says what the
  partitions are: replay, a standby and a restore need no config file to agree.
- ``PartitionSet``: an operator's ``reckon partition set NAME key=value ...`` (the whole new record).
- ``PartitionRemoved``: ``reckon partition remove NAME``.

At submit (``admit``) a job naming an unknown partition, one it may not use (``allow_groups``), one
not taking jobs (DRAIN, INACTIVE), or over the partition's per-job maxima is refused in one line, as
Slurm refuses at submit.  A job without a time limit gets the partition's ``default_time`` (else its
``max_time``, as in Slurm) written into its spec: the agent enforces it, and the log keeps it.  A job
without ``--partition`` gets the default partition's name in its spec, so changing the default later
moves no queued job.  ``hold_reason`` is why a queued job may not start now (the partition went DOWN,
its limits were lowered below the job): it stays PENDING with Slurm's reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from ._check import check_int, check_str
from .errors import LocalProtocolError, PermissionDenied
from .resources import MAX_GPUS, MAX_MEM, format_size

if TYPE_CHECKING:
    from .jobs import JobRecord, JobSpec
    from .permissions import Caller

STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")  # Slurm's partition states
# Whether each state queues new jobs / starts queued ones (slurm.conf(5) State=).
QUEUES = frozenset({"UP", "DOWN"})
STARTS = frozenset({"UP", "DRAIN"})
MAX_PATTERNS = 256
MAX_GROUPS = 256
MAX_PARTITION_TIME = 365 * 24 * 3600.0  # jobs.MAX_TIME_LIMIT
MAX_TIER = 65533  # Slurm's PriorityTier range
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9_.\-*?]*")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
# The fields ``reckon partition set`` may change (every one but the name), with their kinds.
KEYS = ("nodes", "default", "max_time", "default_time", "max_cpus_per_job", "max_mem_per_job",
        "max_gpus_per_job", "allow_groups", "priority_tier", "state")


def _split_top(text: str) -> list[str]:
    """``a[1-3,5],b`` -> [``a[1-3,5]``, ``b``]: commas outside brackets separate patterns."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [p.strip() for p in out if p.strip()]


def split_nodes(text: str) -> tuple[str, ...]:
    """A Slurm-style node list (``node[01-04],gpu*``) as patterns, each checked."""
    patterns = tuple(_split_top(text))
    for pattern in patterns:
        compile_pattern(pattern)
    return patterns


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> tuple[re.Pattern[str], tuple[tuple[tuple[int, int, int], ...], ...]] | None:
    """A node pattern as (regex, the ranges of each bracket as (low, high, width)); None for ALL.

    ``ValueError`` naming the pattern if it is not one.  A bracket holds numbers and ranges
    (``01-10,20``); a bound written with a leading zero fixes the width (``01`` matches ``01``, not
    ``1``), as Slurm's hostlists do."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a node pattern must be a non-empty string")
    if pattern == "ALL":
        return None
    parts: list[str] = []
    ranges: list[tuple[tuple[int, int, int], ...]] = []
    rest = pattern
    while rest:
        open_at = rest.find("[")
        literal, rest = (rest, "") if open_at < 0 else (rest[:open_at], rest[open_at:])
        if "]" in literal or not _PATTERN_CHARS.fullmatch(literal):
            raise ValueError(f"bad node pattern {pattern!r}: names are letters, digits, '_', '.', '-', "
                             "with '*', '?' and [ranges]")
        parts.append(re.escape(literal).replace(r"\*", ".*").replace(r"\?", "."))
        if not rest:
            break
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"bad node pattern {pattern!r}: a '[' without its ']'")
        inside, rest = rest[1:close], rest[close + 1:]
        bracket = []
        for item in inside.split(","):
            m = _RANGE.fullmatch(item.strip())
            if m is None:
                raise ValueError(f"bad node pattern {pattern!r}: [{inside}] must hold numbers or ranges (01-10)")
            low, high = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
            if int(low) > int(high):
                raise ValueError(f"bad node pattern {pattern!r}: range {item.strip()} goes down")
            width = len(low) if low.startswith("0") and len(low) > 1 else 0
            bracket.append((int(low), int(high), width))
        ranges.append(tuple(bracket))
        parts.append(r"(\d+)")
    return re.compile("".join(parts)), tuple(ranges)


def pattern_matches(pattern: str, name: str) -> bool:
    compiled = compile_pattern(pattern)
    if compiled is None:
        return True
    regex, ranges = compiled
    m = regex.fullmatch(name)
    if m is None:
        return False
    for digits, bracket in zip(m.groups(), ranges):
        value = int(digits)
        # A padded range (01-10) matches names of its width only; an unpadded one, no leading zero.
        if not any(low <= value <= high and (len(digits) == width if width else digits == str(value))
                   for low, high, width in bracket):
            return False
    return True


def _opt_positive_int(name: str, value: Any, maximum: int) -> None:
    if value is not None:
        check_int(name, value, minimum=1, maximum=maximum)


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """One partition (slurm.conf(5)'s PARTITION CONFIGURATION, the part reckon has)."""

    name: str
    nodes: tuple[str, ...] = ()  # patterns of agent names (module docstring)
    default: bool = False  # jobs without --partition go here (one partition at most)
    max_time: float | None = None  # seconds: no job's time limit may be longer (None: no limit)
    default_time: float | None = None  # seconds: the time limit of a job that gives none
    max_cpus_per_job: int | None = None
    max_mem_per_job: int | None = None  # bytes
    max_gpus_per_job: int | None = None
    allow_groups: tuple[str, ...] = ()  # Unix group names whose members may use it (empty: everyone)
    priority_tier: int = 1  # Slurm's PriorityTier (helper prio reads it: ``tier_of``)
    state: str = "UP"

    def __post_init__(self) -> None:
        check_str("partition name", self.name, max_len=64)
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"partition name {self.name!r} must be letters, digits, '_', '.' or '-'")
        if not isinstance(self.nodes, tuple) or len(self.nodes) > MAX_PATTERNS:
            raise ValueError(f"nodes must be a tuple of at most {MAX_PATTERNS} patterns")
        for pattern in self.nodes:
            compile_pattern(pattern)
        if not isinstance(self.default, bool):
            raise ValueError("default must be a bool")
        for key in ("max_time", "default_time"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not 0 < value <= MAX_PARTITION_TIME):
                raise ValueError(f"{key} must be a number of seconds in (0, {MAX_PARTITION_TIME:.0f}]")
        if self.max_time is not None and self.default_time is not None and self.default_time > self.max_time:
            raise ValueError(f"default_time ({self.default_time:g}s) is over max_time ({self.max_time:g}s)")
        _opt_positive_int("max_cpus_per_job", self.max_cpus_per_job, 1 << 16)
        _opt_positive_int("max_mem_per_job", self.max_mem_per_job, MAX_MEM)
        if self.max_gpus_per_job is not None:
            check_int("max_gpus_per_job", self.max_gpus_per_job, minimum=0, maximum=MAX_GPUS)
        if not isinstance(self.allow_groups, tuple) or len(self.allow_groups) > MAX_GROUPS:
            raise ValueError(f"allow_groups must be a tuple of at most {MAX_GROUPS} group names")
        for group in self.allow_groups:
            check_str("allow_groups entry", group, max_len=256)
        check_int("priority_tier", self.priority_tier, minimum=0, maximum=MAX_TIER)
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(s.lower() for s in STATES)}, got {self.state!r}")

    def has_node(self, agent: str) -> bool:
        return any(pattern_matches(p, agent) for p in self.nodes)

    @property
    def time_default(self) -> float | None:
        """The time limit a job that gives none runs with: DefaultTime, else MaxTime (Slurm's rule)."""
        return self.default_time if self.default_time is not None else self.max_time

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for key in KEYS:
            value = getattr(self, key)
            if value != _DEFAULTS[key]:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "Partition":
        if not isinstance(data, dict) or "name" not in data:
            raise ValueError("a partition must be a map with a name")
        extra = set(data).difference(KEYS, ("name",))
        if extra:
            raise ValueError(f"a partition has unknown fields {sorted(map(str, extra))}")
        values = dict(data)
        for key in ("nodes", "allow_groups"):
            if key in values:
                if not isinstance(values[key], (list, tuple)):
                    raise ValueError(f"partition {key} must be a list")
                values[key] = tuple(values[key])
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """Every field, for ``reckon partition list`` and the Slurm-style commands (plain values)."""
        out = {"name": self.name}
        for key in KEYS:
            value = getattr(self, key)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


_DEFAULTS: dict[str, Any] = {f: getattr(Partition(name="x"), f) for f in KEYS}


# ---- facts ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsConfigured:
    """The config file's partitions at a start, which differ from the ones recorded last: the
    partitions become exactly these (an operator's changes since are replaced)."""

    KIND: ClassVar[str] = "partitions_configured"
    VERSION: ClassVar[int] = 1
    partitions: tuple[Partition, ...] = ()

    def __post_init__(self) -> None:
        check_set(self.partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSet:
    """An operator created or changed a partition (the whole new record).  Made the default, it
    takes that from the partition that had it."""

    KIND: ClassVar[str] = "partition_set"
    VERSION: ClassVar[int] = 1
    partition: Partition

    def __post_init__(self) -> None:
        if not isinstance(self.partition, Partition):
            raise ValueError("partition must be a Partition")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRemoved:
    """An operator removed a partition.  Its queued jobs stay PENDING (reason PartitionDown) until
    it is made again or they are cancelled; running ones finish."""

    KIND: ClassVar[str] = "partition_removed"
    VERSION: ClassVar[int] = 1
    name: str

    def __post_init__(self) -> None:
        check_str("name", self.name, max_len=64)


def check_set(partitions: Any) -> None:
    """A whole set of partitions: records, unique names, at most one default."""
    if not isinstance(partitions, tuple) or not all(isinstance(p, Partition) for p in partitions):
        raise ValueError("partitions must be a tuple of Partition")
    names = [p.name for p in partitions]
    if len(set(names)) != len(names):
        raise ValueError("two partitions have the same name")
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) > 1:
        raise ValueError(f"more than one default partition: {', '.join(defaults)}")


def apply_fact(partitions: dict[str, Partition], configured: tuple[Partition, ...],
               fact: Any) -> tuple[Partition, ...]:
    """Apply a partition fact to the state's map; the config file's partitions recorded last (new
    or ``configured``).  ``LocalProtocolError`` changing nothing for a fact that does not apply."""
    if isinstance(fact, PartitionsConfigured):
        if fact.partitions == configured:
            raise LocalProtocolError("these partitions are the ones configured already")
        partitions.clear()
        partitions.update((p.name, p) for p in fact.partitions)
        return fact.partitions
    if isinstance(fact, PartitionSet):
        new = fact.partition
        if partitions.get(new.name) == new:
            raise LocalProtocolError(f"partition {new.name} is so already")
        if new.default:
            for name, other in list(partitions.items()):
                if other.default and name != new.name:
                    partitions[name] = replace(other, default=False)
        partitions[new.name] = new
        return configured
    if isinstance(fact, PartitionRemoved):
        if fact.name not in partitions:
            raise LocalProtocolError(f"unknown partition {fact.name!r}")
        del partitions[fact.name]
        return configured
    raise TypeError(f"not a partition fact: {fact!r}")


def encode_record(value: Any) -> Any:
    """A partition fact's field as a plain value (records as maps)."""
    if isinstance(value, Partition):
        return value.to_dict()
    if isinstance(value, tuple):
        return [p.to_dict() for p in value]
    return value


def decode_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    if "partition" in kwargs:
        kwargs["partition"] = Partition.from_dict(kwargs["partition"])
    if "partitions" in kwargs:
        if not isinstance(kwargs["partitions"], (list, tuple)):
            raise ValueError("partitions must be a list")
        kwargs["partitions"] = tuple(Partition.from_dict(p) for p in kwargs["partitions"])
    return kwargs


FACTS = (PartitionsConfigured, PartitionSet, PartitionRemoved)


# ---- reads ---------------------------------------------------------------------------------------


def default_partition(partitions: dict[str, Partition]) -> Partition | None:
    for p in partitions.values():
        if p.default:
            return p
    return None


def partition_of(partitions: dict[str, Partition], spec: "JobSpec") -> str | None:
    """The partition a job runs in: its own, else the default; None when there is neither (then it
    may run on any agent: a cluster without partitions, or one without a default)."""
    if spec.partition is not None:
        return spec.partition
    default = default_partition(partitions)
    return default.name if default is not None else None


def agent_partitions(partitions: dict[str, Partition], agent: str) -> tuple[str, ...]:
    """The partitions ``agent`` belongs to, sorted (asked for every agent note: memoized on the
    partitions' records, which are immutable)."""
    return _member_of(tuple(partitions.values()), agent)


@lru_cache(maxsize=4096)
def _member_of(partitions: tuple[Partition, ...], agent: str) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in partitions if p.has_node(agent)))


def tier_of(partitions: dict[str, Partition], name: str | None) -> int:
    """A partition's priority tier (Slurm's PriorityTier), for the priority factor (helper prio):
    1 (Slurm's default) for a job in no partition, or in one since removed."""
    p = partitions.get(name) if name is not None else None
    return p.priority_tier if p is not None else 1


def may_run_on(partitions: dict[str, Partition], spec: "JobSpec", agent: str) -> bool:
    """Whether a job of ``spec`` may start on ``agent``: it is in the job's partition (which takes
    starts), or the job has no partition."""
    name = partition_of(partitions, spec)
    if name is None:
        return True
    p = partitions.get(name)
    return p is not None and p.state in STARTS and p.has_node(agent)


def _over_limit(p: Partition, spec: "JobSpec") -> str | None:
    """The per-job maximum of ``p`` that ``spec`` is over, as one line; None if none."""
    if p.max_cpus_per_job is not None and spec.slots > p.max_cpus_per_job:
        return f"it asks {spec.slots} CPUs and partition {p.name} allows {p.max_cpus_per_job} per job"
    if p.max_mem_per_job is not None and spec.mem is not None and spec.mem > p.max_mem_per_job:
        return (f"it asks {format_size(spec.mem)} of memory and partition {p.name} allows "
                f"{format_size(p.max_mem_per_job)} per job")
    if p.max_gpus_per_job is not None and spec.gpus > p.max_gpus_per_job:
        return f"it asks {spec.gpus} GPUs and partition {p.name} allows {p.max_gpus_per_job} per job"
    return None


def _time_text(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def admit(partitions: dict[str, Partition], spec: "JobSpec", caller: "Caller | None") -> "JobSpec":
    """The spec a submit records: its partition named (the default's when it gives none) and its
    time limit the partition's default when it gives none.  ``LocalProtocolError`` (or
    ``PermissionDenied`` for a group not allowed) in one line for a job the partition refuses."""
    if not partitions:
        if spec.partition is None:
            return spec
        if spec.slurm_env:  # sbatch/srun -p on a cluster without partitions: a label, as before issue #22
            return replace(spec, partition=None, labels=_with_label(spec.labels, spec.partition))
        raise LocalProtocolError(f"invalid partition {spec.partition!r}: this cluster has no partitions")
    name = partition_of(partitions, spec)
    if name is None:
        raise LocalProtocolError("no partition given and this cluster has no default partition "
                                 f"(partitions: {', '.join(sorted(partitions))})")
    p = partitions.get(name)
    if p is None:
        raise LocalProtocolError(f"invalid partition {name!r} (partitions: {', '.join(sorted(partitions))})")
    if p.state not in QUEUES:
        raise LocalProtocolError(f"partition {name} is {p.state}: it takes no new jobs")
    if p.allow_groups and caller is not None and not caller.operator and \
            not set(p.allow_groups).intersection(caller.groups):
        raise PermissionDenied(f"partition {name} is for group{'s' if len(p.allow_groups) > 1 else ''} "
                               f"{', '.join(p.allow_groups)}: {caller.user} is in none of them")
    if (over := _over_limit(p, spec)) is not None:
        raise LocalProtocolError(f"partition {name} refuses this job: {over}")
    limit = spec.time_limit if spec.time_limit is not None else p.time_default
    if limit is not None and p.max_time is not None and limit > p.max_time:
        raise LocalProtocolError(f"partition {name} refuses this job: its time limit {_time_text(limit)} "
                                 f"is over the partition's {_time_text(p.max_time)} (max_time)")
    # A Slurm job's SLURM_JOB_PARTITION comes from its "partition" label (agents never see the field).
    labels = _with_label(spec.labels, name) if spec.slurm_env else spec.labels
    if name == spec.partition and limit == spec.time_limit and labels == spec.labels:
        return spec
    return replace(spec, partition=name, time_limit=limit, labels=labels)


def _with_label(labels: tuple[tuple[str, str], ...], name: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({**dict(labels), "partition": name}.items()))


def hold_reason(partitions: dict[str, Partition], job: "JobRecord") -> str | None:
    """Slurm's reason a queued job may not start because of its partition now; None if it may.

    A job whose partition went DOWN (or was removed: Slurm has no such case) waits with
    ``PartitionDown`` (``PartitionInactive``); one whose partition's limits were lowered below it
    since its submit waits with ``PartitionTimeLimit`` or ``PartitionConfig`` (the per-job maxima)."""
    if not partitions:
        return None
    name = partition_of(partitions, job.spec)
    if name is None:
        return None
    p = partitions.get(name)
    if p is None or p.state == "DOWN":
        return "PartitionDown"
    if p.state == "INACTIVE":
        return "PartitionInactive"
    if p.max_time is not None and job.spec.time_limit is not None and job.spec.time_limit > p.max_time:
        return "PartitionTimeLimit"
    if _over_limit(p, job.spec) is not None:
        return "PartitionConfig"
    return None


def startable(partitions: dict[str, Partition], job: "JobRecord") -> bool:
    """Whether the job's partition lets it start now (always, in a cluster without partitions)."""
    return not partitions or hold_reason(partitions, job) is None


HOLD_TEXT = {
    "PartitionDown": "its partition {p} is down (or removed): nothing starts there (PartitionDown)",
    "PartitionInactive": "its partition {p} is inactive: nothing starts there (PartitionInactive)",
    "PartitionTimeLimit": "its time limit is over partition {p}'s max_time, lowered since it was "
                          "submitted (PartitionTimeLimit)",
    "PartitionConfig": "it asks more than partition {p} now allows per job (PartitionConfig)",
}


def hold_text(partitions: dict[str, Partition], job: "JobRecord", reason: str) -> str:
    return HOLD_TEXT[reason].format(p=partition_of(partitions, job.spec))
