"""Wire messages, both directions, and their validating codec.

Every message is a frozen dataclass that checks its own fields.  ``to_wire``
gives a plain map with a ``type`` key (the daemon CBOR-encodes it);
``from_wire`` turns a peer's map back into a message or raises
``RemoteProtocolError`` naming what is wrong.  Messages from the controller
carry ``seq``, its per-connection send counter, so the agent can tell it in a
heartbeat how much of the controller's stream it has processed.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Iterable, Union

from ._check import (
    MAX_NAME,
    check_bytes, check_int, check_opt_uid, check_str, check_time, check_tuple_of,
)
from .errors import RemoteProtocolError
from .jobs import JobSpec
from .output import MAX_OUTPUT_CHUNK, OutputStatus, OutputStream
# EntryStatus and ReportEntry are part of this module's vocabulary (M.EntryStatus, M.ReportEntry).
from .report_entry import EntryStatus, ReportEntry, check_extras, check_job_attempt, check_outcome  # noqa: F401
from .resources import NodeResources, Owner, Usage, check_gpu_indices

# 2: a frame may carry several messages (a CBOR array; the daemon's wire), and
# a round's resync_done acknowledges the completions its report carried.  A
# version 1 agent is still served: its frames hold one message each, and it
# sends reported completions again, which are acked as duplicates.
# 3: a join may carry the agent's durable ``identity`` and an error may be
# ``permanent`` (a refusal a quick retry will not fix); a submission's ``uid``
# travels with dispatch, kill, started, finished and report entries, and an
# agent refuses a dispatch of an attempt it holds for another submission
# (``dispatch_refused``).  The new fields are left out of the map at their
# defaults, so a version 1 or 2 peer never sees them; older agents get no uid
# and are matched by (job, attempt) alone, as before.
# 4: a job spec may carry a time limit, a retry policy, dependencies and its
# array (left out of the spec's map at their defaults); ``finished`` and report
# entries say when the supervisor stopped a process at its time limit
# (``timed_out``, left out while false).  Older agents are still served: a
# version 4 controller sends them nothing they do not know unless a job uses
# the new spec fields (then it is their ``time_limit`` they do not enforce).
# Also 4: a job's output is read through the controller (``output_read`` to the
# agent, ``output_chunk`` back; outside the controller's numbered stream, so
# without ``seq``), sent only to agents that joined with version >= 4; a job
# spec may name ``output`` / ``error`` path patterns (left out while unset).
# Also 4: an error may name the ``leader``: the controller that answered is a
# standby (several controllers share one PostgreSQL, one leads) and this is
# where the leader is ("" when it does not know); left out for older agents.
# 5: an error carries a ``code`` (``RefusalCode``), from which the agent model decides how soon to
# try again (``model.agent.refusal_retry``), not from the words of its reason; left out for older
# agents, which read ``permanent`` and ``leader`` as before.  A version 5 agent serves an older
# controller (no code) from those fields.
# 6 (issue #20, a shared cluster): a join says what the machine offers beyond CPUs
# (``resources``: memory, GPU indices, gres, what it cannot enforce); a dispatch carries the GPU
# indices the controller gave the attempt (``gpus``) and whom it runs as (``owner``, never sent to
# an older agent, which runs every job as itself); ``finished`` and report entries carry what the
# attempt used (``usage``) and whether it was killed for its memory (``oom``), and a RUNNING entry
# its GPUs.  All left out at their defaults: a version 5 agent joins without resources (memory
# unknown, no GPUs, no gres) and is served as before.
# 7 (issue #21, Slurm's commands): a job spec may carry a batch script, a warning signal before
# its time limit, an output open mode, after_any / after_not_ok dependencies, labels and
# slurm_env (left out at their defaults); a job using any of them is dispatched only to agents
# of version >= 7.  The controller may send a ``signal`` message (a signal to a RUNNING job's
# processes now), only to agents of version >= 7.
# Also 7 (issue #20's remainder): ``finished`` and report entries of an attempt the agent refused to
# start (its owner has no account there, root without --allow-root-jobs, a cwd it cannot enter:
# exit 126/127) say why (``not_run``, at most 300 characters), left out while None.  An agent
# needs a controller of at least its version, so an older controller never receives it.
PROTOCOL_VERSION = 7
SUPPORTED_VERSIONS = frozenset({1, 2, 3, 4, 5, 6, 7})
SPEC7_SINCE = 7  # the first version whose agents run jobs using the version 7 spec fields
SIGNAL_SINCE = 7  # the first version whose agents are sent ``signal``
RESOURCES_SINCE = 6  # the first version whose agents are sent gpus and send resources and usage
OWNERS_SINCE = 6  # the first version whose agents are sent a job's owner
PERMANENT_SINCE = 3  # the first version whose agents are told a refusal is permanent
REFUSAL_CODES_SINCE = 5  # the first version whose agents are sent refusal codes
OUTPUT_SINCE = 4  # the first version whose agents serve output reads
NOT_LEADER_SINCE = 4  # the first version whose agents are told where the leader is
MAX_GENERATION = 1 << 62  # join generations (Join/Welcome.generation): one per accepted join, never near this
UIDS_SINCE = 3  # the first version whose agents are sent (and send) submission uids
BATCHED_FRAMES_SINCE = 2  # the first version whose peers accept a CBOR array of messages in one frame
MAX_PAGE_ENTRIES = 50_000  # hard cap per message; the configured page size is smaller
TOKEN_BYTES = 16
IDENTITY_HEX = frozenset("0123456789abcdef")


def check_identity(name: str, value: object) -> None:
    """An agent identity: 16 to 64 lowercase hex digits (the agent makes 32, from 16 random bytes)."""
    check_str(name, value, max_len=64)
    assert isinstance(value, str)
    if len(value) < 16 or not IDENTITY_HEX.issuperset(value):
        raise ValueError(f"{name} must be 16 to 64 lowercase hex digits")


class AckOutcome(enum.Enum):
    APPLIED = "applied"  # the report changed the job: it is now terminal with this outcome
    ALREADY_TERMINAL = "already_terminal"  # the job was already finished: nothing changed
    STALE_ATTEMPT = "stale_attempt"  # the report names an attempt (or agent) that is no longer current
    UNKNOWN_JOB = "unknown_job"  # the controller never had such a job


class RefusalCode(enum.Enum):
    """What kind of refusal an ``Error`` is (version 5)."""

    INVALID = "invalid"  # the agent sent something malformed, or not allowed right now
    ROUND_TIMEOUT = "round_timeout"  # its resync report did not arrive in time: its next join arms a fresh round
    STALE_ROUND = "stale_round"  # a report page of a round that is not open (not fatal: the connection goes on)
    STALE_JOIN = "stale_join"  # a Join older than the agent's newest connection
    VERSION = "version"  # its protocol version is not supported
    NAME_HELD = "name_held"  # another agent holds its name, until an operator frees it (reckon forget)
    NAME_HELD_FOR_NOW = "name_held_for_now"  # held back for now (a start's hold, another process of its identity)
    STALE_COPY = "stale_copy"  # its state directory is an older copy of the name holder's
    GENERATIONS_SPENT = "generations_spent"  # its join generation is the last the wire carries: no next one
    NOT_LEADER = "not_leader"  # a standby answered: the leader is elsewhere (``Error.leader``)


#: Refusals only an operator can lift (``Error.permanent``, the only word versions 3 and 4 get).
PERMANENT_REFUSALS = frozenset({RefusalCode.VERSION, RefusalCode.NAME_HELD, RefusalCode.STALE_COPY,
                                RefusalCode.GENERATIONS_SPENT})
#: Errors after which the connection goes on (every other one is followed by a close).
NOT_FATAL_REFUSALS = frozenset({RefusalCode.STALE_ROUND})


_OUTCOME_VALUES = {o.value for o in AckOutcome}
_REFUSAL_VALUES = {c.value for c in RefusalCode}
_OUTPUT_STATUS_VALUES = {s.value for s in OutputStatus}
_STREAM_VALUES = {s.value for s in OutputStream}


# ---- agent -> controller -------------------------------------------------


#: How an agent names a job's output files under its ``log_dir`` (``Join.log_layout``).
LOG_LAYOUTS: dict[str, str] = {
    "attempt-dir": "{job}.{attempt}/{stream}",  # agents before the flat layout: the default when absent
    "flat": "{job}.{attempt}.{stream}",  # one file per stream, no directory per attempt
}


def output_paths(log_dir: str, log_layout: str, job: str, attempt: int) -> tuple[str, str]:
    """Where an agent keeps the stdout and stderr of (job, attempt)."""
    pattern = LOG_LAYOUTS[log_layout]
    return tuple(f"{log_dir}/" + pattern.format(job=job, attempt=attempt, stream=stream)
                 for stream in ("stdout", "stderr"))  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, kw_only=True)
class Join:
    TYPE: ClassVar[str] = "join"
    agent: str
    slots: int
    version: int
    running: int = 0  # how many job processes the agent holds alive right now
    log_dir: str | None = None  # where the agent keeps job output, shown by `reckon show`
    log_layout: str = "attempt-dir"  # how it names the files there (a key of LOG_LAYOUTS)
    identity: str | None = None  # the agent's durable identity (its state directory's), version 3; None: an older agent
    # Lets a controller whose state may be a restored copy tell a returning agent from a newcomer
    # under the same name (model.names).
    cluster: str | None = None  # the controller history (welcome's cluster) it has joined, version 4; None: none yet, or older
    instance: str | None = None  # random per agent process start, version 4: tells a copy of a state directory from a reconnect
    # An older copy of the agent's state directory presents an older one (model.names).
    generation: int | None = None  # the last join generation it stored (welcome's), version 4; 0: none yet; None: older
    # Version 6: what the machine offers beyond its CPUs (``slots``) and what it cannot enforce;
    # None: an older agent (memory unknown, no GPUs, no gres).
    resources: NodeResources | None = None

    def __post_init__(self) -> None:
        check_str("agent", self.agent, max_len=100)
        if self.resources is not None and not isinstance(self.resources, NodeResources):
            raise ValueError("resources must be a resources record")
        if self.generation is not None:
            check_int("generation", self.generation, minimum=0, maximum=MAX_GENERATION)
        if self.identity is not None:
            check_identity("identity", self.identity)
        if self.cluster is not None:
            check_str("cluster", self.cluster, max_len=64)
        if self.instance is not None:
            check_identity("instance", self.instance)
        if self.log_dir is not None:
            check_str("log_dir", self.log_dir, max_len=4096)
        check_str("log_layout", self.log_layout, max_len=100)
        if self.log_layout not in LOG_LAYOUTS:
            raise ValueError(f"log_layout must be one of {sorted(LOG_LAYOUTS)}, got {self.log_layout!r}")
        check_int("slots", self.slots, minimum=0, maximum=1 << 20)
        check_int("version", self.version, minimum=0)
        check_int("running", self.running, minimum=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResyncReport:
    TYPE: ClassVar[str] = "resync_report"
    token: bytes
    page: int
    pages: int
    entries: tuple[ReportEntry, ...]

    def __post_init__(self) -> None:
        check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)
        check_int("pages", self.pages, minimum=1)
        check_int("page", self.page, minimum=0, maximum=self.pages - 1)
        check_tuple_of("entries", self.entries, ReportEntry)
        if len(self.entries) > MAX_PAGE_ENTRIES:
            raise ValueError(f"a page holds at most {MAX_PAGE_ENTRIES} entries")


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    TYPE: ClassVar[str] = "started"
    job: str
    attempt: int
    started_at: float
    uid: str | None = None  # version 3: the submission the process runs for

    def __post_init__(self) -> None:
        check_job_attempt(self)
        check_time("started_at", self.started_at)
        check_opt_uid("uid", self.uid)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """A completion report: sent from the durable outbox until acked."""

    TYPE: ClassVar[str] = "finished"
    job: str
    attempt: int
    exit_code: int | None
    signal: int | None
    finished_at: float
    started_at: float | None = None
    uid: str | None = None  # version 3: the submission the process ran for
    timed_out: bool = False  # version 4: its supervisor stopped the process at the job's time limit
    usage: Usage | None = None  # version 6: what the attempt used, as its supervisor measured it
    oom: bool = False  # version 6: killed for exceeding its memory limit
    not_run: str | None = None  # version 7: the agent refused to start it (exit 126/127), and why

    def __post_init__(self) -> None:
        check_job_attempt(self)
        check_outcome(self)
        check_opt_uid("uid", self.uid)
        if not isinstance(self.timed_out, bool):
            raise ValueError("timed_out must be a bool")
        check_extras(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchRefused:
    """Version 3: the agent will not run this dispatch (it holds the attempt for
    another submission); the controller requeues it under a new attempt number."""

    TYPE: ClassVar[str] = "dispatch_refused"
    job: str
    attempt: int
    reason: str
    uid: str | None = None  # the refused dispatch's uid

    def __post_init__(self) -> None:
        check_job_attempt(self)
        check_opt_uid("uid", self.uid)
        check_str("reason", self.reason, max_len=2000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    TYPE: ClassVar[str] = "heartbeat"
    running: int  # count of (job, attempt) the agent holds: alive or finished but unacked
    digest: int  # running_digest() of that set
    seen_seq: int  # the last controller message the agent processed

    def __post_init__(self) -> None:
        check_int("running", self.running, minimum=0)
        check_int("digest", self.digest, minimum=0, maximum=(1 << 64) - 1)
        check_int("seen_seq", self.seen_seq, minimum=0)


# ---- controller -> agent -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    TYPE: ClassVar[str] = "welcome"
    seq: int
    version: int
    token: bytes | None  # set when a resync round is armed: the query follows
    query_pages: int = 0
    cluster: str | None = None  # the identity of the controller's history (its fact log)
    # The agent stores it before it sends anything else, and presents it in its next Join.
    generation: int | None = None  # this join's generation, version 4, to a join that had one; None: not given

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_int("version", self.version, minimum=1)
        if self.generation is not None:
            check_int("generation", self.generation, minimum=1, maximum=MAX_GENERATION)
        if self.cluster is not None:
            check_str("cluster", self.cluster, max_len=64)
        if self.token is not None:
            check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)
            check_int("query_pages", self.query_pages, minimum=1)
        else:
            check_int("query_pages", self.query_pages, minimum=0, maximum=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResyncQuery:
    TYPE: ClassVar[str] = "resync_query"
    seq: int
    token: bytes
    page: int
    pages: int
    jobs: tuple[tuple[str, int], ...]  # (job, attempt) the controller places on this agent

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)
        check_int("pages", self.pages, minimum=1)
        check_int("page", self.page, minimum=0, maximum=self.pages - 1)
        check_tuple_of("jobs", self.jobs, tuple)
        if len(self.jobs) > MAX_PAGE_ENTRIES:
            raise ValueError(f"a page holds at most {MAX_PAGE_ENTRIES} entries")
        if all(len(p) == 2 and type(p[0]) is str and 0 < len(p[0]) <= MAX_NAME and type(p[1]) is int
               and p[1] >= 1 for p in self.jobs):
            return  # the common case in one pass (a page has up to 10k pairs); else say what is wrong
        for pair in self.jobs:
            if len(pair) != 2:
                raise ValueError("a query entry is (job, attempt)")
            check_str("job", pair[0])
            check_int("attempt", pair[1], minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResyncDone:
    """The round's report is applied and durable.

    It also acknowledges every FINISHED entry of that report, as an ``Ack``
    would: the agent does not send those completions again one by one.
    """

    TYPE: ClassVar[str] = "resync_done"
    seq: int
    token: bytes

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    TYPE: ClassVar[str] = "dispatch"
    seq: int
    job: str
    attempt: int
    spec: JobSpec
    uid: str | None = None  # version 3: the submission; sent only to agents that joined with version >= 3
    owner: Owner | None = None  # version 6: whom the job runs as (None: token mode, the agent's own user)
    gpus: tuple[int, ...] = ()  # version 6: the agent's GPU indices this attempt was given (JobDispatched.gpus)

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_job_attempt(self)
        if not isinstance(self.spec, JobSpec):
            raise ValueError("spec must be a job spec")
        check_opt_uid("uid", self.uid)
        if self.owner is not None and not isinstance(self.owner, Owner):
            raise ValueError("owner must be an Owner or None")
        check_gpu_indices("gpus", self.gpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class Kill:
    TYPE: ClassVar[str] = "kill"
    seq: int
    job: str
    attempt: int
    uid: str | None = None  # version 3: kill only the process of this submission (None: whatever holds the attempt)

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_job_attempt(self)
        check_opt_uid("uid", self.uid)


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal:
    """Version 7: send ``signal`` now to the RUNNING attempt's processes (``reckon signal``,
    ``scancel --signal``): the top process only with ``batch_only``; every process of the job
    with ``full``; else every process but the top one (Slurm's steps, not the batch shell)."""

    TYPE: ClassVar[str] = "signal"
    seq: int
    job: str
    attempt: int
    signal: int  # a signal number, 1..64
    batch_only: bool = False
    uid: str | None = None  # only the process of this submission (as Kill's)
    full: bool = False

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_job_attempt(self)
        check_int("signal", self.signal, minimum=1, maximum=64)
        check_signal_target(self)
        check_opt_uid("uid", self.uid)


def check_signal_target(obj: object) -> None:
    """``batch_only`` and ``full`` (a signal's target): bools, not both."""
    batch_only, full = obj.batch_only, obj.full  # type: ignore[attr-defined]
    if not isinstance(batch_only, bool) or not isinstance(full, bool):
        raise ValueError("batch_only and full must be bools")
    if batch_only and full:
        raise ValueError("a signal goes to the top process only (batch_only) or to the whole job (full), not both")


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    TYPE: ClassVar[str] = "ack"
    seq: int
    job: str
    attempt: int
    outcome: AckOutcome

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=1)
        check_job_attempt(self)
        if not isinstance(self.outcome, AckOutcome):
            raise ValueError("outcome must be an AckOutcome")


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """A refusal: what was wrong.  ``fatal`` errors are followed by a close.

    A ``permanent`` one (version 3) will not go away by itself (the name is
    held by another agent, an unsupported version): the agent retries it at
    its slow refusal pace, not its fast outage pace, and logs it once.
    An error with a ``leader`` (version 4) comes from a standby controller:
    it does not lead, and the leader is at that URL ("": not known right now).
    Its ``code`` (version 5) says what kind of refusal it is; ``fatal``,
    ``permanent`` and ``leader`` must agree with it (``refusal`` builds them).
    """

    TYPE: ClassVar[str] = "error"
    seq: int
    reason: str
    fatal: bool = True
    permanent: bool = False  # version 3: an operator must act before a retry can succeed
    leader: str | None = None  # version 4: "not the leader; the leader is here" (None: not that case)
    code: RefusalCode | None = None  # version 5: what kind of refusal (None: an older controller, or none given)

    def __post_init__(self) -> None:
        check_int("seq", self.seq, minimum=0)
        if self.code is not None:
            if not isinstance(self.code, RefusalCode):
                raise ValueError("code must be a RefusalCode")
            if self.fatal is (self.code in NOT_FATAL_REFUSALS):
                raise ValueError(f"a {self.code.value} error is {'not ' if self.fatal else ''}fatal")
            if self.permanent is not (self.code in PERMANENT_REFUSALS):
                raise ValueError(f"a {self.code.value} error is {'not ' if self.permanent else ''}permanent")
            if (self.leader is not None) is not (self.code is RefusalCode.NOT_LEADER):
                raise ValueError("an error names the leader exactly when its code is not_leader")
        if self.leader is not None:
            check_str("leader", self.leader, max_len=2000, allow_empty=True)
            if not self.fatal or self.permanent:
                raise ValueError("a not-the-leader error is fatal (the standby closes) and not permanent")
        check_str("reason", self.reason, max_len=2000)
        if not isinstance(self.fatal, bool):
            raise ValueError("fatal must be a boolean")
        if not isinstance(self.permanent, bool):
            raise ValueError("permanent must be a boolean")
        if self.permanent and not self.fatal:
            raise ValueError("a permanent error is also fatal")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRead:
    """Version 4: read part of an attempt's output file (``reckon logs``).

    Not part of the controller's numbered stream (no ``seq``): it changes no
    state, and the agent answers it with one ``output_chunk`` of the same
    ``request``, whatever state its session is in.
    """

    TYPE: ClassVar[str] = "output_read"
    request: int  # the controller's id for this read, echoed in the answer
    job: str
    attempt: int
    stream: OutputStream  # stdout or stderr
    offset: int  # the byte to start at
    limit: int  # at most this many bytes in the answer

    def __post_init__(self) -> None:
        check_int("request", self.request, minimum=1)
        check_job_attempt(self)
        if not isinstance(self.stream, OutputStream):
            raise ValueError("stream must be an OutputStream")
        check_int("offset", self.offset, minimum=0)
        check_int("limit", self.limit, minimum=1, maximum=MAX_OUTPUT_CHUNK)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputChunk:
    """Version 4: the answer to one ``output_read``."""

    TYPE: ClassVar[str] = "output_chunk"
    request: int  # the read's request id
    status: OutputStatus  # data, or why there is none
    data: bytes = b""  # the bytes from the read's offset (status data only; empty: nothing more yet)
    size: int = 0  # the file's size when it was read
    path: str | None = None  # where the agent keeps (or kept) this output
    reason: str = ""  # for a status other than data: what the agent found, in words

    def __post_init__(self) -> None:
        check_int("request", self.request, minimum=1)
        if not isinstance(self.status, OutputStatus):
            raise ValueError("status must be an OutputStatus")
        check_bytes("data", self.data, min_len=0, max_len=MAX_OUTPUT_CHUNK)
        if self.data and self.status is not OutputStatus.DATA:
            raise ValueError(f"an output chunk of status {self.status.value} carries no data")
        check_int("size", self.size, minimum=0)
        if self.path is not None:
            check_str("path", self.path, max_len=4096)
        check_str("reason", self.reason, allow_empty=True, max_len=2000)


