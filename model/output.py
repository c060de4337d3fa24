"""Job output: where it goes, who can read it, when an agent may delete it.

Pure decisions for three daemon features (the daemon does the file I/O):

* ``--output`` / ``--error`` patterns, like ``sbatch -o``: ``%j`` is the job
  id, ``%a`` the attempt, ``%%`` a percent sign; anything else after ``%`` is
  refused at submit.
* ``reckon logs``: ``locate`` says which agent and attempt hold the output a
  client asks for, or why nobody does (one named outcome per case).
* ``--keep-output DAYS`` on agents: ``expired_output`` picks the attempts whose
  output may go; never one the agent still holds a record of (running, or an
  outcome the controller has not acknowledged yet).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable

from .jobs import JobRecord, JobState
from .output_paths import PATTERN_ESCAPES, check_pattern, expand_pattern, output_path  # noqa: F401 (re-exported)

MAX_OUTPUT_CHUNK = 1 << 20  # bytes in one output_chunk, at most
DEFAULT_OUTPUT_CHUNK = 256 * 1024  # bytes the controller asks for per read
SECONDS_PER_DAY = 86_400.0


class OutputStream(enum.Enum):
    STDOUT = "stdout"  # the job's standard output
    STDERR = "stderr"  # the job's standard error


class OutputStatus(enum.Enum):
    DATA = "data"  # bytes from the offset follow (none: nothing beyond it yet)
    UNKNOWN = "unknown"  # this agent has no output of that attempt: it never ran it here
    EXPIRED = "expired"  # deleted by the agent's output retention (--keep-output)
    MISSING = "missing"  # the agent ran it, but the file is gone (not by retention: someone deleted it)
    FAILED = "failed"  # the file is there but cannot be read (permissions, I/O error): reason attached


# ---- reckon logs: which agent holds the output ------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputAt:
    """The output a client asked for is on ``agent``."""

    job: str
    attempt: int
    agent: str
    over: bool  # the attempt has ended: once its file is drained there is no more


class Refusal(enum.Enum):
    UNKNOWN_JOB = "unknown_job"  # the controller never had the job
    UNKNOWN_ATTEMPT = "unknown_attempt"  # the job has no such attempt
    NOT_STARTED = "not_started"  # the job has not run yet (may still: --follow waits)
    NEVER_RAN = "never_ran"  # the job ended without running (cancelled while pending)
    AGENT_AWAY = "agent_away"  # the agent holding the output is not connected (may come back: --follow waits)
    AGENT_TOO_OLD = "agent_too_old"  # the agent's protocol version cannot serve output reads


# The refusals a ``--follow`` waits out (they may end by themselves); the others end it.
TRANSIENT_REFUSALS = frozenset({Refusal.NOT_STARTED, Refusal.AGENT_AWAY})


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOutput:
    refusal: Refusal
    message: str  # one line for the user


def locate(job_id: str, job: JobRecord | None, attempt: int | None, *,
           agent_version: Callable[[str], int | None], output_since: int) -> OutputAt | NoOutput:
    """Which agent to ask for ``job_id``'s output (``attempt`` None: its latest), or why none.

    ``agent_version(name)`` is the protocol version of the agent's live
    connection, None while it is not connected.
    """
    if job is None:
        return NoOutput(refusal=Refusal.UNKNOWN_JOB, message=f"unknown job {job_id}")
    if attempt is not None and not 1 <= attempt <= job.attempt:
        return NoOutput(refusal=Refusal.UNKNOWN_ATTEMPT,
                        message=f"job {job_id} has no attempt {attempt} (its latest is {job.attempt})")
    if attempt is not None:
        wanted = attempt
    elif job.state is JobState.PENDING and job.ran_on is not None and job.attempt > 1:
        wanted = job.attempt - 1  # requeued: its current attempt has not run; the one before it did
    else:
        wanted = job.attempt
    if job.state is JobState.RUNNING and wanted == job.attempt:
        assert job.agent is not None
        agent, over = job.agent, False
    elif job.ran_on is not None and (job.terminal or wanted < job.attempt):
        # The latest attempt that ran was on ran_on; an earlier one most likely too
        # (the agent says "unknown" if not).
        agent, over = job.ran_on, True
    elif job.state is JobState.PENDING:
        return NoOutput(refusal=Refusal.NOT_STARTED, message=f"job {job_id} has not started yet (PENDING)")
    else:
        return NoOutput(refusal=Refusal.NEVER_RAN,
                        message=f"job {job_id} never ran: it is {job.state.value} and no agent started it")
    version = agent_version(agent)
    if version is None:
        return NoOutput(refusal=Refusal.AGENT_AWAY,
                        message=f"agent {agent}, which holds the output of job {job_id} attempt {wanted}, "
                                f"is not connected")
    if version < output_since:
        return NoOutput(refusal=Refusal.AGENT_TOO_OLD,
                        message=f"agent {agent} speaks protocol version {version}, which cannot serve output "
                                f"(version {output_since} can): upgrade it, or read the file on its disk")
    return OutputAt(job=job_id, attempt=wanted, agent=agent, over=over)


# ---- retention on agents ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputOnDisk:
    """One attempt's output files as the agent's sweep finds them."""

    job: str
    attempt: int
    newest_mtime: float  # the latest modification of any of its output files
    has_run_record: bool  # its supervisor's record is still there (not forgotten yet)
    held: bool  # the agent's model still has a record of it (running or not yet acknowledged)


def expired_output(found: Iterable[OutputOnDisk], *, now: float, keep_days: float | None) -> list[tuple[str, int]]:
    """The attempts whose output may be deleted now (``keep_days`` None: keep everything).

    Only attempts the agent has forgotten: no record in its model and no
    supervisor record on disk.  The agent forgets an attempt only after the
    controller acknowledged its outcome (or after it gave up on it as lost),
    so output of a job whose outcome is not acknowledged is never deleted.
    """
    if keep_days is None:
        return []
    cutoff = now - keep_days * SECONDS_PER_DAY
    return sorted((o.job, o.attempt) for o in found
                  if not o.held and not o.has_run_record and o.newest_mtime < cutoff)


def parse_keep_output(value: str) -> float | None:
    """``--keep-output``: a number of days (> 0), or ``never`` (delete nothing: the default)."""
    if value.strip().lower() == "never":
        return None
    try:
        days = float(value)
    except ValueError:
        raise ValueError(f"--keep-output takes a number of days or 'never', not {value!r}") from None
    if not days > 0 or days != days or days == float("inf"):
        raise ValueError(f"--keep-output must be a positive number of days or 'never', not {value!r}")
    return days
