"""Resources, owners and usage: the value types a shared cluster's jobs and agents carry.

Pure values that validate themselves and encode as plain maps (``to_dict`` /
``from_dict``), used by the job spec (what a job asks for), the agent's join
(what a machine has), the dispatch (whom a job runs as, which GPUs it got) and
the finish report (what an attempt used).  The fit of a request into an
agent's free capacity is here too, so the scheduler and the controller's
admission share one definition of "fits".

Sizes are bytes.  ``parse_size`` reads Slurm's spelling: a number with an
optional binary suffix K, M, G or T; a bare number is mebibytes (``--mem=512``
is 512 MiB, as in Slurm).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._check import check_int, check_str, check_time, check_tuple_of, require_keys

MAX_MEM = 1 << 60  # bytes: an exbibyte, far beyond any machine
MAX_GPUS = 1024  # per job and per agent
MAX_GPU_INDEX = MAX_GPUS * 16  # the largest index a machine may name
MAX_GRES_NAMES = 64  # generic resource kinds per job or agent
MAX_GRES_COUNT = 1 << 30
MAX_UNIX_ID = (1 << 32) - 2  # (uid_t)-1 is "no id" to the kernel
GRES_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
# What the agent may say it cannot enforce on its machine (NodeResources.unenforced).
LIMIT_KINDS = frozenset({"mem", "cpus", "pids", "gpus", "kill"})

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTkmgt])?(?:i?[Bb])?\s*")
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``512M``, ``4G``, ``1.5G`` or ``2048`` (MiB); ValueError naming it."""
    if not isinstance(text, str):
        raise ValueError(f"a size must be a string like 512M or 4G, got {type(text).__name__}")
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"bad size {text!r}: a number with an optional K, M, G or T suffix (512M, 4G)")
    unit = _SIZE_UNITS[(m.group(2) or "M").upper()]
    value = int(float(m.group(1)) * unit)
    if not 0 < value <= MAX_MEM:
        raise ValueError(f"bad size {text!r}: it must be more than 0 and at most {format_size(MAX_MEM)}")
    return value


def format_size(value: int | None) -> str:
    """``4G``, ``512M``, ``768K``: the largest unit that divides evenly (K only below a mebibyte),
    else one decimal of the largest unit it reaches (a machine's 24683584K reads 23.5G)."""
    if value is None:
        return "-"
    for suffix in ("T", "G", "M", "K"):
        unit = _SIZE_UNITS[suffix]
        if value >= unit and value % unit == 0 and (suffix != "K" or value < _SIZE_UNITS["M"]):
            return f"{value // unit}{suffix}"
    for suffix in ("T", "G", "M"):
        unit = _SIZE_UNITS[suffix]
        if value >= unit:
            return f"{value / unit:.1f}{suffix}"
    return f"{value}B"


def check_gpu_indices(name: str, gpus: Any) -> None:
    """GPU indices (an agent's, a dispatch's, a report's): at most MAX_GPUS, each once, in order."""
    check_tuple_of(name, gpus, int)
    if len(gpus) > MAX_GPUS:
        raise ValueError(f"{name} lists more than {MAX_GPUS} devices")
    for index in gpus:
        check_int(f"{name} index", index, minimum=0, maximum=MAX_GPU_INDEX)
    if list(gpus) != sorted(set(gpus)):
        raise ValueError(f"{name} must list each GPU index once, in order")


def check_gres(name: str, value: Any) -> None:
    """A tuple of (name, count) pairs, names unique and sorted, counts positive."""
    check_tuple_of(name, value, tuple)
    if len(value) > MAX_GRES_NAMES:
        raise ValueError(f"{name} names more than {MAX_GRES_NAMES} generic resources")
    seen: list[str] = []
    for pair in value:
        if len(pair) != 2:
            raise ValueError(f"{name} entries are (name, count) pairs")
        kind, count = pair
        check_str(f"{name} name", kind, max_len=64)
        if not GRES_NAME.fullmatch(kind) or kind == "gpu":
            raise ValueError(f"bad generic resource name {kind!r}: a letter, then letters, digits, _ . -"
                             + (" (GPUs are --gpus)" if kind == "gpu" else ""))
        check_int(f"{name} count of {kind}", count, minimum=1, maximum=MAX_GRES_COUNT)
        seen.append(kind)
    if seen != sorted(set(seen)):
        raise ValueError(f"{name} must name each generic resource once, in sorted order")


