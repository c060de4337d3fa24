"""A resync report's entries: what an agent holds of one (job, attempt), and the field checks the
finish and dispatch messages share with them (``model/messages.py`` re-exports the names)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ._check import check_int, check_opt_int, check_opt_time, check_opt_uid, check_str, check_time
from .resources import Usage, check_gpu_indices


class EntryStatus(enum.Enum):
    RUNNING = "running"  # the agent's process for this attempt is alive
    FINISHED = "finished"  # the process ended; exit code / signal and finish time attached
    UNRECOGNIZED = "unrecognized"  # the agent has no record of this attempt, or cannot tell


def check_job_attempt(msg: Any) -> None:
    check_str("job", msg.job)
    check_int("attempt", msg.attempt, minimum=1)


MAX_NOT_RUN = 300  # characters of a refused start's reason (``not_run``)


def check_not_run(value: Any) -> None:
    """``not_run``: None, or why the agent ran nothing for the attempt (1 to MAX_NOT_RUN characters)."""
    if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= MAX_NOT_RUN):
        raise ValueError(f"not_run must be None or a reason of 1 to {MAX_NOT_RUN} characters")


def check_extras(msg: Any) -> None:
    """Version 6's fields of a finish or a report entry: usage, oom, GPU indices; version 7's not_run."""
    if msg.usage is not None and not isinstance(msg.usage, Usage):
        raise ValueError("usage must be a usage record")
    if not isinstance(msg.oom, bool):
        raise ValueError("oom must be a bool")
    check_gpu_indices("gpus", getattr(msg, "gpus", ()))
    check_not_run(msg.not_run)


def check_outcome(msg: Any) -> None:
    check_opt_int("exit_code", msg.exit_code, minimum=-(1 << 31), maximum=(1 << 31) - 1)
    check_opt_int("signal", msg.signal, minimum=1, maximum=255)
    if msg.exit_code is None and msg.signal is None:
        raise ValueError("a finished job needs an exit code or a signal")
    check_time("finished_at", msg.finished_at)
    check_opt_time("started_at", msg.started_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportEntry:
    """One job in a resync report."""

    job: str
    attempt: int
    status: EntryStatus
    exit_code: int | None = None
    signal: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    uid: str | None = None  # the submission the agent's record belongs to (None: legacy, or no record)
    timed_out: bool = False  # version 4: FINISHED because its supervisor stopped it at the time limit
    # Version 6: a FINISHED entry's usage and oom; a RUNNING (or FINISHED) entry's GPU indices.
    usage: Usage | None = None
    oom: bool = False
    gpus: tuple[int, ...] = ()
    # Version 7: a FINISHED entry of an attempt the agent refused to start (exit 126/127): why.
    not_run: str | None = None

    def __post_init__(self) -> None:
        check_job_attempt(self)
        check_opt_uid("uid", self.uid)
        if not isinstance(self.timed_out, bool):
            raise ValueError("timed_out must be a bool")
        if self.timed_out and self.status is not EntryStatus.FINISHED:
            raise ValueError("only a finished entry can have timed out")
        check_extras(self)
        if (self.usage is not None or self.oom) and self.status is not EntryStatus.FINISHED:
            raise ValueError("only a finished entry carries usage or oom")
        if self.not_run is not None and self.status is not EntryStatus.FINISHED:
            raise ValueError("only a finished entry carries not_run")
        if not isinstance(self.status, EntryStatus):
            raise ValueError("status must be an EntryStatus")
        if self.status is EntryStatus.FINISHED:
            check_outcome(self)
        else:
            if self.exit_code is not None or self.signal is not None or self.finished_at is not None:
                raise ValueError(f"a {self.status.value} entry carries no outcome")
            check_opt_time("started_at", self.started_at)

    def to_wire(self) -> list[Any]:
        row = [self.job, self.attempt, self.status.value, self.exit_code, self.signal, self.started_at,
               self.finished_at]
        if self.uid is not None or self.timed_out:  # version 3: an 8th field; without a uid the row is as before
            row.append(self.uid)
        if self.extras():  # version 6: uid, timed_out (either may be at its default) and a map
            return row[:7] + [self.uid, self.timed_out, self.extras()]
        if self.timed_out:  # version 4: a 9th field, only when true
            row.append(True)
        return row

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        if self.oom:
            out["oom"] = True
        if self.gpus:
            out["gpus"] = list(self.gpus)
        if self.not_run is not None:
            out["not_run"] = self.not_run
        return out

    @classmethod
    def from_wire(cls, row: Any) -> "ReportEntry":
        if not isinstance(row, (list, tuple)) or len(row) not in (7, 8, 9, 10):
            raise ValueError("a report entry is a list of 7 fields (8 with a uid, 9 when it timed out, "
                             "10 with usage, oom or gpus)")
        job, attempt, status, code, sig, started, finished = row[:7]
        uid = row[7] if len(row) >= 8 else None
        if len(row) == 8 and uid is None:
            raise ValueError("a report entry's 8th field, the uid, must not be null")
        if len(row) == 9 and row[8] is not True:
            raise ValueError("a report entry's 9th field, timed_out, is only ever true")
        extras: dict[str, Any] = {}
        if len(row) == 10:
            if not isinstance(row[8], bool):
                raise ValueError("a report entry's 9th field, timed_out, must be a bool")
            if not isinstance(row[9], dict) or not row[9] or not set(row[9]) <= {"usage", "oom", "gpus", "not_run"}:
                raise ValueError("a report entry's 10th field is a non-empty map of usage, oom, gpus, not_run")
            extras = dict(row[9])
            if "usage" in extras:
                extras["usage"] = Usage.from_dict(extras["usage"])
            if extras.get("oom", True) is not True:
                raise ValueError("a report entry's oom is only ever true")
            if "gpus" in extras:
                if not isinstance(extras["gpus"], (list, tuple)) or not extras["gpus"]:
                    raise ValueError("a report entry's gpus is a non-empty list")
                extras["gpus"] = tuple(extras["gpus"])
        if status not in STATUS_VALUES:
            raise ValueError(f"unknown entry status {status!r}")
        return cls(job=job, attempt=attempt, status=EntryStatus(status), exit_code=code, signal=sig,
                   started_at=started, finished_at=finished, uid=uid,
                   timed_out=row[8] if len(row) >= 9 else False, **extras)


STATUS_VALUES = {s.value for s in EntryStatus}
