"""What this machine offers jobs, and what the agent can enforce here: detected, then declared.

Detected: CPUs (``os.sched_getaffinity``: the CPUs the agent may run on),
memory (``/proc/meminfo`` MemTotal, or the agent's own cgroup limit if that is
lower), GPUs (``nvidia-smi -L``, else the driver's ``/proc/driver/nvidia/gpus/*``).
Declared by the operator (agent options): ``--cpus`` (alias ``--slots``),
``--mem`` in place of the detected memory, ``--reserve-mem`` kept back for the
system and the agent, ``--gpus 0,1`` (the indices jobs may be given),
``--gres name:N`` (generic countable resources; only declared, never detected).

What the agent enforces comes from ``daemon/agent/cgroups.py``'s ``detect``:
the limit kinds it cannot enforce go to ``NodeResources.unenforced`` (shown by
``reckon nodes``) and into one line the agent logs at start, with the reason.
GPUs are handed out by ``CUDA_VISIBLE_DEVICES``/``RECKON_GPUS`` only (no devices
cgroup): an agent that offers GPUs says it does not fence them.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reckon.model.resources import LIMIT_KINDS, NodeResources, format_size

from reckon.daemon.agent import cgroups

NVIDIA_SMI_TIMEOUT = 10.0  # seconds: a wedged driver must not stop the agent's start
_GPU_LINE = re.compile(r"GPU (\d+):")


@dataclass(frozen=True, slots=True, kw_only=True)
class Declared:
    """The operator's word on this machine's resources (None: detect)."""

    cpus: int | None = None
    mem: int | None = None  # bytes
    reserve_mem: int = 0  # bytes
    gpus: tuple[int, ...] | None = None
    gres: tuple[tuple[str, int], ...] = ()


def detect_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _own_cgroup_memory_limit() -> int | None:
    """The memory limit of the agent's own cgroup (v2 memory.max, v1 memory.limit_in_bytes)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                text = candidate.read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < (1 << 60):  # "max" or the v1 "no limit" sentinel: none
                return int(text)
    return None


def detect_mem() -> int | None:
    """Bytes of memory this machine (or the agent's own cgroup, if smaller) has; None if unknown."""
    total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    limit = _own_cgroup_memory_limit()
    if limit is not None and (total is None or limit < total):
        return limit
    return total


def detect_gpus() -> tuple[int, ...]:
    """The indices of this machine's NVIDIA GPUs (none without the driver)."""
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT)
        if done.returncode == 0:
            return tuple(sorted({int(m.group(1)) for m in _GPU_LINE.finditer(done.stdout)}))
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return tuple(range(len(os.listdir("/proc/driver/nvidia/gpus"))))
    except OSError:
        return ()


class ResourceConfigError(ValueError):
    """The operator's resource options cannot work on this machine (found at start, as the memory
    may be detected): one line, a usage error."""


def machine(declared: Declared, enforcement: dict) -> tuple[int, NodeResources, list[tuple[str, str]]]:
    """This agent's CPUs (its slots), its NodeResources, and the (level, line)s to log at start."""
    cpus = declared.cpus if declared.cpus is not None else detect_cpus()
    mem = declared.mem if declared.mem is not None else detect_mem()
    if mem is not None:
        if declared.reserve_mem >= mem:
            raise ResourceConfigError(f"--reserve-mem {format_size(declared.reserve_mem)} leaves no memory of "
                             f"{format_size(mem)} for jobs")
        mem -= declared.reserve_mem
    gpus = declared.gpus if declared.gpus is not None else detect_gpus()
    enforced = set(enforcement.get("kinds", ()))
    unenforced = set(LIMIT_KINDS) - enforced
    if not gpus:
        unenforced.discard("gpus")  # nothing to fence
    version = enforcement.get("version")
    resources = NodeResources(mem=mem, gpus=tuple(sorted(gpus)), gres=tuple(declared.gres),
                              unenforced=tuple(sorted(unenforced)),
                              enforcer={2: "cgroup-v2", 1: "cgroup-v1"}.get(version, "none"))
    said = lambda given: "declared" if given is not None else "detected"  # noqa: E731
    gpu_text = f"GPUs {','.join(map(str, resources.gpus))}" if resources.gpus else "no GPUs"
    gres_text = "".join(f", {name}:{n}" for name, n in resources.gres)
    lines = [("info", f"resources: {cpus} CPUs ({said(declared.cpus)}), {format_size(mem)} memory "
                      f"({said(declared.mem)}, {format_size(declared.reserve_mem) if declared.reserve_mem else 'none'}"
                      f" reserved), {gpu_text} ({said(declared.gpus)}){gres_text}; enforced with {resources.enforcer}")]
    machine_mem = detect_mem() if declared.mem is not None else None
    if machine_mem is not None and declared.mem > machine_mem:  # the operator's word stands, but is flagged
        lines.append(("warning", f"--mem {format_size(declared.mem)} is more than this machine's "
                                 f"{format_size(machine_mem)}: jobs may be placed here that it cannot hold"))
    if resources.unenforced:
        reasons = []
        if enforcement.get("why"):
            reasons.append(enforcement["why"])
        if "gpus" in unenforced:
            reasons.append("GPUs are given by CUDA_VISIBLE_DEVICES only, no devices cgroup")
        lines.append(("warning", f"cannot enforce: {', '.join(resources.unenforced)} ({'; '.join(reasons)})"))
    return cpus, resources, lines


def exempt_from_the_oom_killer() -> tuple[str, str]:
    """Set the agent's ``oom_score_adj`` to -1000 (its launcher and supervisors inherit it; each
    job is born at +500: daemon/agent/cgroups.py), and the (level, line) saying how it went."""
    why = cgroups.set_oom_score_adj(cgroups.OOM_SCORE_ADJ_EXEMPT)
    if why is None:
        return ("info", f"OOM killer: the agent and its supervisors are exempt (oom_score_adj "
                        f"{cgroups.OOM_SCORE_ADJ_EXEMPT}), jobs go first ({cgroups.OOM_SCORE_ADJ_JOB:+d})")
    return ("warning", f"cannot exempt the agent from the OOM killer (oom_score_adj {cgroups.OOM_SCORE_ADJ_EXEMPT}: "
                       f"{why}; it takes root or CAP_SYS_RESOURCE): jobs still go first "
                       f"({cgroups.OOM_SCORE_ADJ_JOB:+d})")


def enforcement(agent: str, identity: str, running: list[tuple[str, int]], *, use_cgroups: bool = True) -> dict:
    """What the agent enforces here (``cgroups.detect``), its leftover cgroups cleaned: every
    attempt cgroup but those of ``running`` (which their supervisors still use) is killed and
    removed.  The cgroups are named by agent *and* identity: two agents of one name (tests,
    a re-made state directory) never touch each other's."""
    if not use_cgroups:
        return {"version": None, "kinds": [], "why": "cgroups are off (--no-cgroups)"}
    found = cgroups.detect(f"{agent}-{identity[:12]}")
    cgroups.clean_leftovers(found, {f"{job}.{attempt}" for job, attempt in running})
    return found


def release_enforcement(found: dict) -> None:
    """At the agent's stop: its base cgroup directories go if no job is left in them."""
    for base in cgroups.bases(found):
        try:
            os.rmdir(base)
        except OSError:
            pass