AgentMessage = Union[Join, ResyncReport, Started, Finished, Heartbeat, DispatchRefused, OutputChunk]
ControllerMessage = Union[Welcome, ResyncQuery, ResyncDone, Dispatch, Kill, Ack, Error, OutputRead]
Message = Union[AgentMessage, ControllerMessage]

TO_CONTROLLER: dict[str, type] = {c.TYPE: c for c in (Join, ResyncReport, Started, Finished, Heartbeat,
                                                       DispatchRefused, OutputChunk)}
TO_AGENT: dict[str, type] = {c.TYPE: c for c in (Welcome, ResyncQuery, ResyncDone, Dispatch, Kill, Ack, Error,
                                                  OutputRead, Signal)}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # dataclasses.fields() is slow for a per-message call

# Fields newer than version 2, left out of the map at their default: an older
# peer's decoder refuses fields it does not know, and never needs these.  A
# submission's ``uid`` is left out while None, whatever the message.
_OMITTED_AT_DEFAULT: dict[type, dict[str, Any]] = {
    cls: {"uid": None} for cls in (Dispatch, Kill, Started, Finished, DispatchRefused)}
_OMITTED_AT_DEFAULT[Finished] = {"uid": None, "timed_out": False, "usage": None, "oom": False, "not_run": None}
_OMITTED_AT_DEFAULT[Join] = {"identity": None, "cluster": None, "instance": None, "generation": None,
                             "resources": None}
