"""Jobs: their states, the one transition table, the spec and the record."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any

from ._check import check_int, check_str, check_tuple_of, require_keys
from .errors import LocalProtocolError
from .output_paths import check_pattern
from .priority import check_nice
from .resources import MAX_GPUS, MAX_MEM, Owner, Usage, check_gres, format_size


class JobState(enum.Enum):
    PENDING = "PENDING"  # waiting for the scheduler; owned by no agent
    RUNNING = "RUNNING"  # dispatched to one agent for the current attempt
    COMPLETED = "COMPLETED"  # the process exited 0 (terminal)
    FAILED = "FAILED"  # the process exited non-zero or died by a signal (terminal)
    CANCELLED = "CANCELLED"  # cancelled before it ran, or its process is confirmed gone after a cancel (terminal)
# A job stopped at its time limit ends FAILED with reason "timeout" (no sixth
# state: a client that knows the five states reads every job correctly).


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})


class JobTransition(enum.Enum):
    DISPATCH = "dispatch"  # the scheduler placed the job and the controller sent it
    ADOPT = "adopt"  # an agent reported running an attempt the controller had not placed there
    CANCEL = "cancel"  # a user cancelled a job that was not running
    FINISH_OK = "finish_ok"  # the agent saw exit code 0
    FINISH_FAILED = "finish_failed"  # the agent saw a non-zero exit or a signal
    FINISH_CANCELLED = "finish_cancelled"  # the process is gone after a cancel was requested
    REQUEUE = "requeue"  # the attempt is lost (unrecognized, lost agent): run it again
    RETRY = "retry"  # the attempt failed and the job's retry policy asks for another attempt
    RESTART = "restart"  # a user requeued a finished job: it runs again as a new attempt


# The job machine.  A job starts PENDING; the only way out of PENDING towards
# an agent is DISPATCH (or ADOPT when an agent proves it already runs the
# attempt); RUNNING ends in one of the three terminal states or goes back to
# PENDING with a new attempt (lost, or a retry).  Terminal states have one
# entry each, RESTART (a user's requeue): no report, replay or restart can
# move a finished job; a missing entry raises and changes nothing.
JOB_TRANSITIONS: dict[tuple[JobState, JobTransition], JobState] = {
    (JobState.PENDING, JobTransition.DISPATCH): JobState.RUNNING,
    (JobState.PENDING, JobTransition.ADOPT): JobState.RUNNING,
    (JobState.PENDING, JobTransition.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, JobTransition.FINISH_OK): JobState.COMPLETED,
    (JobState.RUNNING, JobTransition.FINISH_FAILED): JobState.FAILED,
    (JobState.RUNNING, JobTransition.FINISH_CANCELLED): JobState.CANCELLED,
    (JobState.RUNNING, JobTransition.REQUEUE): JobState.PENDING,
    (JobState.RUNNING, JobTransition.RETRY): JobState.PENDING,
    # The only ways out of a terminal state: a user's explicit requeue (a
    # JobRestarted fact), which starts a new attempt and keeps the old one's
    # facts in the log.
    (JobState.COMPLETED, JobTransition.RESTART): JobState.PENDING,
    (JobState.FAILED, JobTransition.RESTART): JobState.PENDING,
    (JobState.CANCELLED, JobTransition.RESTART): JobState.PENDING,
}


def next_state(state: JobState, transition: JobTransition) -> JobState:
    """Look the transition up in the table; a missing entry is a protocol error."""
    try:
        return JOB_TRANSITIONS[(state, transition)]
    except KeyError:
        raise LocalProtocolError(f"job transition {transition.value!r} is not allowed from {state.value}") from None


def allowed(state: JobState, transition: JobTransition) -> bool:
    return (state, transition) in JOB_TRANSITIONS


MAX_SLOTS = 1 << 16
MAX_ARGS = 4096
MAX_ARG_LEN = 1 << 16
MAX_RETRIES = 1000
MAX_AFTER = 1000  # dependencies of one job
MAX_TIME_LIMIT = 365 * 24 * 3600.0  # a year, in seconds
# Spec fields added in protocol version 4, with their defaults: to_dict leaves a
# field at its default out, so a spec without them encodes exactly as before
# (old facts re-encode byte for byte, old agents decode new dispatches).
V4_SPEC_DEFAULTS: dict[str, Any] = {
    "time_limit": None, "retries": 0, "retry_on_exit": (), "after": (),
    "array_id": None, "array_index": None, "array_max": None,
}
# Version 7 (issue #21, what Slurm's commands ask): left out at these defaults as well, so a
# spec without them is the version 6 spec byte for byte.  A job using any of them is dispatched
# only to agents of version >= 7 (``uses_v7``): an older one would run it silently wrong.
V7_SPEC_DEFAULTS: dict[str, Any] = {
    "script": None, "warn_signal": None, "warn_before": 0, "warn_batch_only": False,
    "open_mode": None, "after_any": (), "after_not_ok": (), "labels": (), "slurm_env": False,
}
# Version 8 (issue #22 and #21's remainder): what only the controller uses to schedule (when a
# job may begin, its partition, its nice value ...).  Left out at these defaults like the rest;
# kept in the fact log, never sent to agents (``agent_dict``): an agent has nothing to do with
# them, so they need no agent version.
V8_SPEC_DEFAULTS: dict[str, Any] = {
    "partition": None,  # [partitions] model/partitions.py
    "begin": None, "singleton": False,  # model21: --begin, --dependency=singleton (model/begin.py, model/singleton.py)
    "nice": 0,  # --nice: priority -= nice (model/priority.py)
}
MAX_BEGIN = 1e11  # an epoch time (year 5138): a finite number the wire and sqlite carry exactly
MAX_SCRIPT = 4 << 20  # a batch script's text, in UTF-8 bytes (Slurm's default max_script_size)
MAX_SIGNAL = 64  # signal numbers 1..64 (SIGRTMAX on Linux)
MAX_WARN_BEFORE = 65535  # seconds (Slurm's --signal @ limit)
OPEN_MODES = ("append", "truncate")
MAX_LABELS = 16
MAX_LABEL_KEY = 32
MAX_LABEL_VALUE = 1024
_LABEL_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a user submitted: immutable for the job's whole life."""

    name: str
    command: tuple[str, ...]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    slots: int = 1
    # Version 4.  The supervisor stops the process this many seconds after it
    # started (SIGTERM, SIGKILL after the agent's grace); None: no limit.
    time_limit: float | None = None
    retries: int = 0  # how many times a failed attempt is run again (see model/policy.py)
    retry_on_exit: tuple[int, ...] = ()  # retry only these exit codes (empty: any failure but a timeout)
    after: tuple[str, ...] = ()  # job ids that must all be COMPLETED before this one runs
    array_id: str | None = None  # the array's id (its first job's id) for a job of an array
    array_index: int | None = None  # this job's index in its array
    array_max: int | None = None  # at most this many jobs of the array run at once (None: no limit)
    # Version 4: where the job's stdout / stderr go on the agent, as patterns (model/output.py:
    # %j job id, %a attempt, %% a percent sign; relative to cwd).  None: the agent's own files.
    output: str | None = None
    error: str | None = None
    # Version 6: resources beyond CPUs (``slots`` is the CPU count).  mem: bytes (None: asks no
    # memory, and runs on agents that schedule none); gpus: a count (the controller picks the
    # indices at dispatch); gres: generic countable resources, (name, count) sorted by name.
    mem: int | None = None
    gpus: int = 0
    gres: tuple[tuple[str, int], ...] = ()
    # Version 7 (issue #21).  script: a batch script's text; the agent writes it to a private file
    # (not in cwd) and runs [that file, *command[1:]]: command[0] is only its display name.
    script: str | None = None
    # The supervisor sends warn_signal warn_before seconds before time_limit: to the top process
    # only (warn_batch_only), else to every process of the job but the top one (Slurm's --signal).
    warn_signal: int | None = None
    warn_before: int = 0
    warn_batch_only: bool = False
    open_mode: str | None = None  # "append" or "truncate" the output/error files (None: truncate)
    after_any: tuple[str, ...] = ()  # jobs that must have ended, in any state
    after_not_ok: tuple[str, ...] = ()  # jobs that must have ended FAILED or CANCELLED
    labels: tuple[tuple[str, str], ...] = ()  # free labels (Slurm's comment, account, ...), by key
    slurm_env: bool = False  # the agent adds Slurm's SLURM_* variables to the job's environment
    # Version 8 (scheduling-only, never sent to agents).
    partition: str | None = None  # the partition it asked for (model/partitions.py; None: the default)
    # begin: not dispatched before this epoch
    # time (sbatch --begin; None: at once); singleton: not dispatched while another job of the same
    # name and owner runs, or one submitted before it waits (--dependency=singleton).
    begin: float | None = None
    singleton: bool = False
    nice: int = 0  # --nice (Slurm's): the job's priority less this (model/priority.py); < 0: operators only

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_tuple_of("command", self.command, str)
        if not self.command:
            raise ValueError("command must not be empty")
        if len(self.command) > MAX_ARGS:
            raise ValueError(f"command has more than {MAX_ARGS} arguments")
        for i, arg in enumerate(self.command):
            check_str(f"command[{i}]", arg, allow_empty=i > 0, max_len=MAX_ARG_LEN)
        if self.cwd is not None:
            check_str("cwd", self.cwd, max_len=4096)
        check_tuple_of("env", self.env, tuple)
        for i, pair in enumerate(self.env):
            if len(pair) != 2:
                raise ValueError(f"env[{i}] must be a (key, value) pair")
            check_str(f"env[{i}] key", pair[0], max_len=4096)
            check_str(f"env[{i}] value", pair[1], allow_empty=True, max_len=MAX_ARG_LEN)
            if "=" in pair[0]:
                raise ValueError(f"env[{i}] key must not contain '='")
        check_int("slots", self.slots, minimum=1, maximum=MAX_SLOTS)
        if self.time_limit is not None:
            if (not isinstance(self.time_limit, (int, float)) or isinstance(self.time_limit, bool)
                    or not 0 < self.time_limit <= MAX_TIME_LIMIT):
                raise ValueError(f"time_limit must be a number of seconds in (0, {MAX_TIME_LIMIT:.0f}]")
        check_int("retries", self.retries, minimum=0, maximum=MAX_RETRIES)
        check_tuple_of("retry_on_exit", self.retry_on_exit, int)
        for code in self.retry_on_exit:
            check_int("retry_on_exit code", code, minimum=1, maximum=255)
        if self.retry_on_exit and not self.retries:
            raise ValueError("retry_on_exit needs retries > 0")
        check_tuple_of("after", self.after, str)
        for dep in self.after:
            check_str("after job", dep)
        deps = self.after
        if self.after_any != () or self.after_not_ok != ():  # version 7 (the common spec has neither)
            for name in ("after_any", "after_not_ok"):
                check_tuple_of(name, getattr(self, name), str)
                for dep in getattr(self, name):
                    check_str(f"{name} job", dep)
            deps = self.after + self.after_any + self.after_not_ok
        if len(deps) > MAX_AFTER:
            raise ValueError(f"the dependencies name more than {MAX_AFTER} jobs")
        if len(set(deps)) != len(deps):
            raise ValueError("the dependencies name a job twice")
        if (self.array_id is None) != (self.array_index is None):
            raise ValueError("array_id and array_index go together")
        if self.array_id is not None:
            check_str("array_id", self.array_id)
            check_int("array_index", self.array_index, minimum=0, maximum=(1 << 31) - 1)
        if self.array_max is not None:
            if self.array_id is None:
                raise ValueError("array_max needs an array")
            check_int("array_max", self.array_max, minimum=1, maximum=1 << 20)
        for name in ("output", "error"):
            pattern = getattr(self, name)
            if pattern is not None:
                check_str(name, pattern, max_len=4096)
                check_pattern(name, pattern)
        if self.mem is not None:
            check_int("mem", self.mem, minimum=1, maximum=MAX_MEM)
        check_int("gpus", self.gpus, minimum=0, maximum=MAX_GPUS)
        check_gres("gres", self.gres)
        self._check_v7()
        if self.partition is not None:
            check_str("partition", self.partition, max_len=64)
        if self.begin is not None:
            if (not isinstance(self.begin, (int, float)) or isinstance(self.begin, bool)
                    or not 0 <= self.begin <= MAX_BEGIN):
                raise ValueError("begin must be a time in seconds since the epoch")
        if not isinstance(self.singleton, bool):
            raise ValueError("singleton must be a bool")
        if self.nice != 0 or type(self.nice) is not int:
            check_nice(self.nice)

    def _check_v7(self) -> None:
        if (self.script is None and self.warn_signal is None and self.warn_before == 0 and self.open_mode is None
                and self.warn_batch_only is False and self.labels == () and self.slurm_env is False
                and type(self.warn_before) is int):
            return  # the common case, in one test: nothing of version 7 is set
        if self.script is not None:
            check_str("script", self.script, max_len=MAX_SCRIPT)
            if "\0" in self.script:
                raise ValueError("script must not contain a NUL byte")
            try:
                size = len(self.script.encode("utf-8"))
            except UnicodeEncodeError:
                raise ValueError("script must be valid text (no lone surrogates)") from None
            if size > MAX_SCRIPT:
                raise ValueError(f"script is longer than {MAX_SCRIPT} bytes")
        if self.warn_signal is not None:
            check_int("warn_signal", self.warn_signal, minimum=1, maximum=MAX_SIGNAL)
            if self.time_limit is None:
                raise ValueError("warn_signal needs a time_limit")
        check_int("warn_before", self.warn_before, minimum=0, maximum=MAX_WARN_BEFORE)
        if not isinstance(self.warn_batch_only, bool):
            raise ValueError("warn_batch_only must be a bool")
        if self.warn_signal is None and (self.warn_before or self.warn_batch_only):
            raise ValueError("warn_before and warn_batch_only need a warn_signal")
        if self.open_mode is not None and self.open_mode not in OPEN_MODES:
            raise ValueError(f"open_mode must be one of {', '.join(OPEN_MODES)}, got {self.open_mode!r}")
        check_labels("labels", self.labels)
        if not isinstance(self.slurm_env, bool):
            raise ValueError("slurm_env must be a bool")

    @property
    def uses_v7(self) -> bool:
        """Whether any version 7 field is set: such a job runs only on agents of version >= 7."""
        # Spelled out, not a loop over V7_SPEC_DEFAULTS: asked for every job note (test_spec7 keeps them in step).
        return (self.script is not None or self.warn_signal is not None or self.open_mode is not None
                or bool(self.after_any or self.after_not_ok or self.labels) or self.slurm_env)

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Every job this one waits for, whichever the kind."""
        return self.after + self.after_any + self.after_not_ok

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "command": list(self.command),
            "cwd": self.cwd,
            "env": [list(p) for p in self.env],
            "slots": self.slots,
        }
        for key, default in V4_SPEC_DEFAULTS.items():
            value = getattr(self, key)
            if value != default:
                out[key] = list(value) if isinstance(value, tuple) else value
        # Left out while unset: the fact log and older agents see the spec as before.
        if self.output is not None:
            out["output"] = self.output
        if self.error is not None:
            out["error"] = self.error
        if self.mem is not None:
            out["mem"] = self.mem
        if self.gpus:
            out["gpus"] = self.gpus
        if self.gres:
            out["gres"] = [list(p) for p in self.gres]
        if self.uses_v7:
            for key, default in V7_SPEC_DEFAULTS.items():
                value = getattr(self, key)
                if value != default:
                    out[key] = [list(p) for p in value] if key == "labels" else (
                        list(value) if isinstance(value, tuple) else value)
        for key, default in V8_SPEC_DEFAULTS.items():  # scheduling only: left out at the default
            value = getattr(self, key)
            if value != default:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def for_agent(self) -> "JobSpec":
        """The spec an agent gets (a Dispatch's): without the scheduling-only version 8 fields, so
        the message is what its wire form (``agent_dict``) reads back as."""
        if all(getattr(self, key) == default for key, default in V8_SPEC_DEFAULTS.items()):
            return self
        return replace(self, **V8_SPEC_DEFAULTS)

    def agent_dict(self) -> dict[str, Any]:
        """The spec as an agent is sent it: ``to_dict`` without the scheduling-only version 8 fields."""
        out = self.to_dict()
        for key in V8_SPEC_DEFAULTS:
            out.pop(key, None)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "JobSpec":
        require_keys("job spec", data, ("name", "command", "slots"))
        command = data["command"]
        env = data.get("env") or []
        if not isinstance(command, (list, tuple)) or not isinstance(env, (list, tuple)):
            raise ValueError("job spec command and env must be lists")
        return cls(
            name=data["name"],
            command=tuple(command),
            cwd=data.get("cwd"),
            env=tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in env),
            slots=data["slots"],
            time_limit=data.get("time_limit"),
            retries=data.get("retries", 0),
            retry_on_exit=_tuple("retry_on_exit", data.get("retry_on_exit", ())),
            after=_tuple("after", data.get("after", ())),
            array_id=data.get("array_id"),
            array_index=data.get("array_index"),
            array_max=data.get("array_max"),
            output=data.get("output"),
            error=data.get("error"),
            mem=data.get("mem"),
            gpus=data.get("gpus", 0),
            gres=tuple(tuple(p) if isinstance(p, (list, tuple)) else p
                       for p in _tuple("gres", data.get("gres", ()))),
            **(_v7_fields(data) if not _V7_KEYS.isdisjoint(data) else {}),
            **(_v8_fields(data) if not _V8_KEYS.isdisjoint(data) else {}),
        )

    def resources_text(self) -> str:
        """``2 CPUs, 4G, 1 GPU, license:2``: what the job asks, for the CLI and refusals."""
        parts = [f"{self.slots} CPU{'s' if self.slots != 1 else ''}"]
        if self.mem is not None:
            parts.append(format_size(self.mem))
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        parts.extend(f"{name}:{count}" for name, count in self.gres)
        return ", ".join(parts)


_V7_KEYS = frozenset(V7_SPEC_DEFAULTS)
_V8_KEYS = frozenset(V8_SPEC_DEFAULTS)


def _v7_fields(data: dict) -> dict[str, Any]:
    """The version 7 fields of a spec's map that has some (most have none: one set test)."""
    return dict(
        script=data.get("script"),
        warn_signal=data.get("warn_signal"),
        warn_before=data.get("warn_before", 0),
        warn_batch_only=data.get("warn_batch_only", False),
        open_mode=data.get("open_mode"),
        after_any=_tuple("after_any", data.get("after_any", ())),
        after_not_ok=_tuple("after_not_ok", data.get("after_not_ok", ())),
        labels=_labels(data.get("labels", ())),
        slurm_env=data.get("slurm_env", False),
    )


def _v8_fields(data: dict) -> dict[str, Any]:
    """The version 8 (scheduling-only) fields of a spec's map that has some."""
    return {key: data[key] for key in V8_SPEC_DEFAULTS if key in data}


def check_labels(name: str, labels: Any) -> None:
    """Free labels: at most 16 (key, value) pairs sorted by key, keys [a-z_]{1,32}, values <= 1024 chars."""
    check_tuple_of(name, labels, tuple)
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{name}: more than {MAX_LABELS} labels")
    previous = ""
    for pair in labels:
        if len(pair) != 2:
            raise ValueError(f"{name}: each label is a (key, value) pair")
        key, value = pair
        check_str(f"{name} key", key, max_len=MAX_LABEL_KEY)
        if not _LABEL_KEY_CHARS.issuperset(key):
            raise ValueError(f"{name} key {key!r} must be lowercase letters and '_'")
        check_str(f"{name} {key}", value, allow_empty=True, max_len=MAX_LABEL_VALUE)
        if key <= previous:
            raise ValueError(f"{name} must be sorted by key, each key once ({key!r})")
        previous = key


def _labels(value: Any) -> tuple:
    """The wire's labels: a list of [key, value] pairs, or a map (a light client's), sorted here."""
    if isinstance(value, dict):
        return tuple(sorted(value.items(), key=lambda pair: str(pair[0])))
    return tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in _tuple("labels", value))


