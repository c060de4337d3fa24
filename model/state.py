"""The controller's durable state and ``apply``, the one seam that mutates it.

``apply`` is strict: a fact that would not change anything (a second finish,
a dispatch of a running job, a report of an old attempt) raises
``LocalProtocolError`` before touching anything.  The controller only emits
facts that apply, so the log holds no duplicates by construction, and replay
runs exactly the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from . import facts as F
from . import singleton
from .errors import LocalProtocolError, ModelCorrupted
from .messages import pair_hash, running_digest
from .jobs import JobRecord, JobState, JobTransition, finish_transition, next_state
from .partitions import FACTS as PARTITION_FACTS, Partition, apply_fact as apply_partition_fact
from .policy import TIMEOUT_REASON, retry_due
from .resources import NodeResources, shortfall
from .priority import UsageTable

OOM_REASON = "oom"  # JobRecord.reason of an attempt killed for exceeding its memory limit
NOT_RUN_PREFIX = "not run: "  # JobRecord.reason of an attempt the agent refused to start, before its why


@dataclass(slots=True)
class AgentInfo:
    """The durable part of what the controller knows of an agent.

    The fields before ``used`` are durable, in the order of a snapshot row (``AGENT_ROW``): a
    new one goes after ``confirmed``, with a default (an older snapshot's row lacks it).  The
    rest (``AGENT_DERIVED``) are indexes of the job table, rebuilt by ``restore`` and checked
    by ``ControllerState.validate_state``."""

    name: str
    slots: int
    registered: bool = False  # an AgentRegistered fact named it (not only a job placement)
    identity: str | None = None  # the durable identity that holds this name (None: none claimed it)
    drained: bool = False  # the operator drained it (AgentDrained): no new dispatches until AgentResumed
    generation: int = 0  # the holder's last join generation (JoinGenerationIssued; 0: none yet)
    confirmed: int = 0  # the newest generation the holder has shown it stored (model.names)
    # What it offers beyond CPUs, from its latest AgentRegistered (None: memory unknown, no GPUs, no gres).
    resources: NodeResources | None = None
    used: int = 0  # slots of the RUNNING jobs placed here, kept by apply
    running: set[str] = field(default_factory=set)  # ids of RUNNING jobs placed here
    # running_digest() of the placed (job, attempt) pairs, kept up to date by
    # _place/_release once someone asked for it (heartbeats compare it with the
    # agent's).  None until then, so replay and restore pay no hashing.
    digest: int | None = field(default=None, compare=False)
    # Issue #20: what the RUNNING jobs placed here hold beyond slots, kept by _place/_release.
    mem_used: int = 0  # bytes their specs ask
    # GPU index -> the RUNNING jobs holding it: one, but for an adopted attempt that really runs on
    # a GPU a dispatch gave away meanwhile (a restored state did not know it): INV-GPU-ONCE.
    gpus_held: dict[int, set[str]] = field(default_factory=dict)
    gres_used: dict[str, int] = field(default_factory=dict)  # generic resource -> count held (no zeros)

    def row(self) -> list[Any]:
        row = list(_AGENT_KEY(self))
        if self.resources is not None:
            row[_RESOURCES] = self.resources.to_dict()
        return row

    def free(self) -> tuple[int, int | None, int, dict[str, int]]:
        """(CPUs, memory or None if it schedules none, GPUs, gres) free for new jobs."""
        res = self.resources
        if res is None:
            return self.slots - self.used, None, 0, {}
        mem = None if res.mem is None else res.mem - self.mem_used
        gres = {name: count - self.gres_used.get(name, 0) for name, count in res.gres}
        return self.slots - self.used, mem, sum(1 for index in res.gpus if index not in self.gpus_held), gres

    def shortfall(self, spec: Any) -> str | None:
        """The first dimension in which ``spec`` does not fit what is free here; None if it fits."""
        cpus, mem, gpus, gres = self.free()
        return shortfall(cpus=spec.slots, mem=spec.mem, gpus=spec.gpus, gres=spec.gres,
                         free_cpus=cpus, free_mem=mem, free_gpus=gpus, free_gres=gres)


AGENT_DERIVED = frozenset({"used", "running", "digest", "mem_used", "gpus_held", "gres_used"})  # kept from the job table
AGENT_ROW: tuple[str, ...] = tuple(f.name for f in fields(AgentInfo) if f.name not in AGENT_DERIVED)
_AGENT_KEY = attrgetter(*AGENT_ROW)
_RESOURCES = AGENT_ROW.index("resources")
# The state's own fields that are not records: in the digest (but facts_applied: how many facts
# led here, not what the state is; equal states reached by different paths are equal) and the snapshot.
STATE_SCALARS = ("next_job", "id_mark", "cluster", "facts_applied")
STATE_DERIVED = frozenset({"dependants", "array_running", "arrays", "user_running", "named"})  # indexes of the job table
NOT_IN_DIGEST = frozenset({"facts_applied"})


@dataclass(frozen=True, slots=True)
class Changes:
    """What one fact changed, for the scheduler's notifications."""

    jobs: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()


@dataclass(slots=True)
class ControllerState:
    jobs: dict[str, JobRecord] = field(default_factory=dict)  # insertion order = submit order
    agents: dict[str, AgentInfo] = field(default_factory=dict)
    next_job: int = 1
    facts_applied: int = 0
    cluster: str | None = None  # set by the history's first fact, ClusterCreated
    id_mark: int = 0  # ids up to this are covered by the id mark outside the database (IdMarkRaised)
    # Derived indexes, kept by apply and rebuilt by restore (not part of digest()):
    dependants: dict[str, list[str]] = field(default_factory=dict)  # job -> jobs submitted --after it
    array_running: dict[str, int] = field(default_factory=dict)  # throttled array id -> its RUNNING jobs
    arrays: dict[str, list[str]] = field(default_factory=dict)  # array id -> its jobs, in index order
    # owner's name -> [its RUNNING jobs, their slots]: what the per-user limits count (model/scheduler.py UserLimits)
    user_running: dict[str, list[int]] = field(default_factory=dict)
    # Issue #22: the partitions by name (model/partitions.py), and the config file's as recorded last.
    partitions: dict[str, Partition] = field(default_factory=dict)
    partitions_configured: tuple[Partition, ...] = ()
    # (owner's user, job name) -> its RUNNING and PENDING jobs: what --dependency=singleton asks (model/singleton.py)
    # None until a singleton job is submitted (most clusters never pay for it).
    named: dict[tuple, singleton.NameLoad] | None = None
    # Issue #22: every user's decayed CPU-seconds (model/priority.py), kept by apply from the
    # attempts' JobFinished facts: durable (the snapshot holds it), the same after replay.
    usage: UsageTable = field(default_factory=UsageTable)

    def job(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise LocalProtocolError(f"unknown job {job_id!r}") from None

    def agent(self, name: str) -> AgentInfo:
        info = self.agents.get(name)
        if info is None:
            info = self.agents[name] = AgentInfo(name=name, slots=0)
        return info

    def placement_digest(self, agent: str) -> tuple[int, int]:
        """(count, running_digest) of the jobs placed on ``agent``: O(1) after the first call."""
        info = self.agents.get(agent)
        if info is None:
            return 0, 0
        if info.digest is None:
            info.digest = running_digest((job_id, self.jobs[job_id].attempt) for job_id in info.running)
        return len(info.running), info.digest

    def next_job_id(self) -> str:
        return str(self.next_job)

    def validate_state(self) -> None:
        """Recompute every derived index from the records and compare; ``ModelCorrupted`` names a difference.

        The checkers (the stateful machine, the explorer, the simulation, chaos runs) call it
        after every ``handle``.  O(jobs + agents): for checkers, not the daemon's hot path."""
        wrong: list[str] = []
        next_id = 1
        dependants: dict[str, list[str]] = {}
        arrays: dict[str, list[str]] = {}
        array_running: dict[str, int] = {}
        placed: dict[str, set[str]] = {name: set() for name in self.agents}
        used: dict[str, int] = dict.fromkeys(self.agents, 0)
        user_running: dict[str, list[int]] = {}
        mem_used: dict[str, int] = dict.fromkeys(self.agents, 0)
        gpus_held: dict[str, dict[int, set[str]]] = {name: {} for name in self.agents}
        gres_used: dict[str, dict[str, int]] = {name: {} for name in self.agents}
        for key, job in self.jobs.items():
            if job.id != key:
                wrong.append(f"job {key} is filed under another id ({job.id})")
            if key.isdigit():
                next_id = max(next_id, int(key) + 1)
            for dep in job.spec.dependencies:
                dependants.setdefault(dep, []).append(job.id)
            if job.spec.array_id is not None:
                arrays.setdefault(job.spec.array_id, []).append(job.id)
            if job.requeue_requested and job.state is not JobState.RUNNING:
                wrong.append(f"job {key} is {job.state.value} with a requeue request")
            if (job.state is JobState.RUNNING) != (job.agent is not None):
                wrong.append(f"job {key} is {job.state.value} with agent {job.agent!r}")
            if job.agent is None:
                continue
            if job.agent not in self.agents:
                wrong.append(f"job {key} is placed on {job.agent}, which the state does not know")
                continue
            placed[job.agent].add(key)
            used[job.agent] += job.spec.slots
            mem_used[job.agent] += job.spec.mem or 0
            for name, count in job.spec.gres:
                gres_used[job.agent][name] = gres_used[job.agent].get(name, 0) + count
            # INV-GPU-ONCE: a RUNNING job holds as many GPUs as it asked.  (Whether two share one is
            # a question of how each was placed, which the facts say: tests/model/resource_checks.py.)
            if len(job.gpu_ids) != job.spec.gpus:
                wrong.append(f"INV-GPU-ONCE: job {key} asks {job.spec.gpus} GPU(s) and holds {list(job.gpu_ids)}")
            for index in job.gpu_ids:
                gpus_held[job.agent].setdefault(index, set()).add(key)
            if job.spec.array_max is not None and job.spec.array_id is not None:
                array_running[job.spec.array_id] = array_running.get(job.spec.array_id, 0) + 1
            if job.owner is not None:
                load = user_running.setdefault(job.owner.user, [0, 0])
                load[0], load[1] = load[0] + 1, load[1] + job.spec.slots
        if self.next_job < next_id:
            wrong.append(f"next_job is {self.next_job}, but job {next_id - 1} exists")
        for index, recomputed in (("dependants", dependants), ("arrays", arrays)):
            if getattr(self, index) != recomputed:
                wrong.append(f"{index} is {getattr(self, index)}, recomputed {recomputed}")
        kept = {array: n for array, n in self.array_running.items() if n != 0}  # a count that fell to 0 stays
        if kept != array_running:
            wrong.append(f"array_running is {self.array_running}, recomputed {array_running}")
        kept_users = {user: load for user, load in self.user_running.items() if load != [0, 0]}
        if kept_users != user_running:
            wrong.append(f"user_running is {self.user_running}, recomputed {user_running}")
        for name, info in self.agents.items():
            if info.name != name:
                wrong.append(f"agent {name} is filed under another name ({info.name})")
            if info.running != placed[name] or info.used != used[name]:
                wrong.append(f"agent {name} holds {sorted(info.running)} using {info.used} slot(s), "
                             f"recomputed {sorted(placed[name])} using {used[name]}")
            if (info.mem_used, info.gpus_held, info.gres_used) != (mem_used[name], gpus_held[name],
                                                                   gres_used[name]):
                wrong.append(f"agent {name} holds {info.mem_used} bytes, GPUs {info.gpus_held}, gres "
                             f"{info.gres_used}; recomputed {mem_used[name]}, {gpus_held[name]}, {gres_used[name]}")
            if info.digest is not None:
                digest = running_digest((job_id, self.jobs[job_id].attempt) for job_id in placed[name])
                if info.digest != digest:
                    wrong.append(f"agent {name}'s placement digest is {info.digest}, recomputed {digest}")
        named = singleton.rebuild(self.jobs) if singleton.any_singleton(self.jobs) else None
        if singleton.normal(self.named) != singleton.normal(named):
            wrong.append(f"named is {singleton.normal(self.named)}, recomputed {singleton.normal(named)}")
        if wrong:
            raise ModelCorrupted("the controller state's derived indexes disagree with its records: "
                                 + "; ".join(wrong))

    def digest(self) -> tuple:
        """A value equal for equal states (every durable field): used to compare replay with live."""
        return (
            tuple(getattr(self, name) for name in STATE_SCALARS if name not in NOT_IN_DIGEST),
            tuple(sorted(j.snapshot_key() for j in self.jobs.values())),
            tuple(sorted(_AGENT_KEY(a) for a in self.agents.values())),
            tuple(self.partitions[name] for name in sorted(self.partitions)), self.partitions_configured,
            self.usage.key(),
        )


def _require_running(state: ControllerState, job_id: str, attempt: int) -> JobRecord:
    job = state.job(job_id)
    if job.state is not JobState.RUNNING or job.attempt != attempt:
        raise LocalProtocolError(
            f"job {job_id} attempt {attempt} is not running (state {job.state.value}, attempt {job.attempt})"
        )
    return job


def _place(state: ControllerState, job: JobRecord, agent: str) -> None:
    info = state.agent(agent)
    info.running.add(job.id)
    info.used += job.spec.slots
    if job.spec.mem is not None or job.spec.gres or job.gpu_ids:
        _hold(info, job, +1)
    if info.digest is not None:
        info.digest ^= pair_hash(job.id, job.attempt)
    job.agent = job.ran_on = agent
    if job.spec.array_max is not None and job.spec.array_id is not None:
        state.array_running[job.spec.array_id] = state.array_running.get(job.spec.array_id, 0) + 1
    if job.owner is not None:
        load = state.user_running.setdefault(job.owner.user, [0, 0])
        load[0], load[1] = load[0] + 1, load[1] + job.spec.slots


def _release(state: ControllerState, job: JobRecord) -> str:
    """Give a job's slots back to its agent: every way out of RUNNING calls this."""
    assert job.agent is not None
    info = state.agents[job.agent]
    info.running.discard(job.id)
    info.used -= job.spec.slots
    if job.spec.mem is not None or job.spec.gres or job.gpu_ids:
        _hold(info, job, -1)
    if info.digest is not None:
        info.digest ^= pair_hash(job.id, job.attempt)
    agent, job.agent = job.agent, None
    if job.spec.array_max is not None and job.spec.array_id is not None:
        state.array_running[job.spec.array_id] -= 1
    if job.owner is not None:
        load = state.user_running[job.owner.user]
        load[0], load[1] = load[0] - 1, load[1] - job.spec.slots
    return agent


def _hold(info: AgentInfo, job: JobRecord, sign: int) -> None:
    """Take (+1) or give back (-1) what a RUNNING job holds beyond slots: memory, its GPUs, gres."""
    info.mem_used += sign * (job.spec.mem or 0)
    for index in job.gpu_ids:
        if sign > 0:
            info.gpus_held.setdefault(index, set()).add(job.id)
        else:
            holders = info.gpus_held.get(index)
            if holders is not None:
                holders.discard(job.id)
                if not holders:
                    del info.gpus_held[index]
    for name, count in job.spec.gres:
        left = info.gres_used.get(name, 0) + sign * count
        if left:
            info.gres_used[name] = left
        else:
            info.gres_used.pop(name, None)


def _check_placement(state: ControllerState, job: JobRecord, agent: str, gpus: tuple[int, ...],
                     *, fit: bool) -> None:
    """A placement names as many GPUs as the job asks; a dispatch (``fit``) names GPUs of the agent
    that no RUNNING job holds (INV-GPU-ONCE), and its memory and gres fit what is free there.  An
    adoption records what the agent really runs, where it runs: only the count is checked."""
    if len(gpus) != job.spec.gpus:
        raise LocalProtocolError(f"job {job.id} asks {job.spec.gpus} GPU(s), its placement names {list(gpus)}")
    info = state.agents.get(agent)
    if not fit or (not gpus and job.spec.mem is None and not job.spec.gres):
        return
    if info is None:
        raise LocalProtocolError(f"job {job.id} asks resources of agent {agent}, which the state does not know")
    offered = info.resources.gpus if info.resources is not None else ()
    for index in gpus:
        if index not in offered:
            raise LocalProtocolError(f"agent {agent} has no GPU {index} (it offers {list(offered)})")
        if index in info.gpus_held:
            raise LocalProtocolError(f"GPU {index} of agent {agent} is held by job "
                                     f"{', '.join(sorted(info.gpus_held[index]))}")
    _, mem, _, gres = info.free()
    lacking = shortfall(cpus=0, mem=job.spec.mem, gpus=0, gres=job.spec.gres, free_cpus=0, free_mem=mem,
                        free_gpus=0, free_gres=gres)
    if lacking is not None:
        raise LocalProtocolError(f"job {job.id} does not fit agent {agent}: it needs {lacking}")


def _index_job(state: ControllerState, job: JobRecord) -> None:
    """Add a new job to the derived indexes: its dependencies and its array."""
    for dep in job.spec.dependencies:
        state.dependants.setdefault(dep, []).append(job.id)
    if job.spec.array_id is not None:
        state.arrays.setdefault(job.spec.array_id, []).append(job.id)


def apply(state: ControllerState, fact: F.Fact) -> Changes:
    """Apply one fact.  Raises ``LocalProtocolError`` and changes nothing if it does not apply."""
    named = state.named
    if named is None:  # no singleton job yet (the common case: one test)
        changes = _APPLY[type(fact)](state, fact)
        state.facts_applied += 1
        if type(fact) is F.JobSubmitted and fact.spec.singleton:
            state.named = singleton.rebuild(state.jobs)  # the first one: the index starts (model/singleton.py)
        return changes
    job_id = getattr(fact, "job", None)
    job = state.jobs.get(job_id) if job_id is not None else None
    before = job.state if job is not None else None
    changes = _APPLY[type(fact)](state, fact)
    state.facts_applied += 1
    # A fact changes the state of its own job at most: the singleton index follows it here, once.
    job = state.jobs.get(job_id) if job_id is not None else None
    if job is not None and job.state is not before:
        waiting = singleton.moved(state.jobs, named, job, before)
        if waiting:
            changes = Changes(jobs=(*changes.jobs, *waiting), agents=changes.agents)
    return changes


def _submitted(state: ControllerState, fact: F.JobSubmitted) -> Changes:
    if fact.job in state.jobs:
        raise LocalProtocolError(f"job {fact.job} already exists")
    if fact.job != state.next_job_id():
        raise LocalProtocolError(f"job id {fact.job} out of sequence (expected {state.next_job_id()})")
    unknown = [dep for dep in fact.spec.dependencies if dep not in state.jobs]
    if unknown:
        raise LocalProtocolError(f"job {fact.job} depends on unknown job(s) {unknown}")
    array_id = fact.spec.array_id
    if array_id is not None and array_id != fact.job and array_id not in state.arrays:
        raise LocalProtocolError(f"job {fact.job} names array {array_id}, which does not exist")
    job = state.jobs[fact.job] = JobRecord(id=fact.job, spec=fact.spec, submitted_at=fact.submitted_at, uid=fact.uid,
                                              owner=fact.owner)
    _index_job(state, job)
    state.next_job += 1
    return Changes(jobs=(fact.job,))


def _ids_reserved(state: ControllerState, fact: F.JobIdsReserved) -> Changes:
    if fact.upto < state.next_job:
        raise LocalProtocolError(f"job ids up to {fact.upto} are already behind the next id {state.next_job}")
    state.next_job = fact.upto + 1
    return Changes()


def _dispatched(state: ControllerState, fact: F.JobDispatched) -> Changes:
    job = state.job(fact.job)
    if job.attempt != fact.attempt:
        raise LocalProtocolError(f"dispatch of job {fact.job} names attempt {fact.attempt}, job is at {job.attempt}")
    next_state(job.state, JobTransition.DISPATCH)  # raises, changing nothing, if not allowed
    _check_placement(state, job, fact.agent, fact.gpus, fit=True)
    job.state = next_state(job.state, JobTransition.DISPATCH)
    job.gpu_ids = fact.gpus
    _place(state, job, fact.agent)
    return Changes(jobs=(job.id,), agents=(fact.agent,))


def _adopted(state: ControllerState, fact: F.JobAdopted) -> Changes:
    job = state.job(fact.job)
    if job.attempt != fact.attempt:
        raise LocalProtocolError(f"adoption of job {fact.job} names attempt {fact.attempt}, job is at {job.attempt}")
    next_state(job.state, JobTransition.ADOPT)
    # An adopted attempt runs already: its memory, gres and GPUs are what they are (a GPU a dispatch
    # gave away meanwhile is shared until one of them ends; nothing more is placed on it).
    _check_placement(state, job, fact.agent, fact.gpus, fit=False)
    job.state = next_state(job.state, JobTransition.ADOPT)
    job.gpu_ids = fact.gpus
    _place(state, job, fact.agent)
    if fact.started_at is not None:
        job.started_at = fact.started_at
    return Changes(jobs=(job.id,), agents=(fact.agent,))


def _started(state: ControllerState, fact: F.JobStarted) -> Changes:
    job = _require_running(state, fact.job, fact.attempt)
    if job.started_at is not None:
        raise LocalProtocolError(f"job {fact.job} attempt {fact.attempt} already has a start time")
    job.started_at = fact.started_at
    return Changes(jobs=(job.id,))


def _finished(state: ControllerState, fact: F.JobFinished) -> Changes:
    job = _require_running(state, fact.job, fact.attempt)
    job.usage = fact.usage  # the latest finished attempt's, a retried one's too
    _charge(state, job, fact.started_at if fact.started_at is not None else job.started_at, fact.finished_at)
    if job.requeue_requested and not job.cancel_requested:
        # A user's requeue of the running attempt (a cancel asked after it wins): its exit stays in
        # this fact only, never the job's outcome (INV-REQUEUE-ONCE); not a retry.
        return _back_to_pending(state, job)
    job.requeue_requested = False
    if retry_due(job.spec, retried=job.retried, exit_code=fact.exit_code, signal=fact.signal,
                 timed_out=fact.timed_out, cancel_requested=job.cancel_requested, oom=fact.oom):
        return _retry(state, job)
    transition = finish_transition(exit_code=fact.exit_code, signal=fact.signal, cancel_requested=job.cancel_requested)
    if fact.oom and transition is JobTransition.FINISH_OK:
        transition = JobTransition.FINISH_FAILED  # killed for its memory: never a success
    job.state = next_state(job.state, transition)
    job.exit_code, job.signal, job.finished_at = fact.exit_code, fact.signal, fact.finished_at
    if fact.timed_out and job.state is JobState.FAILED:
        job.reason = TIMEOUT_REASON
    elif fact.oom and job.state is JobState.FAILED:
        job.reason = OOM_REASON
    elif fact.not_run is not None and job.state is JobState.FAILED:
        job.reason = NOT_RUN_PREFIX + fact.not_run
    if fact.started_at is not None and job.started_at is None:
        job.started_at = fact.started_at
    agent = _release(state, job)
    # A completion makes the jobs waiting on this one ready: they are noted again.
    return Changes(jobs=(job.id, *state.dependants.get(job.id, ())), agents=(agent,))


def _charge(state: ControllerState, job: JobRecord, start: float | None, end: float | None) -> None:
    """Fair share's usage (model/priority.py): the attempt's CPUs from its start to its end, both
    from facts.  Every way an attempt ends comes here (a finish, a requeue, a confirmed cancel),
    so none goes uncharged; an attempt that never started, or an end a v1 fact did not record,
    charges nothing."""
    if job.owner is not None and start is not None and end is not None:
        state.usage.charge(job.owner.user, job.spec.slots, start, end)


def _next_attempt(job: JobRecord) -> int:
    """The attempt after the current one, above every attempt a lost history used (JobAttemptsReserved)."""
    return max(job.attempt, job.attempts_reserved) + 1


def _attempts_reserved(state: ControllerState, fact: F.JobAttemptsReserved) -> Changes:
    job = state.job(fact.job)
    if job.terminal or fact.upto <= job.attempts_reserved:
        raise LocalProtocolError(f"job {fact.job} is terminal or has attempts up to {job.attempts_reserved} "
                                 f"reserved already, not below {fact.upto}")
    if job.state is JobState.PENDING and fact.upto < job.attempt:
        raise LocalProtocolError(f"job {fact.job} is PENDING at attempt {job.attempt}: {fact.upto} is no "
                                 f"attempt it could still issue")
    if job.state is JobState.RUNNING and fact.upto <= job.attempt:
        raise LocalProtocolError(f"job {fact.job} runs attempt {job.attempt}: {fact.upto} is no attempt "
                                 f"it could still issue")
    job.attempts_reserved = fact.upto
    if job.state is JobState.PENDING:  # the next dispatch carries the attempt above it
        job.attempt = fact.upto + 1
    return Changes(jobs=(job.id,))


def _retry(state: ControllerState, job: JobRecord) -> Changes:
    """The attempt failed and the retry policy wants another: its outcome stays
    in its JobFinished fact, the job goes back to PENDING as attempt + 1."""
    job.state = next_state(job.state, JobTransition.RETRY)
    job.requeue_requested = False
    released = _release(state, job)
    job.attempt = _next_attempt(job)
    job.started_at = None
    job.retried += 1
    return Changes(jobs=(job.id,), agents=(released,))


def _cancel_requested(state: ControllerState, fact: F.JobCancelRequested) -> Changes:
    job = state.job(fact.job)
    if job.state is not JobState.RUNNING or job.cancel_requested:
        raise LocalProtocolError(f"job {fact.job} is not a running job without a cancel request")
    job.cancel_requested = True
    return Changes(jobs=(job.id,))


def _cancelled(state: ControllerState, fact: F.JobCancelled) -> Changes:
    job = state.job(fact.job)
    job.state = next_state(job.state, JobTransition.CANCEL)
    job.cancel_requested = True
    # A hold stays on the cancelled record, as Slurm keeps it (reason JobHeldUser, priority 0);
    # a user's requeue (JobRestarted) clears it.
    job.reason = fact.reason
    job.finished_at = fact.cancelled_at  # its end (None: a fact from before v3 did not say)
    # An after_any / after_not_ok dependant may be ready now.
    return Changes(jobs=(job.id, *state.dependants.get(job.id, ())))


def _held(state: ControllerState, fact: F.JobHeld) -> Changes:
    job = state.job(fact.job)
    if job.state is not JobState.PENDING or job.held:
        raise LocalProtocolError(f"job {fact.job} is not a PENDING job without a hold")
    job.held = True
    return Changes(jobs=(job.id,))


def _released(state: ControllerState, fact: F.JobReleased) -> Changes:
    job = state.job(fact.job)
    if job.state is not JobState.PENDING or not job.held:
        raise LocalProtocolError(f"job {fact.job} is not a held PENDING job")
    job.held = False
    return Changes(jobs=(job.id,))


def _restarted(state: ControllerState, fact: F.JobRestarted) -> Changes:
    job = state.job(fact.job)
    if job.attempt != fact.attempt:
        raise LocalProtocolError(f"restart of job {fact.job} names attempt {fact.attempt}, job is at {job.attempt}")
    job.state = next_state(job.state, JobTransition.RESTART)  # only a terminal job has this entry
    job.attempt = _next_attempt(job)
    job.started_at = job.finished_at = job.exit_code = job.signal = job.reason = job.usage = None
    job.cancel_requested = job.held = False  # a new run, unheld (a hold kept by its cancel ends here)
    job.retried = 0  # a new run: the retry budget starts again
    job.requeues += 1
    # Jobs waiting on this one are not ready again until it completes again.
    return Changes(jobs=(job.id, *state.dependants.get(job.id, ())))


def _cancel_confirmed(state: ControllerState, fact: F.JobCancelConfirmed) -> Changes:
    job = _require_running(state, fact.job, fact.attempt)
    if not job.cancel_requested:
        raise LocalProtocolError(f"job {fact.job} has no cancel request to confirm")
    job.state = next_state(job.state, JobTransition.FINISH_CANCELLED)
    _charge(state, job, job.started_at, fact.confirmed_at)
    job.requeue_requested = False
    agent = _release(state, job)
    return Changes(jobs=(job.id, *state.dependants.get(job.id, ())), agents=(agent,))


def _requeued(state: ControllerState, fact: F.JobRequeued) -> Changes:
    job = _require_running(state, fact.job, fact.attempt)
    job.state = next_state(job.state, JobTransition.REQUEUE)
    _charge(state, job, job.started_at, fact.requeued_at)
    agent = _release(state, job)  # no allocation survives into the next attempt
    job.attempt = _next_attempt(job)
    job.started_at = None
    job.requeues += 1
    job.requeue_requested = False  # a user's requeue asked meanwhile is this same one
    return Changes(jobs=(job.id,), agents=(agent,))


def _back_to_pending(state: ControllerState, job: JobRecord) -> Changes:
    """A user requeued the running attempt (version 7) and it has ended: PENDING as attempt + 1,
    one more requeue (as ``_requeued`` for a lost attempt)."""
    job.state = next_state(job.state, JobTransition.REQUEUE)
    agent = _release(state, job)  # no allocation survives into the next attempt
    job.attempt = _next_attempt(job)
    job.started_at = None
    job.requeues += 1
    job.requeue_requested = False
    return Changes(jobs=(job.id,), agents=(agent,))


def _requeue_requested(state: ControllerState, fact: F.JobRequeueRequested) -> Changes:
    job = _require_running(state, fact.job, fact.attempt)
    if job.requeue_requested or job.cancel_requested:
        raise LocalProtocolError(f"job {fact.job} already has a requeue or cancel request")
    job.requeue_requested = True
    return Changes(jobs=(job.id,))


def _registered(state: ControllerState, fact: F.AgentRegistered) -> Changes:
    existing = state.agents.get(fact.agent)
    if (existing is not None and existing.registered and existing.slots == fact.slots
            and existing.identity == fact.identity and existing.resources == fact.resources):
        raise LocalProtocolError(f"agent {fact.agent} is already registered with {fact.slots} slots")
    info = state.agent(fact.agent)
    if info.identity != fact.identity:  # a new holder: its join generations start afresh
        info.generation = info.confirmed = 0
    info.slots, info.registered, info.identity = fact.slots, True, fact.identity
    info.resources = fact.resources
    return Changes(agents=(fact.agent,))


def _join_generation(state: ControllerState, fact: F.JoinGenerationIssued) -> Changes:
    info = state.agents.get(fact.agent)
    if info is None or not info.registered:
        raise LocalProtocolError(f"unknown agent {fact.agent!r}")
    if fact.generation <= info.generation or fact.confirmed < info.confirmed:
        raise LocalProtocolError(f"agent {fact.agent}'s join generation is already {info.generation} "
                                 f"(confirmed {info.confirmed}), not below {fact.generation} ({fact.confirmed})")
    info.generation, info.confirmed = fact.generation, fact.confirmed
    return Changes()


def _forgotten(state: ControllerState, fact: F.AgentForgotten) -> Changes:
    info = state.agents.get(fact.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {fact.agent!r}")
    if info.running:
        raise LocalProtocolError(f"agent {fact.agent} still has {len(info.running)} job(s) placed on it")
    del state.agents[fact.agent]
    return Changes(agents=(fact.agent,))


def _drained(state: ControllerState, fact: F.AgentDrained) -> Changes:
    info = state.agents.get(fact.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {fact.agent!r}")
    if info.drained:
        raise LocalProtocolError(f"agent {fact.agent} is already drained")
    info.drained = True
    return Changes(agents=(fact.agent,))


def _resumed(state: ControllerState, fact: F.AgentResumed) -> Changes:
    info = state.agents.get(fact.agent)
    if info is None:
        raise LocalProtocolError(f"unknown agent {fact.agent!r}")
    if not info.drained:
        raise LocalProtocolError(f"agent {fact.agent} is not drained")
    info.drained = False
    return Changes(agents=(fact.agent,))
def _partition_fact(state: ControllerState, fact: Any) -> Changes:
    """A partition changed (model/partitions.py): every PENDING job and every agent is noted again
    (the job's partition may have gone down, its limits or the agents in it changed)."""
    state.partitions_configured = apply_partition_fact(state.partitions, state.partitions_configured, fact)
    return Changes(jobs=tuple(j.id for j in state.jobs.values() if j.state is JobState.PENDING),
                   agents=tuple(state.agents))


def _priority_adjusted(state: ControllerState, fact: F.JobPriorityAdjusted) -> Changes:
    job = state.job(fact.job)
    if job.terminal or job.priority_adjust == fact.priority:
        raise LocalProtocolError(f"job {fact.job} is {job.state.value} or has priority adjustment {fact.priority} already")
    job.priority_adjust = fact.priority
    return Changes(jobs=(job.id,))


def _usage_decay_set(state: ControllerState, fact: F.UsageDecaySet) -> Changes:
    if fact.half_life == state.usage.half_life:
        raise LocalProtocolError(f"usage already decays with a half-life of {fact.half_life} s")
    state.usage.half_life = float(fact.half_life)
    return Changes()


def _id_mark_raised(state: ControllerState, fact: F.IdMarkRaised) -> Changes:
    if fact.upto <= state.id_mark:
        raise LocalProtocolError(f"the id mark is already {state.id_mark}, not below {fact.upto}")
    state.id_mark = fact.upto
    return Changes()


def _cluster_created(state: ControllerState, fact: F.ClusterCreated) -> Changes:
    if state.cluster is not None:
        raise LocalProtocolError(f"this history already is cluster {state.cluster}")
    state.cluster = fact.cluster
    return Changes()


_APPLY: dict[type, Any] = {
    F.ClusterCreated: _cluster_created,
    F.JobSubmitted: _submitted,
    F.JobDispatched: _dispatched,
    F.JobAdopted: _adopted,
    F.JobStarted: _started,
    F.JobFinished: _finished,
    F.JobCancelRequested: _cancel_requested,
    F.JobCancelled: _cancelled,
    F.JobCancelConfirmed: _cancel_confirmed,
    F.JobRequeued: _requeued,
    F.JobRequeueRequested: _requeue_requested,
    F.AgentRegistered: _registered,
    F.AgentForgotten: _forgotten,
    F.JobIdsReserved: _ids_reserved,
    F.JobAttemptsReserved: _attempts_reserved,
    F.AgentDrained: _drained,
    F.AgentResumed: _resumed,
    F.JobHeld: _held,
    F.JobReleased: _released,
    F.JobRestarted: _restarted,
    F.IdMarkRaised: _id_mark_raised,
    F.JoinGenerationIssued: _join_generation,
    F.JobPriorityAdjusted: _priority_adjusted,
    F.UsageDecaySet: _usage_decay_set,
    **dict.fromkeys(PARTITION_FACTS, _partition_fact),
}


def replay(facts: list[F.Fact], state: ControllerState | None = None) -> ControllerState:
    """Rebuild state by applying facts in order: the same code as live."""
    state = state if state is not None else ControllerState()
    for fact in facts:
        apply(state, fact)
    return state


def snapshot(state: ControllerState) -> dict[str, Any]:
    """A plain map of the whole state, for fast restart."""
    # v1: agents were [name, slots, registered], without the identity; v2: agents without drained,
    # jobs had 14 fields, no id_mark; v3: agents without join generations.  Rows only ever grow at
    # their end (AgentInfo, JobRecord): restore reads every version's rows the same way.
    data: dict[str, Any] = {"v": 7}  # v6: no usage; v5: no partitions; v4: no agent resources, no job gpu_ids or usage
    data.update((name, getattr(state, name)) for name in STATE_SCALARS)
    data["partitions"] = [p.to_dict() for p in state.partitions.values()]
    data["partitions_configured"] = [p.to_dict() for p in state.partitions_configured]
    data["usage"] = state.usage.rows()
    data["agents"] = [a.row() for a in state.agents.values()]
    data["jobs"] = [j.row() for j in state.jobs.values()]
    return data


def restore(data: dict[str, Any]) -> ControllerState:
    """The inverse of ``snapshot``; derived fields (used, running, the indexes) are recomputed."""
    if data.get("v") not in (1, 2, 3, 4, 5, 6, 7):
        raise ValueError(f"unsupported snapshot version {data.get('v')!r}")
    state = ControllerState(next_job=data["next_job"], facts_applied=data["facts_applied"],
                            cluster=data.get("cluster"), id_mark=data.get("id_mark", 0))
    if data.get("usage") is not None:  # an older snapshot has none: usage starts from nothing
        state.usage = UsageTable.from_rows(data["usage"])
    for row in data.get("partitions", ()):
        partition = Partition.from_dict(row)
        state.partitions[partition.name] = partition
    state.partitions_configured = tuple(Partition.from_dict(row) for row in data.get("partitions_configured", ()))
    for row in data["agents"]:
        if not 3 <= len(row) <= len(AGENT_ROW):
            raise ValueError(f"an agent row has 3 to {len(AGENT_ROW)} fields, not {len(row)}")
        values = dict(zip(AGENT_ROW, row))
        if values.get("resources") is not None:
            values["resources"] = NodeResources.from_dict(values["resources"])
        info = AgentInfo(**values)
        state.agents[info.name] = info
    for row in data["jobs"]:
        job = JobRecord.from_row(row)
        agent, job.agent = job.agent, None
        state.jobs[job.id] = job
        _index_job(state, job)
        if agent is not None:
            _place(state, job, agent)
    state.named = singleton.rebuild(state.jobs) if singleton.any_singleton(state.jobs) else None
    return state