_OMITTED_AT_DEFAULT[Dispatch] = {"uid": None, "owner": None, "gpus": ()}
_OMITTED_AT_DEFAULT[Welcome] = {"generation": None}
_OMITTED_AT_DEFAULT[Error] = {"permanent": False, "leader": None, "code": None}
_OMITTED_AT_DEFAULT[Signal] = {"uid": None, "batch_only": False, "full": False}


def to_wire(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"type": msg.TYPE}
    omitted = _OMITTED_AT_DEFAULT.get(type(msg))
    for name in _field_names(type(msg)):
        value = getattr(msg, name)
        if omitted is not None and name in omitted and value == omitted[name]:
            continue
        if isinstance(value, JobSpec):
            value = value.agent_dict()  # messages carry specs only to agents (Dispatch)
        elif isinstance(value, (NodeResources, Usage)):
            value = value.to_dict()
        elif isinstance(value, Owner):
            value = value.to_dict()
        elif name == "gpus":
            value = list(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        elif name == "entries":
            value = [e.to_wire() for e in value]
        elif name == "jobs":
            value = [list(p) for p in value]
        out[name] = value
    return out


def _from_wire(data: Any, table: dict[str, type]) -> Message:
    if not isinstance(data, dict):
        raise ValueError(f"a message must be a map, got {type(data).__name__}")
    kind = data.get("type")
    cls = table.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown message type {kind!r}")
    names = _field_names(cls)
    extra = set(data).difference(names, ("type",))
    if extra:
        raise ValueError(f"{kind} message has unknown fields {sorted(map(str, extra))}")
    kwargs = {k: v for k, v in data.items() if k != "type"}
    if "spec" in kwargs:
        kwargs["spec"] = JobSpec.from_dict(kwargs["spec"])
    if cls is Dispatch and kwargs.get("owner") is not None:
        kwargs["owner"] = Owner.from_dict(kwargs["owner"])
    if kwargs.get("resources") is not None:
        kwargs["resources"] = NodeResources.from_dict(kwargs["resources"])
    if kwargs.get("usage") is not None:
        kwargs["usage"] = Usage.from_dict(kwargs["usage"])
    if "gpus" in kwargs:
        if not isinstance(kwargs["gpus"], list):
            raise ValueError("gpus must be a list")
        kwargs["gpus"] = tuple(kwargs["gpus"])
    if "outcome" in kwargs:
        if kwargs["outcome"] not in _OUTCOME_VALUES:
            raise ValueError(f"unknown ack outcome {kwargs['outcome']!r}")
        kwargs["outcome"] = AckOutcome(kwargs["outcome"])
    if cls is Error and kwargs.get("code") is not None:
        if kwargs["code"] not in _REFUSAL_VALUES:
            raise ValueError(f"unknown refusal code {kwargs['code']!r}")
        kwargs["code"] = RefusalCode(kwargs["code"])
    if cls is OutputChunk and "status" in kwargs:
        if kwargs["status"] not in _OUTPUT_STATUS_VALUES:
            raise ValueError(f"unknown output status {kwargs['status']!r}")
        kwargs["status"] = OutputStatus(kwargs["status"])
    if cls is OutputRead and "stream" in kwargs:
        if kwargs["stream"] not in _STREAM_VALUES:
            raise ValueError(f"unknown output stream {kwargs['stream']!r}")
        kwargs["stream"] = OutputStream(kwargs["stream"])
    if "entries" in kwargs:
        if not isinstance(kwargs["entries"], list):
            raise ValueError("entries must be a list")
        kwargs["entries"] = tuple(ReportEntry.from_wire(e) for e in kwargs["entries"])
    if "jobs" in kwargs:
        if not isinstance(kwargs["jobs"], list):
            raise ValueError("jobs must be a list")
        kwargs["jobs"] = tuple(tuple(p) if isinstance(p, list) else p for p in kwargs["jobs"])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{kind} message: {exc}") from None


def from_wire(data: Any, *, to: str) -> Message:
    """Decode a peer's map.  ``to`` is ``"controller"`` or ``"agent"`` (the receiver)."""
    table = TO_CONTROLLER if to == "controller" else TO_AGENT
    try:
        return _from_wire(data, table)
    except (ValueError, TypeError, KeyError) as exc:
        raise RemoteProtocolError(f"malformed message: {exc}") from None


def pair_hash(job: str, attempt: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{job}\0{attempt}".encode(), digest_size=8).digest(), "little")


def running_digest(pairs: Iterable[tuple[str, int]]) -> int:
    """An order-free digest of a set of (job, attempt): XOR of 64-bit hashes."""
    acc = 0
    for job, attempt in pairs:
        acc ^= pair_hash(job, attempt)
    return acc


def pages(items: list[Any], page_size: int) -> list[list[Any]]:
    """Split into pages of at most ``page_size``; an empty list is one empty page."""
    if page_size < 1:
        raise ValueError("page size must be >= 1")
    if not items:
        return [[]]
    return [items[i : i + page_size] for i in range(0, len(items), page_size)]


def refusal(version: int, code: RefusalCode, reason: str, *, seq: int = 0, leader: str | None = None) -> Error:
    """The ``Error`` of a refusal, for an agent of protocol ``version``: fatal and permanent as the
    code says; the code itself only to agents that read codes (version 5), ``permanent`` only to
    those that read it (version 3)."""
    codes = version >= REFUSAL_CODES_SINCE
    return Error(seq=seq, reason=reason, fatal=code not in NOT_FATAL_REFUSALS,
                 permanent=code in PERMANENT_REFUSALS and version >= PERMANENT_SINCE,
                 leader=leader if code is RefusalCode.NOT_LEADER and version >= NOT_LEADER_SINCE else None,
                 code=code if codes else None)


def not_the_leader(version: int, leader: str) -> Error:
    """A standby's answer to an agent that joined with protocol ``version``: fatal, not permanent
    (leadership moves), naming the leader to agents that understand it (version 4)."""
    reason = f"not the leader: {'the leader is ' + leader if leader else 'no controller leads right now'}"
    return refusal(version, RefusalCode.NOT_LEADER, reason, leader=leader)