def _tuple(name: str, value: Any) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"job spec {name} must be a list")
    return tuple(value)


@dataclass(slots=True, kw_only=True)
class JobRecord:
    """The controller's record of one job.  Only ``state.apply`` mutates it.

    Every field is durable: the snapshot row, ``restore`` and the digest all take the
    fields in this order (``row`` / ``from_row`` / ``snapshot_key``).  A new field goes
    last, with a default: a row from an older snapshot is shorter, and the fields it
    lacks take their defaults."""

    id: str
    spec: JobSpec
    state: JobState = JobState.PENDING
    attempt: int = 1  # the attempt the next (or current) dispatch carries
    agent: str | None = None  # set exactly while RUNNING
    ran_on: str | None = None  # the agent of the latest attempt that ran (kept after it ends)
    submitted_at: float = 0.0
    started_at: float | None = None  # as the agent reported it
    # As the agent observed the process end; for a job cancelled before it ran, the cancel's time
    # (JobCancelled v3; None for older facts).  Only a job with an exit code or signal has an outcome.
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    cancel_requested: bool = False
    requeues: int = 0
    uid: str | None = None  # the submission's random uid (None: submitted before uids existed)
    held: bool = False  # a user's hold: a held PENDING job is not dispatched
    retried: int = 0  # attempts run again by the retry policy since the submit (or the latest restart)
    reason: str | None = None  # why the job ended as it did, when the state alone does not say ("timeout", ...)
    owner: Owner | None = None  # the caller of its submit (JobSubmitted.owner); None: token mode
    # Issue #20, resources: the GPU indices of the current (RUNNING) or latest attempt, as its
    # JobDispatched (or JobAdopted) fact recorded them; what the latest finished attempt used.
    gpu_ids: tuple[int, ...] = ()
    usage: Usage | None = None
    # The highest attempt an agent reported that this history never issued (JobAttemptsReserved):
    # the job's attempts continue above it.  0: none.
    attempts_reserved: int = 0
    # Version 7: a user requeued the RUNNING attempt (JobRequeueRequested); set only while RUNNING.
    requeue_requested: bool = False
    # Issue #22: the operator's priority adjustment (JobPriorityAdjusted; reckon update --priority).
    priority_adjust: int = 0

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        """The job object of the CLI contract."""
        return {
            "id": self.id,
            "name": self.spec.name,
            "state": self.state.value,
            # Where it runs, or ran; a PENDING job (a requeued one too) runs nowhere yet.
            "agent": self.agent or (self.ran_on if self.state is not JobState.PENDING else None),
            "attempt": self.attempt,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "slots": self.spec.slots,
            "command": list(self.spec.command),
            "cwd": self.spec.cwd,
            "cancel_requested": self.cancel_requested,
            "requeues": self.requeues,
            # Version 4 fields (new keys; the old ones keep their meaning).
            "reason": self.reason,
            "held": self.held,
            "retries": self.spec.retries,
            "retried": self.retried,
            "time_limit": self.spec.time_limit,
            "after": list(self.spec.after),
            "array_id": self.spec.array_id,
            "array_index": self.spec.array_index,
            # Issue #20, ownership: whom the job belongs to and runs as (None: token mode).
            "user": self.owner.user if self.owner is not None else None,
            "owner": self.owner.to_dict() if self.owner is not None else None,
            # Version 6 (issue #20): resources asked, GPUs given, what the latest attempt used.
            "cpus": self.spec.slots,
            "mem": self.spec.mem,
            "gpus": self.spec.gpus,
            "gres": [list(p) for p in self.spec.gres],
            "gpu_ids": list(self.gpu_ids),
            "usage": self.usage.to_dict() if self.usage is not None else None,
            # Version 7 (issue #21): what Slurm's query commands show (not the script's text).
            "array_max": self.spec.array_max,
            "labels": dict(self.spec.labels),
            "after_any": list(self.spec.after_any),
            "after_not_ok": list(self.spec.after_not_ok),
            "open_mode": self.spec.open_mode,
            "output": self.spec.output,
            "error": self.spec.error,
            "warn_signal": self.spec.warn_signal,
            "warn_before": self.spec.warn_before,
            "warn_batch_only": self.spec.warn_batch_only,
            "slurm_env": self.spec.slurm_env,
            "script": self.spec.script is not None,  # whether it runs a batch script (its text stays out)
            "requeue_requested": self.requeue_requested,
            "partition": self.spec.partition,  # issue #22: its partition (None: the cluster has none)
            # Version 8 (model21): when it may begin (None: at once), --dependency=singleton.
            "begin": self.spec.begin,
            "singleton": self.spec.singleton,
            "nice": self.spec.nice,  # issue #22: --nice, and the operator's adjustment (model/priority.py)
            "priority_adjust": self.priority_adjust,
        }

    def snapshot_key(self) -> tuple:
        """Everything that defines this record, for equality checks."""
        return _RECORD_KEY(self)

    def row(self) -> list[Any]:
        """The record as a snapshot row: its fields in order, the spec and state as plain values."""
        row = list(_RECORD_KEY(self))
        row[_SPEC], row[_STATE] = self.spec.to_dict(), self.state.value
        if self.owner is not None:
            row[_OWNER] = self.owner.to_dict()
        row[_GPU_IDS] = list(self.gpu_ids)
        if self.usage is not None:
            row[_USAGE] = self.usage.to_dict()
        return row

    @classmethod
    def from_row(cls, row: list[Any] | tuple[Any, ...]) -> "JobRecord":
        """The inverse of ``row``; a shorter row (an older snapshot) leaves the later fields at their defaults."""
        if not _MIN_ROW <= len(row) <= len(RECORD_FIELDS):
            raise ValueError(f"a job row has {_MIN_ROW} to {len(RECORD_FIELDS)} fields, not {len(row)}")
        values = dict(zip(RECORD_FIELDS, row))
        values["spec"], values["state"] = JobSpec.from_dict(values["spec"]), JobState(values["state"])
        if values.get("owner") is not None:
            values["owner"] = Owner.from_dict(values["owner"])
        if "gpu_ids" in values:
            values["gpu_ids"] = _tuple("gpu_ids", values["gpu_ids"])
        if values.get("usage") is not None:
            values["usage"] = Usage.from_dict(values["usage"])
        return cls(**values)


RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobRecord))  # the snapshot row's order
_RECORD_KEY = attrgetter(*RECORD_FIELDS)
_SPEC, _STATE = RECORD_FIELDS.index("spec"), RECORD_FIELDS.index("state")
_OWNER = RECORD_FIELDS.index("owner")
_GPU_IDS, _USAGE = RECORD_FIELDS.index("gpu_ids"), RECORD_FIELDS.index("usage")
_MIN_ROW = RECORD_FIELDS.index("uid")  # the oldest snapshots' rows (v1) end before the uid


def finish_transition(*, exit_code: int | None, signal: int | None, cancel_requested: bool) -> JobTransition:
    """Which terminal transition a finished process means."""
    if cancel_requested:
        return JobTransition.FINISH_CANCELLED
    if signal is None and exit_code == 0:
        return JobTransition.FINISH_OK
    return JobTransition.FINISH_FAILED
