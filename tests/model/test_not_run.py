"""A job the agent refused to start (``not_run``): the reason travels from the supervisor's status
to the job's record and history, by the completion report and by a resync round's entry.

The harness drives the real controller and agent models; every assertion is on what they did.
"""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.history import job_history
from reckon.model.jobs import JobState
from reckon.model.records import LocalJob, LocalStatus

from tests.model.harness import Harness

WHY = "the job's owner ghost (uid 3999999) has no account on this machine"


def _refused(h: Harness, job: str, why: str = WHY) -> None:
    h.agents["a1"].processes.discard((job, 1))
    h.agent_handle("a1", E.ProcessExited(job=job, attempt=1, exit_code=126, signal=None, finished_at=h.now,
                                         now=h.now, not_run=why))


def test_a_refused_start_is_failed_with_its_reason_by_the_report():
    h = Harness(("a1",))
    h.join("a1")
    [job] = h.submit()
    h.schedule()
    h.pump()
    h.start("a1", job)
    _refused(h, job)
    h.pump()
    record = h.job(job)
    assert (record.state, record.exit_code, record.reason) == (JobState.FAILED, 126, f"not run: {WHY}")
    [fact] = [f for f in h.log if isinstance(f, F.JobFinished)]
    assert (fact.not_run, fact.via) == (WHY, "report")
    attempt = job_history(job, h.log).attempts[1]
    assert (attempt.ended, attempt.reason) == ("not run", f"not run: {WHY}")
    h.assert_replay_agrees()


def test_a_refused_start_reported_by_a_round_keeps_its_reason():
    h = Harness(("a1",))
    h.join("a1")
    [job] = h.submit()
    h.schedule()
    h.pump()
    h.start("a1", job)
    h.disconnect("a1")
    _refused(h, job)  # while the agent is away: the outcome waits in its records and outbox
    h.restart_agent("a1")
    h.join("a1")
    h.pump()
    assert (h.job(job).state, h.job(job).reason) == (JobState.FAILED, f"not run: {WHY}")
    [fact] = [f for f in h.log if isinstance(f, F.JobFinished)]
    assert fact.not_run == WHY and fact.via in ("round", "report")
    h.assert_replay_agrees()


def test_the_wire_carries_not_run_and_leaves_it_out_when_unset():
    done = M.Finished(job="3", attempt=1, exit_code=126, signal=None, finished_at=5.0, not_run=WHY)
    wire = M.to_wire(done)
    assert wire["not_run"] == WHY and M.from_wire(wire, to="controller") == done
    plain = M.Finished(job="3", attempt=1, exit_code=126, signal=None, finished_at=5.0)
    assert "not_run" not in M.to_wire(plain)  # what an older controller reads
    entry = M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.FINISHED, exit_code=126, finished_at=5.0,
                          not_run=WHY)
    assert entry.to_wire()[9] == {"not_run": WHY} and M.ReportEntry.from_wire(entry.to_wire()) == entry
    record = LocalJob(job="3", attempt=1, spec=None, status=LocalStatus.FINISHED, exit_code=126, finished_at=5.0,
                      not_run=WHY)
    assert record.report().not_run == WHY


@pytest.mark.parametrize("bad, words", [("", "not_run must be"), ("x" * 301, "not_run must be"), (7, "not_run must be")])
def test_a_bad_not_run_is_refused(bad, words):
    with pytest.raises(ValueError, match=words):
        M.Finished(job="3", attempt=1, exit_code=126, signal=None, finished_at=5.0, not_run=bad)
    with pytest.raises(ValueError, match=words):
        F.JobFinished(job="3", attempt=1, exit_code=126, signal=None, finished_at=5.0, not_run=bad)
    with pytest.raises(ValueError, match="only a finished entry"):
        M.ReportEntry(job="3", attempt=1, status=M.EntryStatus.RUNNING, not_run=WHY)


def test_the_fact_is_versioned_and_left_out_at_its_default():
    fact = F.JobFinished(job="1", attempt=1, exit_code=126, signal=None, finished_at=1.0, not_run=WHY)
    data = F.encode(fact)
    assert data["v"] == F.JobFinished.VERSION and F.decode(data) == fact
    assert "not_run" not in F.encode(F.JobFinished(job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0))
    with pytest.raises(ValueError, match="unknown fields"):  # a v4 fact never had it
        F.decode({**data, "v": 4})