def parse_gres(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """``["license:2", "fpga"]`` -> ``(("fpga", 1), ("license", 2))``; counts of a repeated name add up."""
    counts: dict[str, int] = {}
    for item in items:
        kind, sep, count = item.partition(":")
        try:
            n = int(count) if sep else 1
        except ValueError:
            raise ValueError(f"bad generic resource {item!r}: NAME or NAME:COUNT") from None
        counts[kind] = counts.get(kind, 0) + n
    gres = tuple(sorted(counts.items()))
    check_gres("gres", gres)
    return gres


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """Whom a job belongs to and runs as: the caller the controller authenticated at submit."""

    uid: int
    gid: int  # the primary group the credential carried
    user: str  # the name the controller's machine has for uid ("#uid" if none)

    def __post_init__(self) -> None:
        check_int("uid", self.uid, minimum=0, maximum=MAX_UNIX_ID)
        check_int("gid", self.gid, minimum=0, maximum=MAX_UNIX_ID)
        check_str("user", self.user, max_len=256)

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "user": self.user}

    @classmethod
    def from_dict(cls, data: Any) -> "Owner":
        require_keys("owner", data, ("uid", "gid", "user"))
        return cls(uid=data["uid"], gid=data["gid"], user=data["user"])


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeResources:
    """What an agent's machine offers jobs (beyond its CPUs, which are ``Join.slots``), and what
    it cannot enforce.  ``mem`` None: the agent does not schedule memory (unknown machine)."""

    mem: int | None = None  # bytes jobs may ask for (detected, less the operator's reserve)
    gpus: tuple[int, ...] = ()  # GPU indices jobs may be given (CUDA_VISIBLE_DEVICES values)
    gres: tuple[tuple[str, int], ...] = ()  # generic countable resources, sorted by name
    unenforced: tuple[str, ...] = ()  # LIMIT_KINDS the agent cannot enforce here, sorted
    enforcer: str = "none"  # how it enforces: "cgroup-v2", "cgroup-v1" or "none"

    def __post_init__(self) -> None:
        if self.mem is not None:
            check_int("mem", self.mem, minimum=0, maximum=MAX_MEM)
        check_gpu_indices("gpus", self.gpus)
        check_gres("gres", self.gres)
        check_tuple_of("unenforced", self.unenforced, str)
        if not LIMIT_KINDS.issuperset(self.unenforced) or list(self.unenforced) != sorted(set(self.unenforced)):
            raise ValueError(f"unenforced must be sorted, distinct names of {sorted(LIMIT_KINDS)}")
        if self.enforcer not in ("cgroup-v2", "cgroup-v1", "none"):
            raise ValueError(f"enforcer must be cgroup-v2, cgroup-v1 or none, got {self.enforcer!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"mem": self.mem, "gpus": list(self.gpus), "gres": [list(p) for p in self.gres],
                "unenforced": list(self.unenforced), "enforcer": self.enforcer}

    @classmethod
    def from_dict(cls, data: Any) -> "NodeResources":
        require_keys("resources", data, ("mem", "gpus", "gres", "unenforced", "enforcer"))
        lists = [data[k] for k in ("gpus", "gres", "unenforced")]
        if not all(isinstance(v, (list, tuple)) for v in lists):
            raise ValueError("resources gpus, gres and unenforced must be lists")
        return cls(mem=data["mem"], gpus=tuple(data["gpus"]),
                   gres=tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in data["gres"]),
                   unenforced=tuple(data["unenforced"]), enforcer=data["enforcer"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What one attempt used, as its supervisor measured it (from its cgroup, else getrusage)."""

    cpu_user: float  # seconds
    cpu_system: float  # seconds
    max_rss: int | None  # peak memory in bytes (None: not measured)
    wall: float  # seconds from start to end
    source: str  # "cgroup" or "rusage"

    def __post_init__(self) -> None:
        check_time("cpu_user", self.cpu_user)
        check_time("cpu_system", self.cpu_system)
        if self.max_rss is not None:
            check_int("max_rss", self.max_rss, minimum=0, maximum=MAX_MEM)
        check_time("wall", self.wall)
        if self.source not in ("cgroup", "rusage"):
            raise ValueError(f"usage source must be cgroup or rusage, got {self.source!r}")

    @property
    def cpu(self) -> float:
        return self.cpu_user + self.cpu_system

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_user": self.cpu_user, "cpu_system": self.cpu_system, "max_rss": self.max_rss,
                "wall": self.wall, "source": self.source}

    @classmethod
    def from_dict(cls, data: Any) -> "Usage":
        require_keys("usage", data, ("cpu_user", "cpu_system", "max_rss", "wall", "source"))
        return cls(cpu_user=float(data["cpu_user"]) if type(data["cpu_user"]) is int else data["cpu_user"],
                   cpu_system=float(data["cpu_system"]) if type(data["cpu_system"]) is int else data["cpu_system"],
                   max_rss=data["max_rss"],
                   wall=float(data["wall"]) if type(data["wall"]) is int else data["wall"], source=data["source"])


# ---- fitting a job's request into an agent (issue #20: resources beyond slots) -----------------
#
# One definition of "fits", shared by the state's apply (a dispatch that does not fit does not
# apply), the controller's dispatch check, the scheduler, admission and ``why pending``.  A
# request: CPUs (the spec's slots), memory in bytes (None: asks none), a GPU count and generic
# counts.  A capacity: the same, with memory None meaning the agent does not schedule memory,
# so it takes only jobs that ask none.


def shortfall(*, cpus: int, mem: int | None, gpus: int, gres: tuple[tuple[str, int], ...],
              free_cpus: int, free_mem: int | None, free_gpus: int, free_gres: dict[str, int]) -> str | None:
    """The first dimension in which the request does not fit the free capacity, in words; None if it fits."""
    if cpus > free_cpus:
        return f"{cpus} CPU{'s' if cpus != 1 else ''} ({free_cpus} free)"
    if mem is not None:
        if free_mem is None:
            return f"{format_size(mem)} of memory (the agent schedules no memory)"
        if mem > free_mem:
            return f"{format_size(mem)} of memory ({format_size(free_mem)} free)"
    if gpus > free_gpus:
        return f"{gpus} GPU{'s' if gpus != 1 else ''} ({free_gpus} free)"
    for name, count in gres:
        have = free_gres.get(name, 0)
        if count > have:
            return f"{count} {name} ({have} free)"
    return None


def lowest_free(gpus: tuple[int, ...], held: "set[int] | dict[int, str]", count: int) -> tuple[int, ...]:
    """The ``count`` lowest of an agent's GPU indices that no running job holds (fewer if there are not enough)."""
    if count <= 0:
        return ()
    picked: list[int] = []
    for index in gpus:  # NodeResources.gpus is sorted: the first free ones are the lowest
        if index not in held:
            picked.append(index)
            if len(picked) == count:
                break
    return tuple(picked)
