"""Events the daemon feeds into the models, and the commands they return.

Events carry the time (``now``) and any randomness (round tokens, jitter) as
fields: the model never reads a clock and never draws a random number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ._check import MAX_UID, check_bytes, check_int, check_opt_time, check_opt_uid, check_str, check_time
from .facts import Fact
from .arrays import ArrayRange
from .jobs import JobSpec
from .messages import TOKEN_BYTES, Finished, Join, Message, check_signal_target
from .permissions import Caller
from .priority import check_adjust
from .resources import Owner, Usage


def _conn(ev: object) -> None:
    check_int("conn", ev.conn, minimum=1)  # type: ignore[attr-defined]
    check_time("now", ev.now)  # type: ignore[attr-defined]
    check_opt_time("mono", ev.mono)  # type: ignore[attr-defined]


# ``mono`` (controller events): a monotonic clock reading besides the wall
# clock ``now``.  Silence (``lost_after``) is measured on it, so a wall-clock
# step does not declare every disconnected agent lost; wall time stays for
# what is recorded.  None: measure on ``now`` (a caller with one clock only).


def _caller(ev: object) -> None:
    caller = ev.caller  # type: ignore[attr-defined]
    if caller is not None and not isinstance(caller, Caller):
        raise ValueError("caller must be a Caller or None")


# ``caller`` (client operations): who asks, as the daemon authenticated it (model/permissions.py);
# None is token mode (whoever holds the token may do everything, and jobs have no owner).


def _hold(ev: object) -> None:
    if not isinstance(ev.hold, bool):  # type: ignore[attr-defined]
        raise ValueError("hold must be a bool")


# ---- controller events ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentJoined:
    """The first message on connection ``conn`` was a valid Join.

    Connection numbers grow in the order the daemon accepted the connections:
    a Join on a lower number than the agent's latest joined one is stale.
    """

    conn: int
    join: Join
    token: bytes  # fresh and unguessable, used if a resync round is armed
    now: float
    mono: float | None = None

    def __post_init__(self) -> None:
        _conn(self)
        if not isinstance(self.join, Join):
            raise ValueError("join must be a Join message")
        check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFromAgent:
    conn: int
    message: Message
    now: float
    token: bytes | None = None  # fresh and unguessable, for a round this message may arm
    mono: float | None = None

    def __post_init__(self) -> None:
        _conn(self)
        if self.token is not None:
            check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    conn: int
    now: float
    mono: float | None = None

    def __post_init__(self) -> None:
        _conn(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundDeadlineExpired:
    agent: str
    token: bytes
    now: float
    mono: float | None = None

    def __post_init__(self) -> None:
        check_str("agent", self.agent)
        check_bytes("token", self.token, min_len=TOKEN_BYTES, max_len=TOKEN_BYTES)
        check_time("now", self.now)
        check_opt_time("mono", self.mono)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """Time passed: lost-agent detection (controller), heartbeats and retries (agent)."""

    now: float
    jitter: float = 0.0  # in [0, 1): spreads agent retries
    mono: float | None = None  # the controller measures silence on it (see above)

    def __post_init__(self) -> None:
        check_time("now", self.now)
        check_opt_time("mono", self.mono)
        if not isinstance(self.jitter, (int, float)) or not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitJob:
    spec: JobSpec
    now: float
    # Fresh and random (the daemon draws it): names this submission apart from
    # any other that ever had its id.  None only for callers that predate it.
    uid: str | None = None
    # Queue it even if no registered agent could run it (model/admission.py).
    queue_anyway: bool = False
    caller: Caller | None = None  # who asks (None: token mode)
    hold: bool = False  # version 7: the job starts held, in the same fact group as its submit

    def __post_init__(self) -> None:
        _caller(self)
        if not isinstance(self.spec, JobSpec):
            raise ValueError("spec must be a JobSpec")
        check_time("now", self.now)
        check_opt_uid("uid", self.uid)
        if not isinstance(self.queue_anyway, bool):
            raise ValueError("queue_anyway must be a bool")
        _hold(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitBatch:
    """Submit ``specs`` all or none (``submit_many``, ``reckon submit --file``): model/batches.py."""

    specs: tuple[JobSpec, ...]
    now: float
    uids: tuple[str, ...]  # one fresh uid per job, in order (the daemon draws them)
    queue_anyway: bool = False  # queue even if no registered agent could ever run a job (model/admission.py)
    caller: Caller | None = None  # who asks (None: token mode)
    hold: bool = False  # version 7: every job starts held, in the same fact group as the submit

    def __post_init__(self) -> None:
        _caller(self)
        if not isinstance(self.specs, tuple) or not self.specs:
            raise ValueError("specs must be a non-empty tuple")
        for spec in self.specs:
            if not isinstance(spec, JobSpec):
                raise ValueError("specs must hold JobSpecs")
        check_time("now", self.now)
        if not isinstance(self.uids, tuple) or len(self.uids) != len(self.specs):
            raise ValueError("uids must be a tuple with one uid per spec")
        for uid in self.uids:
            check_str("uid", uid, max_len=MAX_UID)
        if len(set(self.uids)) != len(self.uids):
            raise ValueError("uids must be distinct")
        if not isinstance(self.queue_anyway, bool):
            raise ValueError("queue_anyway must be a bool")
        _hold(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitArray:
    """Submit one job per index of ``array`` from the template ``spec`` (model/arrays.py)."""

    spec: JobSpec
    array: ArrayRange
    now: float
    uids: tuple[str, ...] | None = None  # one fresh uid per job, in index order (None: callers that predate uids)
    queue_anyway: bool = False  # queue even if no registered agent could ever run the jobs (model/admission.py)
    caller: Caller | None = None  # who asks (None: token mode)
    hold: bool = False  # version 7: every job starts held, in the same fact group as the submit

    def __post_init__(self) -> None:
        _caller(self)
        if not isinstance(self.spec, JobSpec):
            raise ValueError("spec must be a JobSpec")
        if self.spec.array_id is not None:
            raise ValueError("the template of an array must not be an array job itself")
        if not isinstance(self.array, ArrayRange):
            raise ValueError("array must be an ArrayRange")
        check_time("now", self.now)
        if self.uids is not None:
            if not isinstance(self.uids, tuple) or len(self.uids) != self.array.count:
                raise ValueError("uids must be a tuple with one uid per array index")
            for uid in self.uids:
                check_opt_uid("uid", uid)
        if not isinstance(self.queue_anyway, bool):
            raise ValueError("queue_anyway must be a bool")
        _hold(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelJob:
    job: str
    now: float
    # True: ``job`` is an array's id, cancel every PENDING / RUNNING job of the
    # array; False: this one job; None: the array if ``job`` names one (like
    # ``scancel`` of an array's id), else the job.
    whole_array: bool | None = None
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_time("now", self.now)
        if self.whole_array is not None and not isinstance(self.whole_array, bool):
            raise ValueError("whole_array must be a bool or None")


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldJob:
    """A user holds a PENDING job (``reckon hold``): it is not dispatched until released."""

    job: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateJob:
    """An operator sets a job's priority adjustment (``reckon update JOB --priority N``)."""

    job: str
    now: float
    priority: int
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_time("now", self.now)
        check_adjust(self.priority)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseJob:
    """A user releases a held job (``reckon release``)."""

    job: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequeueJob:
    """A user asks a job to run again as a new attempt (``reckon requeue``): a finished one at
    once; a RUNNING one (version 7) once its attempt, stopped as for a cancel, has ended."""

    job: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalJob:
    """A user sends a signal to a RUNNING job's processes now (``reckon signal``; version 7).
    Not a fact: nothing durable changes, the agent is told (``Signal``)."""

    job: str
    signal: int
    now: float
    # The target, as scancel's: batch_only (-b) the top process (the batch shell) only; full (-f)
    # every process of the job; neither: every process but the top one (Slurm's steps).
    batch_only: bool = False
    caller: Caller | None = None  # who asks (None: token mode)
    full: bool = False

    def __post_init__(self) -> None:
        _caller(self)
        check_str("job", self.job)
        check_int("signal", self.signal, minimum=1, maximum=64)
        check_time("now", self.now)
        check_signal_target(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchProposed:
    """The scheduler proposes running ``job`` on ``agent``."""

    job: str
    agent: str
    now: float

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_str("agent", self.agent)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchUndelivered:
    """The daemon dropped the Dispatch of (job, attempt) before it left: its
    connection was closing or gone.  The agent never got it."""

    job: str
    attempt: int
    now: float

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_int("attempt", self.attempt, minimum=1)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetAgent:
    """The operator declares a disconnected agent gone (``reckon forget``): requeue its jobs, free its name."""

    agent: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("agent", self.agent)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainAgent:
    """The operator drains an agent (``reckon drain``): no new dispatches there; running jobs finish."""

    agent: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("agent", self.agent)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeAgent:
    """The operator resumes a drained agent (``reckon resume``): it takes new jobs again."""

    agent: str
    now: float
    caller: Caller | None = None  # who asks (None: token mode)

    def __post_init__(self) -> None:
        _caller(self)
        check_str("agent", self.agent)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdMark:
    """What the id mark file outside the database says: ids up to ``upto`` of history ``cluster``
    may have been issued (``model.startup``)."""

    cluster: str | None  # None: a history never named (a log from before ClusterCreated)
    upto: int
    # The controller recorded facts up to this position of its log before it released anything
    # they caused (0: not recorded, a file from before).  A log that ends before it is an older
    # copy, even one taken while the controller ran (an online backup) with the same ``upto``.
    facts: int = 0
    # A start recognised a restored copy and its whole-grace hold had not ended when this was
    # written: a start after it holds for the whole grace again (its own log no longer looks older).
    hold: bool = False

    def __post_init__(self) -> None:
        if self.cluster is not None:
            check_str("cluster", self.cluster, max_len=64)
        check_int("upto", self.upto, minimum=0)
        check_int("facts", self.facts, minimum=0)
        if not isinstance(self.hold, bool):
            raise ValueError("hold must be a bool")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStarted:
    """The controller recovered its state (replay is done) and is about to serve.

    Once per start, first of all events: it decides where job ids continue
    (``id_mark``: the mark file, None when there is none) and opens the start
    gate (no dispatch until the known agents rejoined, or ``grace`` seconds on
    the silence clock passed; 0: no gate).
    """

    now: float
    grace: float
    id_mark: IdMark | None = None
    mono: float | None = None
    # False: this store keeps no mark file (PostgreSQL: the database is restored whole, so
    # its log is the one history), no file is no sign of a copy without it, and ids continue
    # right after the log's last one (a takeover skips none).
    mark_file: bool = True
    # Where the recovered log ends (its last fact's position), to compare with ``id_mark.facts``;
    # None: not known (no comparison).
    facts: int | None = None

    def __post_init__(self) -> None:
        check_time("now", self.now)
        check_opt_time("mono", self.mono)
        if self.facts is not None:
            check_int("facts", self.facts, minimum=0)
        if not isinstance(self.mark_file, bool):
            raise ValueError("mark_file must be a bool")
        if self.id_mark is not None and not self.mark_file:
            raise ValueError("an id_mark comes from a mark file")
        if not isinstance(self.grace, (int, float)) or isinstance(self.grace, bool) or not 0 <= self.grace < 1e9:
            raise ValueError("grace must be a number of seconds >= 0")
        if self.id_mark is not None and not isinstance(self.id_mark, IdMark):
            raise ValueError("id_mark must be an IdMark or None")


@dataclass(frozen=True, slots=True, kw_only=True)
class StartGraceEnded:
    """The timer of a ``StartGraceTimer`` fired."""

    now: float
    mono: float | None = None

    def __post_init__(self) -> None:
        check_time("now", self.now)
        check_opt_time("mono", self.mono)


ControllerEvent = Union[
    AgentJoined, MessageFromAgent, ConnectionClosed, RoundDeadlineExpired, Tick, SubmitJob, CancelJob,
    DispatchProposed, DispatchUndelivered, ForgetAgent, DrainAgent, ResumeAgent,
    SubmitArray, SubmitBatch, HoldJob, ReleaseJob, RequeueJob, SignalJob, UpdateJob,
    ControllerStarted, StartGraceEnded,
]


# ---- agent events --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Connected:
    now: float

    def __post_init__(self) -> None:
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Disconnected:
    now: float

    def __post_init__(self) -> None:
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFromController:
    message: Message
    now: float

    def __post_init__(self) -> None:
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessStarted:
    job: str
    attempt: int
    started_at: float

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_int("attempt", self.attempt, minimum=1)
        check_time("started_at", self.started_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessExited:
    """The supervisor recorded the end of (job, attempt): the agent's ground truth."""

    job: str
    attempt: int
    exit_code: int | None
    signal: int | None
    finished_at: float
    now: float
    # The supervisor's start time, from the same status record: the exit can
    # reach the agent before its ProcessStarted (a short job), or after a
    # restart that lost it, and the start must not be lost with it.
    started_at: float | None = None
    timed_out: bool = False  # the supervisor stopped the process at the job's time limit
    usage: Usage | None = None  # what the attempt used, as the supervisor measured it
    oom: bool = False  # killed for exceeding its memory limit
    not_run: str | None = None  # the supervisor refused to start it (exit 126/127), and why

    def __post_init__(self) -> None:
        # Reuse the wire message's checks: the same fields, the same rules.
        Finished(job=self.job, attempt=self.attempt, exit_code=self.exit_code, signal=self.signal,
                 finished_at=self.finished_at, started_at=self.started_at, timed_out=self.timed_out,
                 usage=self.usage, oom=self.oom, not_run=self.not_run)
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessLost:
    """The agent cannot tell what became of (job, attempt) (no supervisor, no status)."""

    job: str
    attempt: int
    now: float

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_int("attempt", self.attempt, minimum=1)
        check_time("now", self.now)


AgentEvent = Union[Connected, Disconnected, MessageFromController, ProcessStarted, ProcessExited, ProcessLost, Tick]


# ---- commands ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Append:
    """Make these facts durable; commands after it wait for that."""

    facts: tuple[Fact, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Send ``message`` on connection ``conn`` (controller) or to the controller (agent: conn 0)."""

    conn: int
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    conn: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Notify:
    """A change for the scheduler's view (a ``JobNote`` or an ``AgentNote``)."""

    note: object


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRoundTimer:
    agent: str
    token: bytes
    deadline: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundEnded:
    """The round is over (applied, discarded, timed out): its timer scope can end."""

    agent: str
    token: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class StartGraceTimer:
    """Deliver ``StartGraceEnded`` once the silence clock reaches ``deadline``."""

    deadline: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Warn:
    """A condition the operator must hear of: the daemon logs ``message`` once, as a warning."""

    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StartProcess:
    job: str
    attempt: int
    spec: JobSpec
    owner: Owner | None = None  # whom it runs as (Dispatch.owner); None: token mode, the agent's own user
    gpus: tuple[int, ...] = ()  # the GPU indices the controller gave it (CUDA_VISIBLE_DEVICES, RECKON_GPUS)


@dataclass(frozen=True, slots=True, kw_only=True)
class KillProcess:
    job: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalProcess:
    """Agent (version 7): send ``signal`` to the attempt's processes now (its supervisor does)."""

    job: str
    attempt: int
    signal: int
    batch_only: bool = False  # the top process only (SignalJob's)
    full: bool = False  # every process of the job; neither: every process but the top one


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreRecord:
    """Agent: write this local job record durably (insert or replace)."""

    record: object


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteRecord:
    job: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxPut:
    """Agent: make this completion report durable before it is sent."""

    report: Finished


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxDelete:
    job: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreCluster:
    """Agent: from now on this agent's records belong to this controller history."""

    cluster: str
    previous: str | None  # the history whose records were just let go, if any


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreGeneration:
    """Agent: the join generation the controller's Welcome gave, durable before anything is sent after it."""

    generation: int

    def __post_init__(self) -> None:
        check_int("generation", self.generation, minimum=1)


Command = Union[
    Append, Send, Close, Notify, StartRoundTimer, RoundEnded, StartGraceTimer, Warn, StartProcess, KillProcess,
    SignalProcess, StoreRecord, DeleteRecord, OutboxPut, OutboxDelete, StoreCluster, StoreGeneration,
]
