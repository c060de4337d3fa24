"""Facts: the controller's durable history.

Every change to the job table is one of these.  ``state.apply`` is the only
code that turns a fact into a change, and the daemon runs that same function
live and during replay.  A fact encodes to a plain map of ints, floats,
strings, lists and None (``encode``), tagged with its kind and a version, so
the daemon can store it in any codec; ``decode`` still reads every older
version.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union

from ._check import check_int, check_opt_int, check_opt_time, check_opt_uid, check_str, check_time, require_keys
from .jobs import JobSpec
from .messages import MAX_GENERATION, check_identity
from .priority import UsageDecaySet, check_adjust
from .partitions import FACTS as _PARTITION_FACTS, PartitionRemoved, PartitionSet, PartitionsConfigured
from .partitions import decode_fields as _partition_fields, encode_record as _partition_value
from .report_entry import check_not_run
from .resources import NodeResources, Owner, Usage


def _job_attempt(fact: Any) -> None:
    check_str("job", fact.job)
    check_int("attempt", fact.attempt, minimum=1)


def _check_gpus(gpus: Any) -> None:
    if not isinstance(gpus, tuple) or not all(type(i) is int and i >= 0 for i in gpus):
        raise ValueError("gpus must be a tuple of GPU indices")
    if list(gpus) != sorted(set(gpus)):
        raise ValueError("gpus must list each index once, in order")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSubmitted:
    KIND: ClassVar[str] = "job_submitted"
    VERSION: ClassVar[int] = 3  # v1 had no uid (such jobs have uid None); v2 no owner
    job: str
    spec: JobSpec
    submitted_at: float
    # Random, from the daemon: tells this submission from any other that ever
    # had the same id (after a state rollback).  None for v1 facts.
    uid: str | None = None
    # The caller of the submit, whom the job belongs to and runs as (model/permissions.py).
    # None: submitted in token mode (or before owners existed, v1-2).
    owner: Owner | None = None

    def __post_init__(self) -> None:
        check_str("job", self.job)
        if not isinstance(self.spec, JobSpec):
            raise ValueError("spec must be a JobSpec")
        check_time("submitted_at", self.submitted_at)
        check_opt_uid("uid", self.uid)
        if self.owner is not None and not isinstance(self.owner, Owner):
            raise ValueError("owner must be an Owner or None")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDispatched:
    KIND: ClassVar[str] = "job_dispatched"
    VERSION: ClassVar[int] = 2  # v1 had no gpus
    job: str
    attempt: int
    agent: str
    gpus: tuple[int, ...] = ()  # the agent's GPU indices the controller gave this attempt (lowest free)

    def __post_init__(self) -> None:
        _job_attempt(self)
        check_str("agent", self.agent)
        _check_gpus(self.gpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStarted:
    """The agent reported when the process really started."""

    KIND: ClassVar[str] = "job_started"
    VERSION: ClassVar[int] = 1
    job: str
    attempt: int
    started_at: float

    def __post_init__(self) -> None:
        _job_attempt(self)
        check_time("started_at", self.started_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAdopted:
    """An agent proved it runs an attempt that the controller had not placed there."""

    KIND: ClassVar[str] = "job_adopted"
    VERSION: ClassVar[int] = 2  # v1 had no gpus
    job: str
    attempt: int
    agent: str
    started_at: float | None = None
    gpus: tuple[int, ...] = ()  # the GPU indices the agent reported the attempt runs on

    def __post_init__(self) -> None:
        _job_attempt(self)
        check_str("agent", self.agent)
        check_opt_time("started_at", self.started_at)
        _check_gpus(self.gpus)


FINISH_VIA = frozenset({"report", "round"})  # the ways an outcome arrives (JobFinished.via)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFinished:
    """The process of (job, attempt) ended as the agent observed it."""

    KIND: ClassVar[str] = "job_finished"
    VERSION: ClassVar[int] = 5  # v1 had no signal and no started_at; v2 no via and no timed_out; v3 no usage, oom;
    # v4 no not_run
    job: str
    attempt: int
    exit_code: int | None
    signal: int | None
    finished_at: float
    started_at: float | None = None
    # How the outcome reached the controller: one of FINISH_VIA ("report": the
    # agent's completion message; "round": a resync round's report).  None for
    # facts written before version 3, which did not record it.  Provenance, not
    # outcome: two facts with the same outcome are equal however it came (Req 4.1).
    via: str | None = field(default=None, compare=False)
    timed_out: bool = False  # the supervisor stopped the process at the job's time limit
    usage: Usage | None = None  # v4: what the attempt used, as its supervisor measured it
    oom: bool = False  # v4: killed for exceeding its memory limit (the job ends FAILED, reason "oom")
    not_run: str | None = None  # v5: the agent refused to start it, and why (reason "not run: ...")

    def __post_init__(self) -> None:
        _job_attempt(self)
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise ValueError("usage must be a Usage")
        if not isinstance(self.oom, bool):
            raise ValueError("oom must be a bool")
        check_not_run(self.not_run)
        check_opt_int("exit_code", self.exit_code, minimum=-(1 << 31), maximum=(1 << 31) - 1)
        check_opt_int("signal", self.signal, minimum=1, maximum=255)
        if self.exit_code is None and self.signal is None:
            raise ValueError("a finished job needs an exit code or a signal")
        check_time("finished_at", self.finished_at)
        check_opt_time("started_at", self.started_at)
        if self.via is not None and self.via not in FINISH_VIA:
            raise ValueError(f"via must be one of {sorted(FINISH_VIA)} or None, got {self.via!r}")
        if not isinstance(self.timed_out, bool):
            raise ValueError("timed_out must be a bool")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCancelRequested:
    """A user cancelled a running job: the agent is told to kill it."""

    KIND: ClassVar[str] = "job_cancel_requested"
    VERSION: ClassVar[int] = 1
    job: str

    def __post_init__(self) -> None:
        check_str("job", self.job)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCancelled:
    """A pending job was cancelled before it ever ran (again)."""

    KIND: ClassVar[str] = "job_cancelled"
    VERSION: ClassVar[int] = 3  # v1 had no reason; v2 no cancelled_at
    job: str
    reason: str | None = None  # None: a user's cancel; else why (e.g. "dependency 12 ended FAILED")
    # v3: when it was cancelled (the job's end: sacct End, reckon history); None in older facts.
    cancelled_at: float | None = None

    def __post_init__(self) -> None:
        check_str("job", self.job)
        if self.reason is not None:
            check_str("reason", self.reason)
        check_opt_time("cancelled_at", self.cancelled_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobHeld:
    """A user held a PENDING job: it is not dispatched until released."""

    KIND: ClassVar[str] = "job_held"
    VERSION: ClassVar[int] = 1
    job: str

    def __post_init__(self) -> None:
        check_str("job", self.job)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobReleased:
    """A user released a held job."""

    KIND: ClassVar[str] = "job_released"
    VERSION: ClassVar[int] = 1
    job: str

    def __post_init__(self) -> None:
        check_str("job", self.job)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRestarted:
    """A user requeued a finished job: it goes back to PENDING as attempt + 1.

    The finished attempt's facts stay in the log; its outcome leaves the record.
    """

    KIND: ClassVar[str] = "job_restarted"
    VERSION: ClassVar[int] = 1
    job: str
    attempt: int  # the attempt that had finished

    def __post_init__(self) -> None:
        _job_attempt(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRequeueRequested:
    """A user requeued a RUNNING job (version 7): the agent is told to stop the attempt, as for a
    cancel; when it ends the job goes back to PENDING as attempt + 1 (a requeue, not a retry),
    and the attempt's exit is never the job's outcome (INV-REQUEUE-ONCE)."""

    KIND: ClassVar[str] = "job_requeue_requested"
    VERSION: ClassVar[int] = 1
    job: str
    attempt: int  # the running attempt to stop

    def __post_init__(self) -> None:
        _job_attempt(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCancelConfirmed:
    """A cancelled running job's process is gone, its outcome unknown to the agent."""

    KIND: ClassVar[str] = "job_cancel_confirmed"
    VERSION: ClassVar[int] = 2  # v1 had no confirmed_at
    job: str
    attempt: int
    # v2: when the controller gave the attempt up (the event's time): the attempt's end, up to which
    # fair share charges it (model/priority.py).  None in v1 facts, which charged nothing.
    confirmed_at: float | None = None

    def __post_init__(self) -> None:
        _job_attempt(self)
        check_opt_time("confirmed_at", self.confirmed_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRequeued:
    """The current attempt is lost; the job goes back to PENDING with attempt + 1."""

    KIND: ClassVar[str] = "job_requeued"
    VERSION: ClassVar[int] = 2  # v1 had no requeued_at
    job: str
    attempt: int  # the attempt that was lost
    reason: str
    # v2: when the controller gave the attempt up (the event's time): the attempt's end, up to which
    # fair share charges it (model/priority.py).  None in v1 facts, which charged nothing.
    requeued_at: float | None = None

    def __post_init__(self) -> None:
        _job_attempt(self)
        check_str("reason", self.reason)
        check_opt_time("requeued_at", self.requeued_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRegistered:
    """An agent joined for the first time, with a different slot count, or as a new holder of its name."""

    KIND: ClassVar[str] = "agent_registered"
    VERSION: ClassVar[int] = 3  # v1 had no identity; v2 no resources
    agent: str
    slots: int
    identity: str | None = None  # the agent that holds the name from now on; None: an agent without one
    # v3: what it offers beyond CPUs (memory, GPUs, gres) and what it cannot enforce; None: an agent
    # of protocol 5 or older (memory unknown, no GPUs, no gres).
    resources: NodeResources | None = None

    def __post_init__(self) -> None:
        check_str("agent", self.agent)
        check_int("slots", self.slots, minimum=0, maximum=1 << 20)
        if self.identity is not None:
            check_identity("identity", self.identity)
        if self.resources is not None and not isinstance(self.resources, NodeResources):
            raise ValueError("resources must be NodeResources")


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGenerationIssued:
    """The controller accepted a join of the agent holding this name and gave it a new join generation.

    ``confirmed`` is the newest generation the holder has shown it stored (it
    presented it in a Join, or sent anything after the Welcome that carried it):
    a later Join presenting an older one comes from an older copy of its state
    directory (model.names.generation_refusal).
    """

    KIND: ClassVar[str] = "join_generation_issued"
    VERSION: ClassVar[int] = 1
    agent: str
    generation: int
    confirmed: int

    def __post_init__(self) -> None:
        check_str("agent", self.agent)
        check_int("generation", self.generation, minimum=1, maximum=MAX_GENERATION)
        check_int("confirmed", self.confirmed, minimum=0, maximum=self.generation - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentForgotten:
    """The operator declared the agent gone (``reckon forget``): its name is free again.

    Its jobs were requeued by the facts just before this one; the agent and
    its identity binding are dropped.
    """

    KIND: ClassVar[str] = "agent_forgotten"
    VERSION: ClassVar[int] = 1
    agent: str

    def __post_init__(self) -> None:
        check_str("agent", self.agent)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDrained:
    """The operator drained the agent (``reckon drain``): no new dispatches; its running jobs finish."""

    KIND: ClassVar[str] = "agent_drained"
    VERSION: ClassVar[int] = 1
    agent: str

    def __post_init__(self) -> None:
        check_str("agent", self.agent)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResumed:
    """The operator resumed a drained agent (``reckon resume``): it takes new jobs again."""

    KIND: ClassVar[str] = "agent_resumed"
    VERSION: ClassVar[int] = 1
    agent: str

    def __post_init__(self) -> None:
        check_str("agent", self.agent)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAttemptsReserved:
    """No dispatch of ``job`` may carry an attempt up to ``upto`` again: an agent
    reported attempt ``upto`` of this submission, which this history never
    issued (its state was restored from an older copy).  Its outcome was
    answered as stale, so the agent let it go; issuing that (job, attempt)
    again would make the agent take the new dispatch for the old one."""

    KIND: ClassVar[str] = "job_attempts_reserved"
    VERSION: ClassVar[int] = 1
    job: str
    upto: int

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_int("upto", self.upto, minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobIdsReserved:
    """No submit may reuse any id up to ``upto``: an agent reported ids this
    history never issued (its state was rolled back), or the controller started
    on a state behind its id mark (``model.startup``)."""

    KIND: ClassVar[str] = "job_ids_reserved"
    VERSION: ClassVar[int] = 1
    upto: int

    def __post_init__(self) -> None:
        check_int("upto", self.upto, minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdMarkRaised:
    """The id mark outside the database (the daemon's ``id-mark`` file) now
    covers job ids up to ``upto``.  The daemon writes the file durably before
    it commits this fact, so no id above the file's mark is ever committed and
    a restored older database still learns the mark at its start."""

    KIND: ClassVar[str] = "id_mark_raised"
    VERSION: ClassVar[int] = 1
    upto: int

    def __post_init__(self) -> None:
        check_int("upto", self.upto, minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPriorityAdjusted:
    """An operator set a job's priority adjustment (``reckon update JOB --priority N``): its
    priority is the factors' sum less its nice plus ``priority`` (model/priority.py)."""

    KIND: ClassVar[str] = "job_priority_adjusted"
    VERSION: ClassVar[int] = 1
    job: str
    priority: int

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_adjust(self.priority)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterCreated:
    """The first fact of a history: its identity, so agents never mix two histories."""

    KIND: ClassVar[str] = "cluster_created"
    VERSION: ClassVar[int] = 1
    cluster: str

    def __post_init__(self) -> None:
        check_str("cluster", self.cluster, max_len=64)


Fact = Union[
    JobSubmitted, JobDispatched, JobStarted, JobAdopted, JobFinished, JobCancelRequested,
    JobCancelled, JobCancelConfirmed, JobRequeued, AgentRegistered, AgentForgotten, ClusterCreated, JobIdsReserved,
    AgentDrained, AgentResumed,
    JobHeld, JobReleased, JobRestarted,
    IdMarkRaised, JoinGenerationIssued, JobAttemptsReserved, JobRequeueRequested,
    PartitionsConfigured, PartitionSet, PartitionRemoved,  # issue #22: model/partitions.py
    JobPriorityAdjusted, UsageDecaySet,  # issue #22: model/priority.py
]
FACT_TYPES: dict[str, type] = {
    cls.KIND: cls
    for cls in (
        JobSubmitted, JobDispatched, JobStarted, JobAdopted, JobFinished, JobCancelRequested,
        JobCancelled, JobCancelConfirmed, JobRequeued, AgentRegistered, AgentForgotten, ClusterCreated, JobIdsReserved,
        AgentDrained, AgentResumed,
        JobHeld, JobReleased, JobRestarted,
        IdMarkRaised, JoinGenerationIssued, JobAttemptsReserved, JobRequeueRequested,
        *_PARTITION_FACTS, JobPriorityAdjusted, UsageDecaySet,
    )
}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in FACT_TYPES.values()
}  # dataclasses.fields() is slow for a per-fact call


# Fields of issue #20's resources (fact versions above), left out of the map at their defaults so
# a fact without them encodes as before; the version that brought each, for _upgrade.
_NEW_AT_DEFAULT: dict[type, dict[str, tuple[Any, int]]] = {
    JobDispatched: {"gpus": ((), 2)},
    JobAdopted: {"gpus": ((), 2)},
    JobFinished: {"usage": (None, 4), "oom": (False, 4), "not_run": (None, 5)},
    AgentRegistered: {"resources": (None, 3)},
    JobSubmitted: {"owner": (None, 3)},  # v1-2 had no owner (None is what they meant)
    JobCancelled: {"cancelled_at": (None, 3)},  # v1-2 did not record the time
    JobRequeued: {"requeued_at": (None, 2)},  # v1 did not record the time (nor charged the attempt)
    JobCancelConfirmed: {"confirmed_at": (None, 2)},  # v1 likewise
}
# Fields whose value is a record of model/resources.py: encoded by to_dict, decoded by from_dict.
_RECORD_FIELDS: dict[str, Any] = {"usage": Usage.from_dict, "resources": NodeResources.from_dict,
                                  "owner": Owner.from_dict}


def encode(fact: Fact) -> dict[str, Any]:
    """A plain map: ``k`` the kind, ``v`` the version, then the fields."""
    out: dict[str, Any] = {"k": fact.KIND, "v": fact.VERSION}
    omitted = _NEW_AT_DEFAULT.get(type(fact))
    for name in _FIELD_NAMES[type(fact)]:
        value = getattr(fact, name)
        if omitted is not None and name in omitted and value == omitted[name][0]:
            continue
        if isinstance(value, JobSpec):
            value = value.to_dict()
        elif isinstance(value, (Usage, NodeResources, Owner)):
            value = value.to_dict()
        elif isinstance(fact, _PARTITION_FACTS):
            value = _partition_value(value)
        elif name == "gpus":
            value = list(value)
        out[name] = value
    return out


def _upgrade(kind: str, version: int, data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older version's fields to the current shape."""
    if kind == JobFinished.KIND and version == 1:
        # v1 stored only the exit code; a negative code meant "killed by signal -code".
        data = dict(data)
        code = data.get("exit_code")
        if isinstance(code, int) and code < 0:
            data["exit_code"], data["signal"] = None, -code
        else:
            data.setdefault("signal", None)
        data.setdefault("started_at", None)
    if kind == JobFinished.KIND and version < 3 and "via" in data:
        raise ValueError(f"fact {kind} v{version} has unknown fields ['via']")
    for name, (_, since) in _NEW_AT_DEFAULT.get(FACT_TYPES[kind], {}).items():
        if version < since and name in data:
            raise ValueError(f"fact {kind} v{version} has unknown fields [{name!r}]")
    if kind == AgentRegistered.KIND and version == 1 and "identity" in data:
        # v1 had no identity (None, the default, is what it meant): one here is corruption.
        raise ValueError(f"fact {kind} v1 has unknown fields ['identity']")
    return data


def decode(data: Any) -> Fact:
    """Read a stored fact of any version; ``ValueError`` on anything else."""
    require_keys("fact", data, ("k", "v"))
    cls = FACT_TYPES.get(data["k"]) if isinstance(data["k"], str) else None
    if cls is None:
        raise ValueError(f"unknown fact kind {data['k']!r}")
    version = data["v"]
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= cls.VERSION:
        raise ValueError(f"unsupported version {version!r} of fact {cls.KIND}")
    data = _upgrade(cls.KIND, version, data)
    # A field this version does not have is corruption, not something to drop silently.
    names = _FIELD_NAMES[cls]
    extra = set(data).difference(names, ("k", "v"))
    if extra:
        raise ValueError(f"fact {cls.KIND} v{version} has unknown fields {sorted(map(str, extra))}")
    kwargs = {name: data[name] for name in names if name in data}
    if "spec" in kwargs:
        kwargs["spec"] = JobSpec.from_dict(kwargs["spec"])
    if cls in _PARTITION_FACTS:
        kwargs = _partition_fields(kwargs)
    for name, read in _RECORD_FIELDS.items():
        if kwargs.get(name) is not None:
            kwargs[name] = read(kwargs[name])
    if "gpus" in kwargs:
        if not isinstance(kwargs["gpus"], (list, tuple)):
            raise ValueError(f"fact {cls.KIND} gpus must be a list")
        kwargs["gpus"] = tuple(kwargs["gpus"])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"fact {cls.KIND} has wrong fields: {exc}") from None
