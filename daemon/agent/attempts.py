"""One attempt of a job as the agent's runner sees it: its key, its outcome, its records.

The types a runner delivers on ``exits`` (``ExitStatus``, ``JobLost``), its
errors, the check that makes a job id safe as a file name, and the reading of
the records a supervisor leaves in ``state_dir/jobs/`` (daemon/agent/launcher.py
writes them; daemon/agent/runner.py has the contract).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from reckon.model.report_entry import MAX_NOT_RUN
from reckon.model.resources import Usage

from reckon.daemon.agent import launcher as _launcher

__all__ = ["ExitStatus", "JobLost", "Outcome", "RunnerError", "LaunchError", "AlreadyLaunched", "check_key", "Key"]

Key = tuple[str, int]

MAX_JOB_ID_LEN = 200


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a job ended, as its supervisor recorded it."""

    job: str
    attempt: int
    exit_code: int | None  # None when killed by a signal
    signal: int | None  # None when it exited
    started_at: float | None
    finished_at: float
    timed_out: bool = False  # the supervisor stopped it at the job's time limit
    # What it used (None: a record from before accounting, or unreadable).  A measurement, not
    # part of how it ended: two statuses of the same end compare equal whatever they measured.
    usage: Usage | None = field(default=None, compare=False)
    oom: bool = False  # the kernel's OOM killer acted in its cgroup
    not_run: str | None = None  # the supervisor refused to start it (exit 126/127), and why


@dataclass(frozen=True, slots=True)
class JobLost:
    """A supervisor ended without recording an outcome: the outcome is unknown."""

    job: str
    attempt: int
    reason: str


Outcome = Union[ExitStatus, JobLost]


class RunnerError(Exception):
    """Misuse of the runner or a failure of its machinery."""


class LaunchError(RunnerError):
    """The launch failed before anything ran (fork failed, launcher gone)."""


class AlreadyLaunched(LaunchError):
    """This (job, attempt) was launched before (its files exist): it is not run twice."""


def check_key(job: str, attempt: int) -> None:
    """Job ids become file names: refuse anything that is not a plain name."""
    if not isinstance(job, str) or not job:
        raise ValueError("job id must be a non-empty string")
    if (len(job) > MAX_JOB_ID_LEN or "/" in job or "\0" in job or ".." in job or job.startswith(".")
            or "\n" in job):
        raise ValueError(f"job id {job!r} cannot be used as a file name")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError(f"attempt must be an integer >= 1, got {attempt!r}")


def read_json(path: Path) -> dict | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def status_from(key: Key, obj: dict) -> ExitStatus | None:
    try:
        exit_code, sig, finished_at = obj["exit_code"], obj["signal"], obj["finished_at"]
        started_at = obj.get("started_at")
    except KeyError:
        return None
    if (exit_code is None) == (sig is None) or not isinstance(finished_at, (int, float)):
        return None
    if not isinstance(started_at, (int, float)) or isinstance(started_at, bool):
        started_at = None  # a start time we cannot read is unknown, not an error
    try:
        usage = Usage.from_dict(obj["usage"]) if "usage" in obj else None
    except (ValueError, TypeError):
        usage = None  # a measurement we cannot read is unknown, not an error
    not_run = obj.get("not_run")
    if not isinstance(not_run, str) or not not_run:
        not_run = None  # none, or a reason we cannot read: the exit code still says it failed
    return ExitStatus(job=key[0], attempt=key[1], exit_code=exit_code, signal=sig,
                      started_at=None if started_at is None else float(started_at), finished_at=float(finished_at),
                      timed_out=obj.get("timed_out") is True, usage=usage, oom=obj.get("oom") is True,
                      not_run=None if not_run is None else not_run[:MAX_NOT_RUN])


_BOOT_ID = _launcher.boot_id()


def proc_alive(pid: object, start: object) -> bool:
    """``pid`` is still the process that started at ``start`` and has not exited."""
    if not isinstance(pid, int) or pid <= 0 or not isinstance(start, int):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[19]) == start and fields[0] not in (b"Z", b"X", b"x")
    except (OSError, ValueError, IndexError):
        return False


def pidinfo_current(info: dict | None) -> bool:
    return bool(info) and info.get("boot_id") == _BOOT_ID
