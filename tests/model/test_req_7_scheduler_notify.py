"""Requirement 7: Scheduler Notification of Reconciled State (seed 001)."""

from __future__ import annotations

from tests.model.harness import Harness, facts_of, notes_of

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.jobs import JobState
from reckon.model.scheduler import AgentNote, JobNote


def _reconcile(h: Harness) -> tuple[list[str], list[E.Command]]:
    """Four jobs on a1; away, one finishes, one fails, one is forgotten; rejoin.

    Returns the ids and the commands of the call that applied the report."""
    h.join("a1")
    ids = h.run_jobs(4, slots=2)
    h.disconnect("a1")
    h.exit("a1", ids[0], exit_code=0, finished_at=1.0)
    h.exit("a1", ids[1], exit_code=1, finished_at=2.0)
    h.agent("a1").records.pop((ids[2], 1))
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.deliver_to_agent("a1")
    reports = [m for m in h.agents["a1"].outbox_wire if isinstance(m, M.ResyncReport)]
    assert len(reports) == 1
    return ids, h.deliver_to_controller("a1", 1)


def test_req_7_1_reconciled_changes_reach_the_scheduler_through_notify() -> None:
    h = Harness()
    ids, commands = _reconcile(h)

    changed = {f.job for f in facts_of(commands)}
    assert changed == {ids[0], ids[1], ids[2]}
    noted = {n.job: n for n in notes_of(commands) if isinstance(n, JobNote)}
    for job in changed:
        assert noted[job].state is h.job(job).state and noted[job].agent == h.job(job).agent
    h.assert_views_agree()


def test_req_7_1_note_is_the_same_as_for_an_ordinary_change() -> None:
    via_round = Harness()
    _, round_commands = _reconcile(via_round)
    ordinary = Harness()
    ordinary.join("a1")
    ordinary.run_jobs(4, slots=2)
    ordinary_commands = ordinary.send_to_controller("a1", M.Finished(
        job="1", attempt=1, exit_code=0, signal=None, finished_at=1.0))

    def notes_for_job_1(commands: list[E.Command]) -> list[object]:
        return [n for n in notes_of(commands) if isinstance(n, JobNote) and n.job == "1"]

    assert notes_for_job_1(round_commands) == notes_for_job_1(ordinary_commands) == [
        JobNote(job="1", order=1, state=JobState.COMPLETED, slots=2, agent=None, ready=False)]


def test_req_7_2_job_returned_to_pending_is_noted_pending_and_schedulable() -> None:
    h = Harness()
    ids, commands = _reconcile(h)

    pending_notes = [n for n in notes_of(commands) if isinstance(n, JobNote) and n.job == ids[2]]
    assert pending_notes[-1].state is JobState.PENDING and pending_notes[-1].agent is None
    assert h.scheduler.view()[0] == (ids[2],)
    used_note = [n for n in notes_of(commands) if isinstance(n, AgentNote)][-1]
    assert used_note.used == 2  # only the one job still running holds slots
    assert h.schedule() == [(ids[2], "a1")]


def test_req_7_3_notes_are_handed_over_before_the_round_counts_as_done() -> None:
    h = Harness()
    ids, commands = _reconcile(h)

    end = next(i for i, c in enumerate(commands) if isinstance(c, E.RoundEnded))
    done = next(i for i, c in enumerate(commands) if isinstance(c, E.Send) and isinstance(c.message, M.ResyncDone))
    job_note_positions = [i for i, c in enumerate(commands)
                          if isinstance(c, E.Notify) and isinstance(c.note, JobNote)]
    assert len(job_note_positions) >= 3
    assert max(job_note_positions) < end < done
    # The Append carrying the reconciled facts is the very first command.
    assert isinstance(commands[0], E.Append)


def test_req_7_3_reconciling_flag_is_set_and_cleared_for_the_scheduler() -> None:
    h = Harness()
    h.join("a1")
    h.run_jobs(1)
    h.disconnect("a1")
    h.connect("a1")
    armed = h.deliver_to_controller("a1", 1)
    flags = [n.reconciling for n in notes_of(armed) if isinstance(n, AgentNote)]
    assert flags[-1] is True and h.scheduler.view()[1]["a1"][2] is False
    h.pump()
    assert h.scheduler.view()[1]["a1"][2] is True
    h.assert_views_agree()
