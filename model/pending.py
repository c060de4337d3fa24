"""Why a PENDING job waits: Slurm's reason code and the operator's words, from one walk (issue #22).

``reckon show``, ``reckon jobs`` and the Slurm-style commands (squeue ``%r``/``%R``, scontrol's
``Reason=``, sacct's ``Reason``) all print the code this module picks, so they cannot disagree.
The codes are spelled as Slurm's ``job_state_reason_string`` (src/common/slurm_protocol_defs.c)
spells them; the walk goes from what keeps the job itself back to the cluster's state:

======================  ==============================================================
JobHeldUser             held (``reckon hold`` / ``scontrol hold``); reckon records no
                        operator's hold apart from a user's, so never JobHeldAdmin
Dependency              an ``--after``/``after_any``/``after_not_ok`` job has not ended
                        as needed, or ``--dependency=singleton`` waits for its twin
BeginTime               its ``--begin`` time is ahead
PartitionDown, ...      its partition starts nothing now or its limits were lowered
                        below the job (model/partitions.py ``hold_reason``)
JobArrayTaskLimit       its array runs ``%MAX`` members already
QOSMaxJobsPerUserLimit  its owner runs ``max_running_per_user`` jobs already
QOSMaxCpuPerUserLimit   its owner's running CPUs and this job's pass ``max_cpus_per_user``
ReqNodeNotAvail         no agent of its partition that could run it is up: none joined,
                        every fitting one disconnected, reconciling, drained or too old;
                        also the start gate (agents known before a restart not back yet:
                        the nodes it may need are not available, reckon's own case)
BadConstraints          no agent of its partition is big enough (its slots, memory, GPUs
                        or GRES exceed every agent's): Slurm's word for a request no node
                        configuration satisfies
Resources               the first job of its partition the latest pass could not place
                        (``Scheduler.leads``): it waits for resources to free up
Priority                a job queued before it (higher priority or older) waits too
None                    an agent has room: the scheduler has not looked at it since
======================  ==============================================================

The per-user limits are reckon's controller-wide ``max_running_per_user``/``max_cpus_per_user``:
one limit for every user, as a QOS's ``MaxJobsPerUser``/``MaxTRESPerUser=cpu`` is, not an
account's (Slurm's ``AssocMax...`` names are per association), so the ``QOS...PerUserLimit`` codes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from . import messages as M
from .admission import beyond_every_agent, capacity_shortfall
from .begin import waiting_reason as begin_reason
from .jobs import TERMINAL_STATES, JobRecord, JobState
from .partitions import hold_reason, hold_text, partition_of
from .policy import NOT_OK_STATES, array_full, user_limit_refusal
from .singleton import blocker
from .transaction import ControllerView


class Pending(NamedTuple):
    """Why a PENDING job waits: Slurm's reason ``code`` and ``text``, the operator's words."""

    code: str
    text: str


# The fitting agents of a partition for one shape of job: (code, text), code one of
# ReqNodeNotAvail, BadConstraints, None (room) or BUSY (Resources or Priority, by the queue).
BUSY = "busy"
Fit = tuple[str, str]
FitCache = dict[tuple, Fit]


def why_pending(ctl: ControllerView, job_id: str, leads: Callable[[str], bool] | None = None,
                fits: FitCache | None = None) -> Pending | None:
    """Why the job waits (see the module docstring); None for a job not PENDING.

    ``leads`` is the scheduler's ``Scheduler.leads`` (None: no scheduler to ask, a waiting job
    counts as the first of its queue: Resources).  ``fits`` caches the walk over the agents by
    the job's shape, for many jobs at once (``pending_codes``)."""
    job = ctl.state.job(job_id)
    if job.state is not JobState.PENDING:
        return None
    # What keeps the job itself back (model/policy.py ready, array_full) outranks the cluster's state.
    if job.held:
        return Pending("JobHeldUser", "held by a user: not dispatched until released (reckon release)")
    for deps_of, meets, what in ((job.spec.after, (JobState.COMPLETED,), "complete (--after)"),
                                 (job.spec.after_any, TERMINAL_STATES, "end (after_any)"),
                                 (job.spec.after_not_ok, NOT_OK_STATES, "fail (after_not_ok)")):
        deps = {dep: ctl.state.jobs.get(dep) for dep in deps_of}
        waiting = [dep for dep, other in deps.items() if other is None or other.state not in meets]
        if waiting:
            shown = ", ".join(f"{dep} ({deps[dep].state.value if deps[dep] else 'unknown'})" for dep in waiting[:3])
            more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
            return Pending("Dependency", f"waiting for job{'s' if len(waiting) > 1 else ''} {shown}{more} to {what}")
    if job.spec.singleton and (other := blocker(ctl.state.named, job)) is not None:
        what = ctl.state.jobs[other].state.value
        return Pending("Dependency", f"waiting for job {other} ({what}) of the same name and user to end "
                                     f"(--dependency=singleton: one at a time)")
    if (waiting_text := begin_reason(job, ctl.clock)) is not None:
        return Pending("BeginTime", waiting_text)
    if ctl.state.partitions and (held := hold_reason(ctl.state.partitions, job)) is not None:
        return Pending(held, hold_text(ctl.state.partitions, job, held))  # its partition keeps it back
    if array_full(ctl.state, job):
        return Pending("JobArrayTaskLimit",
                       f"its array {job.spec.array_id} runs {job.spec.array_max} job(s) at once "
                       f"(%{job.spec.array_max}): waiting for one of them to end")
    if (limited := user_limit_refusal(ctl.state, ctl.config.user_limits, job)) is not None:
        # The running-jobs limit is checked first (UserLimits.refusal), so its words name it.
        return Pending("QOSMaxJobsPerUserLimit" if "max_running_per_user" in limited else "QOSMaxCpuPerUserLimit",
                       limited)
    gate = ctl.start_gate
    if gate is not None:  # it holds every dispatch, so it outranks anything the agents say
        return Pending("ReqNodeNotAvail",
                       f"waiting for start grace: nothing is dispatched until every known agent has rejoined "
                       f"(at most {gate.grace:g}s after the controller's start; {len(gate.waiting)} not back yet)")
    part = partition_of(ctl.state.partitions, job.spec) if ctl.state.partitions else None
    spec = job.spec
    shape = (part, spec.slots, spec.mem, spec.gpus, spec.gres, spec.uses_v7)
    fit = fits.get(shape) if fits is not None else None
    if fit is None:
        fit = _fit(ctl, job, part)
        if fits is not None:
            fits[shape] = fit
    code, text = fit
    if code != BUSY:
        return Pending(code, text)
    if leads is None or leads(job_id):
        return Pending("Resources", text)
    return Pending("Priority", f"{text}; a job queued before it goes first")


