"""Job output in the model: path patterns, where `reckon logs` reads, what retention may delete,
and the version 4 messages."""

from __future__ import annotations

import pytest

from reckon.model import messages as M
from reckon.model.errors import RemoteProtocolError
from reckon.model.jobs import JobRecord, JobSpec, JobState
from reckon.model.output import (
    NoOutput, OutputAt, OutputOnDisk, OutputStatus, OutputStream, Refusal, expand_pattern, expired_output, locate,
    output_path, parse_keep_output,
)

# ---- patterns ------------------------------------------------------------------------


def test_patterns_expand_job_attempt_and_percent():
    assert expand_pattern("out/%j.%a.log", job="17", attempt=3) == "out/17.3.log"
    assert expand_pattern("100%%-%j", job="5", attempt=1) == "100%-5"
    assert expand_pattern("plain", job="5", attempt=1) == "plain"


@pytest.mark.parametrize("pattern", ["%t", "out-%", "%J", ""])
def test_a_bad_pattern_is_refused_at_the_spec(pattern):
    with pytest.raises(ValueError):
        JobSpec(name="t", command=("true",), output=pattern)
    with pytest.raises(ValueError):
        JobSpec(name="t", command=("true",), error=pattern)


def test_relative_patterns_are_relative_to_the_cwd():
    assert output_path("o/%j", job="4", attempt=1, cwd="/data", base_dir="/agent") == "/data/o/4"
    assert output_path("o/%j", job="4", attempt=1, cwd=None, base_dir="/agent") == "/agent/o/4"
    assert output_path("/abs/%j", job="4", attempt=1, cwd="/data", base_dir="/agent") == "/abs/4"
    assert output_path("o/%j", job="4", attempt=1, cwd=None, base_dir=None) == "o/4"


def test_a_spec_without_patterns_travels_as_before():
    plain = JobSpec(name="t", command=("true",))
    assert "output" not in plain.to_dict() and "error" not in plain.to_dict()
    with_both = JobSpec(name="t", command=("true",), output="%j.out", error="%j.err")
    assert JobSpec.from_dict(with_both.to_dict()) == with_both
    # An older controller's spec (no such keys) decodes with none.
    assert JobSpec.from_dict({"name": "t", "command": ["true"], "slots": 1}).output is None


# ---- locate: where reckon logs reads -----------------------------------------------------


def _job(state: JobState, *, attempt: int = 1, agent: str | None = None, ran_on: str | None = None) -> JobRecord:
    return JobRecord(id="7", spec=JobSpec(name="t", command=("true",)), state=state, attempt=attempt,
                     agent=agent, ran_on=ran_on)


def _connected(version: int = M.PROTOCOL_VERSION):
    return lambda agent: version


def _where(job, attempt=None, version=_connected()):
    return locate("7", job, attempt, agent_version=version, output_since=M.OUTPUT_SINCE)


def test_a_running_job_is_read_on_its_agent_and_not_over():
    assert _where(_job(JobState.RUNNING, agent="n1", ran_on="n1")) == OutputAt(job="7", attempt=1, agent="n1",
                                                                                over=False)


def test_a_finished_job_is_over():
    assert _where(_job(JobState.COMPLETED, ran_on="n1")) == OutputAt(job="7", attempt=1, agent="n1", over=True)


def test_a_requeued_job_reads_its_last_attempt_that_ran_by_default():
    job = _job(JobState.PENDING, attempt=2, ran_on="n1")
    assert _where(job) == OutputAt(job="7", attempt=1, agent="n1", over=True)
    assert _where(job, attempt=1) == OutputAt(job="7", attempt=1, agent="n1", over=True)


