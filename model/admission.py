"""Admission at submit: a job that no registered agent could ever run is refused, with the reason.

A job asking for more than the largest registered agent has would wait PENDING forever and say
nothing (issue #10).  The controller's state knows every registered agent's capacity, connected
or not: its CPUs (slots) and, since issue #20, its memory, GPUs and generic resources, so the
refusal is the model's.  It names the dimension: the one in which the job is furthest from any
agent (an agent fitting the CPUs but not the memory is no help to it).  With no agent registered
yet (a cluster being set up) nothing is refused: there is nothing to compare with.
``queue_anyway`` (the CLI's ``--queue-anyway``) queues such a job for an agent that has yet to join.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .partitions import partition_of
from .resources import MAX_MEM, format_size

if TYPE_CHECKING:
    from .jobs import JobSpec
    from .resources import Owner
    from .scheduler import UserLimits
    from .state import AgentInfo, ControllerState

QUEUE_ANYWAY_HINT = " (--queue-anyway queues it for an agent yet to join)"  # reckon submit's flag


def with_default_mem(spec: "JobSpec", per_cpu: int | None) -> "JobSpec":
    """The spec a submit records when the cluster has a default memory (Slurm's DefMemPerCPU): a
    job that gives no ``--mem`` asks ``slots x per_cpu`` (at most MAX_MEM), so the scheduler fits
    it and its agent enforces it like any other.

    Applied by the submit handlers, before the ``JobSubmitted`` fact is written, not when the job
    is placed or started: the fact then holds what the job asks, replay and every reader (show,
    squeue, the agent) see the same number, and a later change of the default leaves the jobs
    already queued as they were submitted."""
    if per_cpu is None or spec.mem is not None:
        return spec
    return replace(spec, mem=min(spec.slots * per_cpu, MAX_MEM))


def capacity_shortfall(info: "AgentInfo", spec: "JobSpec") -> str | None:
    """The first dimension in which ``spec`` exceeds the agent's whole capacity (not its free part)."""
    if spec.slots > info.slots:
        return "cpus"
    res = info.resources
    if spec.mem is not None and (res is None or res.mem is None or spec.mem > res.mem):
        return "mem"
    if spec.gpus > (len(res.gpus) if res is not None else 0):
        return "gpus"
    have = dict(res.gres) if res is not None else {}
    for name, count in spec.gres:
        if count > have.get(name, 0):
            return f"gres {name}"
    return None


def unrunnable_reason(state: "ControllerState", spec: "JobSpec") -> str | None:
    """Why no registered agent could ever run ``spec``; None if one could (or none is registered)."""
    # Most jobs fit the first agent asked: a submit stops there rather than scan every agent.
    if any(a.registered and capacity_shortfall(a, spec) is None for a in state.agents.values()):
        return None
    registered = [a for a in state.agents.values() if a.registered]
    need = beyond_every_agent(registered, spec)
    return None if need is None else f"no agent can ever run this job: it needs {need}{QUEUE_ANYWAY_HINT}"


def beyond_the_user_limit(limits: "UserLimits", owner: "Owner | None", spec: "JobSpec") -> str | None:
    """Why a job of ``owner`` could never start under the per-user CPU limit (it asks more CPUs
    than the limit: it would wait PENDING for ever); None if it could.  Jobs without an owner
    (token mode) have no limits."""
    if owner is None or limits.max_cpus is None or spec.slots <= limits.max_cpus:
        return None
    return (f"this job needs {spec.slots} CPUs and the per-user limit (max_cpus_per_user) is {limits.max_cpus}: "
            f"it could never start")


def beyond_every_agent(registered: "list[AgentInfo]", spec: "JobSpec") -> str | None:
    """What ``spec`` needs that none of these agents has in all (``5G of memory (--mem) and ...``);
    None if one of them has it all, or there are none."""
    if not registered:
        return None
    lacking = []
    for a in registered:
        dimension = capacity_shortfall(a, spec)
        if dimension is None:
            return None  # this one has it all: no need to look further
        lacking.append(dimension)
    # Name the dimension the most agents lack (CPUs first on a tie: the question users know).
    order = ["cpus", "mem", "gpus"]
    dimension = max(lacking, key=lambda d: (lacking.count(d), -order.index(d) if d in order else -len(order)))
    if dimension == "cpus":
        largest = max(a.slots for a in registered)
        # The words of issue #10's refusal, kept: scripts and tests match them.
        return f"{spec.slots} slots and the largest registered agent has {largest}"
    if dimension == "mem":
        known = [a.resources.mem for a in registered if a.resources is not None and a.resources.mem is not None]
        most = f"the most any registered agent offers is {format_size(max(known))}" if known else \
            "no registered agent schedules memory"
        return f"{format_size(spec.mem)} of memory (--mem) and {most}"
    if dimension == "gpus":
        most = max(len(a.resources.gpus) if a.resources is not None else 0 for a in registered)
        return f"{spec.gpus} GPU{'s' if spec.gpus != 1 else ''} (--gpus) and the most any registered " \
            f"agent has is {most}"
    name = dimension.split(" ", 1)[1]
    count = dict(spec.gres)[name]
    most = max(dict(a.resources.gres).get(name, 0) if a.resources is not None else 0 for a in registered)
    return f"{count} {name} (--gres) and the most any registered agent has is {most}"
