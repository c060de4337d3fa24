"""Events the daemon feeds into the models, and the commands they return.

Events carry the time (``now``) and any randomness (round tokens, jitter) as
fields: the model never reads a clock and never draws a random number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ._check import check_bytes, check_int, check_opt_time, check_opt_uid, check_str, check_time
from .facts import Fact
from .jobs import JobSpec
from .messages import TOKEN_BYTES, Finished, Join, Message


def _conn(ev: object) -> None:
    check_int("conn", ev.conn, minimum=1)  # type: ignore[attr-defined]
    check_time("now", ev.now)  # type: ignore[attr-defined]
    check_opt_time("mono", ev.mono)  # type: ignore[attr-defined]


# ``mono`` (controller events): a monotonic clock reading besides the wall
# clock ``now``.  Silence (``lost_after``) is measured on it, so a wall-clock
# step does not declare every disconnected agent lost; wall time stays for
# what is recorded.  None: measure on ``now`` (a caller with one clock only).


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

    def __post_init__(self) -> None:
        if not isinstance(self.spec, JobSpec):
            raise ValueError("spec must be a JobSpec")
        check_time("now", self.now)
        check_opt_uid("uid", self.uid)
        if not isinstance(self.queue_anyway, bool):
            raise ValueError("queue_anyway must be a bool")


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelJob:
    job: str
    now: float

    def __post_init__(self) -> None:
        check_str("job", self.job)
        check_time("now", self.now)


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

    def __post_init__(self) -> None:
        check_str("agent", self.agent)
        check_time("now", self.now)


ControllerEvent = Union[
    AgentJoined, MessageFromAgent, ConnectionClosed, RoundDeadlineExpired, Tick, SubmitJob, CancelJob,
    DispatchProposed, DispatchUndelivered, ForgetAgent,
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

    def __post_init__(self) -> None:
        # Reuse the wire message's checks: the same fields, the same rules.
        Finished(job=self.job, attempt=self.attempt, exit_code=self.exit_code, signal=self.signal,
                 finished_at=self.finished_at, started_at=self.started_at)
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
class StartProcess:
    job: str
    attempt: int
    spec: JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class KillProcess:
    job: str
    attempt: int


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


Command = Union[
    Append, Send, Close, Notify, StartRoundTimer, RoundEnded, StartProcess, KillProcess, StoreRecord,
    DeleteRecord, OutboxPut, OutboxDelete, StoreCluster,
]