def pending_codes(ctl: ControllerView, job_ids: list[str], leads: Callable[[str], bool] | None = None
                  ) -> dict[str, str]:
    """The reason code of each PENDING job of ``job_ids`` (others left out), for a whole queue:
    the walk over the agents is made once per partition and shape of job, not once per job."""
    fits: FitCache = {}
    out = {}
    for job_id in job_ids:
        why = why_pending(ctl, job_id, leads, fits)
        if why is not None:
            out[job_id] = why.code
    return out


def _fit(ctl: ControllerView, job: JobRecord, part: str | None) -> Fit:
    """What the agents of the job's partition say: none, none big enough, none up, one with room
    (code None), or every fitting one busy (BUSY), with the operator's words."""
    need = job.spec.slots
    agents = ctl.state.agents
    if not agents:
        return "ReqNodeNotAvail", "no agent has joined"
    if part is not None:
        agents = {name: info for name, info in agents.items() if ctl.state.partitions[part].has_node(name)}
        if not agents:
            return "ReqNodeNotAvail", f"no agent of partition {part} has joined"
    big_enough = sorted(name for name, info in agents.items() if capacity_shortfall(info, job.spec) is None)
    if not big_enough:
        if job.spec.mem is None and not job.spec.gpus and not job.spec.gres:
            largest = max(info.slots for info in agents.values())
            return "BadConstraints", f"no agent has {need} slot{'s' if need != 1 else ''} (the largest has {largest})"
        registered = [info for info in agents.values() if info.registered]
        return "BadConstraints", f"no agent can run it: it needs {beyond_every_agent(registered, job.spec)}"
    why: list[str] = []
    up = False  # a fitting agent that takes jobs: the job waits for room there, not for a node
    for name in big_enough:
        info = agents[name]
        session = ctl.sessions.get(name)
        if session is None or not session.connected:
            why.append(f"agent {name} is {'lost' if session is not None and session.lost else 'disconnected'}")
        elif session.reconciling:
            why.append(f"agent {name} is reconciling")
        elif info.drained:
            why.append(f"agent {name} is drained")
        elif job.spec.uses_v7 and session.version < M.SPEC7_SINCE:
            why.append(f"agent {name} speaks protocol {session.version}: this job needs {M.SPEC7_SINCE}")
        elif info.slots - info.used < need:
            up = True
            why.append(f"agent {name} has {info.slots - info.used} of {info.slots} slots free")
        elif (lacking := info.shortfall(job.spec)) is not None:
            up = True
            why.append(f"agent {name} lacks {lacking}")
        else:
            # A fitting agent is free: the job is placed in the next scheduling pass
            # unless jobs submitted before it take the room first.
            return "None", f"agent {name} has room: waiting for the next scheduling pass"
    shown = "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else "")
    if job.spec.mem is None and not job.spec.gpus and not job.spec.gres:
        text = f"waiting for {need} free slot{'s' if need != 1 else ''}: {shown}"
    else:
        text = f"waiting for {job.spec.resources_text()} free: {shown}"
    return (BUSY if up else "ReqNodeNotAvail"), text