@pytest.mark.parametrize("job, attempt, refusal", [
    (None, None, Refusal.UNKNOWN_JOB),
    (_job(JobState.RUNNING, agent="n1", ran_on="n1"), 2, Refusal.UNKNOWN_ATTEMPT),
    (_job(JobState.RUNNING, agent="n1", ran_on="n1"), 0, Refusal.UNKNOWN_ATTEMPT),
    (_job(JobState.PENDING), None, Refusal.NOT_STARTED),
    (_job(JobState.CANCELLED), None, Refusal.NEVER_RAN),
])
def test_each_case_without_output_has_its_refusal(job, attempt, refusal):
    where = _where(job, attempt)
    assert isinstance(where, NoOutput) and where.refusal is refusal and where.message


def test_an_away_or_old_agent_is_refused():
    job = _job(JobState.RUNNING, agent="n1", ran_on="n1")
    away = _where(job, version=lambda agent: None)
    assert isinstance(away, NoOutput) and away.refusal is Refusal.AGENT_AWAY
    old = _where(job, version=_connected(3))
    assert isinstance(old, NoOutput) and old.refusal is Refusal.AGENT_TOO_OLD and "version 3" in old.message


# ---- retention --------------------------------------------------------------------------

DAY = 86_400.0
NOW = 1_800_000_000.0


def _on_disk(attempt: int, *, age_days: float, run: bool = False, held: bool = False) -> OutputOnDisk:
    return OutputOnDisk(job="j", attempt=attempt, newest_mtime=NOW - age_days * DAY, has_run_record=run, held=held)


def test_retention_deletes_only_old_forgotten_attempts():
    found = [
        _on_disk(1, age_days=10),  # old, forgotten: goes
        _on_disk(2, age_days=1),  # too young
        _on_disk(3, age_days=10, held=True),  # the model holds it (outcome not acknowledged yet)
        _on_disk(4, age_days=10, run=True),  # its supervisor's record is still there (not forgotten)
    ]
    assert expired_output(found, now=NOW, keep_days=7) == [("j", 1)]
    assert expired_output(found, now=NOW, keep_days=None) == []  # never: the default


@pytest.mark.parametrize("value, days", [("never", None), ("NEVER", None), ("7", 7.0), ("0.5", 0.5)])
def test_keep_output_values(value, days):
    assert parse_keep_output(value) == days


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_bad_keep_output_values_are_refused(value):
    with pytest.raises(ValueError, match="--keep-output"):
        parse_keep_output(value)


# ---- the messages --------------------------------------------------------------------------


def test_output_messages_round_trip():
    read = M.OutputRead(request=3, job="7", attempt=1, stream=OutputStream.STDERR, offset=10, limit=4096)
    assert M.from_wire(M.to_wire(read), to="agent") == read
    chunk = M.OutputChunk(request=3, status=OutputStatus.DATA, data=b"abc", size=13, path="/x")
    assert M.from_wire(M.to_wire(chunk), to="controller") == chunk


@pytest.mark.parametrize("wire, to", [
    ({"type": "output_read", "request": 1, "job": "7", "attempt": 1, "stream": "stdin", "offset": 0, "limit": 1},
     "agent"),
    ({"type": "output_read", "request": 1, "job": "7", "attempt": 1, "stream": "stdout", "offset": 0,
      "limit": M.MAX_OUTPUT_CHUNK + 1}, "agent"),
    ({"type": "output_read", "request": 1, "job": "7", "attempt": 1, "stream": "stdout", "offset": -1, "limit": 1},
     "agent"),
    ({"type": "output_chunk", "request": 1, "status": "gone"}, "controller"),
    ({"type": "output_chunk", "request": 1, "status": "expired", "data": b"x"}, "controller"),
    ({"type": "output_chunk", "request": 1, "status": "data", "data": b"x" * (M.MAX_OUTPUT_CHUNK + 1)},
     "controller"),
])
def test_bad_output_messages_are_refused(wire, to):
    with pytest.raises(RemoteProtocolError):
        M.from_wire(wire, to=to)


def test_output_reads_came_with_version_4_and_older_ones_are_served():
    assert M.PROTOCOL_VERSION >= 4 and {1, 2, 3, 4} <= M.SUPPORTED_VERSIONS and M.OUTPUT_SINCE == 4
