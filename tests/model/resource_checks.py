"""INV-NO-OVERCOMMIT and INV-GPU-ONCE, computed from a controller state and its fact log.

Shared by the stateful machine (tests/model/test_stateful.py) and the simulation
(tests/sim/checks.py).  Deliberately independent of the model's own fit
(``model/resources.py shortfall``, ``AgentInfo.free``): a bug there must not
hide from the check that is meant to catch it.  Each returns violations, every
one starting with its invariant ID.
"""

from __future__ import annotations

from reckon.model import facts as F
from reckon.model.jobs import JobRecord, JobState
from reckon.model.state import ControllerState


def _placements(facts: list[F.Fact]) -> dict[tuple[str, int], F.JobDispatched | F.JobAdopted]:
    """(job, attempt) -> the fact that placed it (the latest, if a rollback's copy placed it again)."""
    return {(f.job, f.attempt): f for f in facts if isinstance(f, (F.JobDispatched, F.JobAdopted))}


def _shrunk(facts: list[F.Fact]) -> set[str]:
    """Agents that registered once with more of something than later: their running jobs may exceed
    what they have now (the operator took capacity away under them), which is not an over-commit."""
    before: dict[str, F.AgentRegistered] = {}
    out: set[str] = set()
    for fact in facts:
        if not isinstance(fact, F.AgentRegistered):
            continue
        old = before.get(fact.agent)
        if old is not None:
            o, n = old.resources, fact.resources
            less_mem = o is not None and o.mem is not None and (n is None or n.mem is None or n.mem < o.mem)
            less_gpus = o is not None and not set(o.gpus) <= set(n.gpus if n is not None else ())
            have = dict(n.gres) if n is not None else {}
            less_gres = o is not None and any(have.get(k, 0) < v for k, v in o.gres)
            if fact.slots < old.slots or less_mem or less_gpus or less_gres:
                out.add(fact.agent)
        before[fact.agent] = fact
    return out


def _running_on(state: ControllerState) -> dict[str, list[JobRecord]]:
    out: dict[str, list[JobRecord]] = {}
    for job in state.jobs.values():
        if job.state is JobState.RUNNING and job.agent is not None:
            out.setdefault(job.agent, []).append(job)
    return out


def no_overcommit(state: ControllerState, facts: list[F.Fact]) -> list[str]:
    """INV-NO-OVERCOMMIT: on every agent the RUNNING jobs' CPUs, memory, GPUs and gres fit what it
    offers (except on an agent whose capacity shrank, and where an adopted attempt runs: adoption
    records what an agent really runs, it is not a placement)."""
    placed = _placements(facts)
    shrunk = _shrunk(facts)
    out = []
    for name, jobs in sorted(_running_on(state).items()):
        info = state.agents.get(name)
        if info is None or name in shrunk:
            continue
        if any(isinstance(placed.get((j.id, j.attempt)), F.JobAdopted) for j in jobs):
            continue
        res = info.resources
        cpus = sum(j.spec.slots for j in jobs)
        if cpus > info.slots:
            out.append(f"INV-NO-OVERCOMMIT: {name} runs jobs of {cpus} CPUs, it has {info.slots}")
        mem = sum(j.spec.mem for j in jobs if j.spec.mem is not None)
        asked_mem = any(j.spec.mem is not None for j in jobs)
        if asked_mem and (res is None or res.mem is None):
            out.append(f"INV-NO-OVERCOMMIT: {name} schedules no memory but runs jobs asking {mem} bytes")
        elif asked_mem and mem > res.mem:  # type: ignore[union-attr, operator]
            out.append(f"INV-NO-OVERCOMMIT: {name} runs jobs asking {mem} bytes of memory, it has {res.mem}")
        gpus = sum(j.spec.gpus for j in jobs)
        offered = len(res.gpus) if res is not None else 0
        if gpus > offered:
            out.append(f"INV-NO-OVERCOMMIT: {name} runs jobs asking {gpus} GPUs, it has {offered}")
        gres: dict[str, int] = {}
        for j in jobs:
            for kind, count in j.spec.gres:
                gres[kind] = gres.get(kind, 0) + count
        have = dict(res.gres) if res is not None else {}
        for kind, count in sorted(gres.items()):
            if count > have.get(kind, 0):
                out.append(f"INV-NO-OVERCOMMIT: {name} runs jobs asking {count} {kind}, it has {have.get(kind, 0)}")
    return out


def gpu_once(state: ControllerState, facts: list[F.Fact]) -> list[str]:
    """INV-GPU-ONCE: no dispatch gives a GPU index held by another RUNNING job of its agent (two
    share one only when one of them was adopted: it really ran there, on a GPU a restored state
    gave away); a RUNNING job holds as many as it asked, and its gpu_ids are what the fact that
    placed its attempt recorded."""
    placed = _placements(facts)
    out = []
    for name, jobs in sorted(_running_on(state).items()):
        holder: dict[int, JobRecord] = {}
        for job in jobs:
            if len(job.gpu_ids) != job.spec.gpus:
                out.append(f"INV-GPU-ONCE: job {job.id} asks {job.spec.gpus} GPU(s), holds {list(job.gpu_ids)}")
            fact = placed.get((job.id, job.attempt))
            if fact is not None and fact.agent == name and tuple(fact.gpus) != tuple(job.gpu_ids):
                out.append(f"INV-GPU-ONCE: job {job.id} attempt {job.attempt} holds GPUs {list(job.gpu_ids)}, "
                           f"its {type(fact).__name__} recorded {list(fact.gpus)}")
            for index in job.gpu_ids:
                other = holder.get(index)
                adopted = [j for j in (other, job) if j is not None
                           and isinstance(placed.get((j.id, j.attempt)), F.JobAdopted)]
                if other is not None and not adopted:
                    out.append(f"INV-GPU-ONCE: GPU {index} of {name} is held by RUNNING jobs {other.id} "
                               f"and {job.id}, both dispatched")
                holder[index] = job
    return out


def would_fit(state: ControllerState, agent: str, job: JobRecord) -> bool:
    """Whether ``job`` fits what the RUNNING jobs leave free on ``agent``, in every dimension (for
    the liveness check: a ready job that fits somewhere must be dispatched)."""
    info = state.agents[agent]
    res = info.resources
    running = [j for j in state.jobs.values() if j.state is JobState.RUNNING and j.agent == agent]
    if info.slots - sum(j.spec.slots for j in running) < job.spec.slots:
        return False
    if job.spec.mem is not None:
        if res is None or res.mem is None:
            return False
        if res.mem - sum(j.spec.mem or 0 for j in running) < job.spec.mem:
            return False
    held = {i for j in running for i in j.gpu_ids}
    if len([i for i in (res.gpus if res is not None else ()) if i not in held]) < job.spec.gpus:
        return False
    have = dict(res.gres) if res is not None else {}
    for kind, count in job.spec.gres:
        if have.get(kind, 0) - sum(dict(j.spec.gres).get(kind, 0) for j in running) < count:
            return False
    return True
