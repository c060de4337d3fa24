"""Issue #9 bug 3: a job never takes another job's outcome, even after a
controller state rollback (an older copy of the state restored).

Each submission has a random ``uid``; reports carry it back; ids an agent
reports that this history never issued are never issued again; unknown or
foreign running processes are killed; an agent refuses a dispatch of an
attempt it holds for another submission; and a heartbeat disagreement that a
round cannot repair arms at most one round.  INV-OUTCOME-OWNER.
"""

from __future__ import annotations

import pytest
from tests.model.harness import Harness, facts_of, sends_of, spec

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, SessionState
from reckon.model.errors import LocalProtocolError
from reckon.model.jobs import JobState
from reckon.model.state import ControllerState, apply, replay, restore, snapshot


def _rolled_back(h: Harness, keep: int) -> None:
    """The operator restores an older copy of the controller's state: only the first ``keep`` facts."""
    h.log = h.log[:keep]
    h.crash_controller()


def _started_job_then_rollback(h: Harness) -> tuple[str, str]:
    """a1 runs job 1 (its process alive); the controller's state goes back to before job 1."""
    h.join("a1")
    keep = len(h.log)
    job = h.run_jobs(1)[0]
    h.start("a1", job)
    old_uid = h.job(job).uid
    assert old_uid is not None
    _rolled_back(h, keep)
    assert job not in h.controller.state.jobs
    return job, old_uid


def test_bug3_story_new_job_with_the_reused_id_gets_its_own_outcome() -> None:
    """INV-OUTCOME-OWNER: the id is reused before the agent rejoins; the old process's
    outcome is never the new job's, the old process is killed, the new one runs."""
    h = Harness()
    job, old_uid = _started_job_then_rollback(h)
    new = h.submit(1)[0]
    assert new == job  # the restored history cannot know the id was used: only uids tell them apart
    new_uid = h.job(new).uid
    assert new_uid != old_uid

    h.join("a1")  # the join round: (1, 1) RUNNING with the old uid, an unqueried extra
    assert h.job(new).state is JobState.PENDING  # never adopted: it is another submission
    assert (job, 1) in h.agents["a1"].kills  # the old process is stopped
    h.exit("a1", job, 1, exit_code=None, signal=9)  # ... and dies of the kill
    h.pump()
    assert h.job(new).state is JobState.PENDING and h.job(new).exit_code is None

    h.dispatch(new, "a1")  # attempt 1 again: the agent holds (1, 1) for the old submission
    h.pump()
    refused = [m for m in h.agents["a1"].sent if isinstance(m, M.DispatchRefused)]
    assert [(m.job, m.attempt, m.uid) for m in refused] == [(new, 1, new_uid)]
    assert h.job(new).state is JobState.PENDING and h.job(new).attempt == 2  # requeued under a new attempt
    assert "refused" in next(f.reason for f in h.log if isinstance(f, F.JobRequeued))

    h.dispatch(new, "a1")
    h.pump()
    assert (new, 2) in h.agents["a1"].processes
    h.start("a1", new, 2)
    h.exit("a1", new, 2, exit_code=3)
    h.pump()
    rec = h.job(new)
    assert (rec.state, rec.attempt, rec.exit_code, rec.signal) == (JobState.FAILED, 2, 3, None)
    h.assert_views_agree()
    h.assert_replay_agrees()


def test_unknown_running_job_is_killed_and_its_id_never_issued_again() -> None:
    """The agent rejoins before any new submit: its job is unknown; it is killed, and the
    next submit skips its id."""
    h = Harness()
    job, _ = _started_job_then_rollback(h)
    h.join("a1")
    assert (job, 1) in h.agents["a1"].kills
    reserved = [f for f in h.log if isinstance(f, F.JobIdsReserved)]
    assert reserved == [F.JobIdsReserved(upto=int(job))]
    assert h.submit(1) == [str(int(job) + 1)]
    h.assert_replay_agrees()


def test_an_adoptable_attempt_of_another_submission_is_not_adopted() -> None:
    """PENDING at the same attempt used to be enough to adopt; the uid must match too."""
    h = Harness()
    job, _ = _started_job_then_rollback(h)
    h.submit(1)
    h.join("a1")
    assert h.job(job).state is JobState.PENDING
    assert not any(isinstance(f, F.JobAdopted) for f in h.log)


def test_the_same_submission_is_still_adopted_after_a_rollback() -> None:
    """Rolled back to after the submit but before the dispatch: same uid, so the agent's
    attempt is this job's and is adopted (nothing runs twice)."""
    h = Harness()
    h.join("a1")
    job = h.submit(1)[0]
    keep = len(h.log)
    h.dispatch(job, "a1")
    h.pump()
    h.start("a1", job)
    _rolled_back(h, keep)
    assert h.job(job).state is JobState.PENDING
    h.join("a1")
    assert h.job(job).state is JobState.RUNNING and h.job(job).agent == "a1"
    assert h.agents["a1"].kills == []


def test_a_completion_of_another_submission_is_never_applied() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    commands = h.send_to_controller("a1", M.Finished(job=job, attempt=1, exit_code=5, signal=None,
                                                     finished_at=1.0, uid="0" * 16))
    assert [m.outcome for m in sends_of(commands, M.Ack)] == [M.AckOutcome.STALE_ATTEMPT]
    assert facts_of(commands) == [] and h.job(job).state is JobState.RUNNING


def test_a_legacy_completion_without_uid_still_applies() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    commands = h.send_to_controller("a1", M.Finished(job=job, attempt=1, exit_code=0, signal=None, finished_at=1.0))
    assert [m.outcome for m in sends_of(commands, M.Ack)] == [M.AckOutcome.APPLIED]
    assert h.job(job).state is JobState.COMPLETED


def test_a_queried_attempt_answered_with_another_uid_is_requeued_and_its_process_killed() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.disconnect("a1")
    h.connect("a1")
    h.deliver_to_controller("a1", 1)
    h.agents["a1"].inbox.clear()
    tok = h.controller.sessions["a1"].round.token
    commands = h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=(
        M.ReportEntry(job=job, attempt=1, status=M.EntryStatus.RUNNING, uid="f" * 16),)))
    assert [type(f) for f in facts_of(commands)] == [F.JobRequeued]
    assert h.job(job).state is JobState.PENDING and h.job(job).attempt == 2
    assert [(m.job, m.attempt, m.uid) for m in sends_of(commands, M.Kill)] == [(job, 1, "f" * 16)]


def test_a_started_of_another_submission_is_killed_and_sets_no_start_time() -> None:
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    commands = h.send_to_controller("a1", M.Started(job=job, attempt=1, started_at=5.0, uid="e" * 16))
    assert facts_of(commands) == [] and h.job(job).started_at is None
    assert [(m.job, m.uid) for m in sends_of(commands, M.Kill)] == [(job, "e" * 16)]


# ---- the agent ---------------------------------------------------------------------------


def _operating_agent(records: list[LocalJob]) -> Agent:
    agent = Agent(AgentConfig(name="a1", slots=4), records=records)
    agent.handle(E.Connected(now=1.0))
    agent.handle(E.MessageFromController(message=M.Welcome(seq=1, version=3, token=None), now=1.0))
    assert agent.session is SessionState.OPERATING
    return agent


def _dispatch(agent: Agent, **kw: object) -> list[E.Command]:
    msg = M.Dispatch(seq=2, job="1", attempt=1, **kw)  # type: ignore[arg-type]
    return agent.handle(E.MessageFromController(message=msg, now=2.0))


def test_agent_refuses_a_dispatch_of_an_attempt_it_holds_for_another_uid() -> None:
    agent = _operating_agent([LocalJob(job="1", attempt=1, spec=spec("old"), uid="a" * 16)])
    commands = _dispatch(agent, spec=spec("old"), uid="b" * 16)
    assert not any(isinstance(c, (E.StartProcess, E.StoreRecord)) for c in commands)
    refused = [c.message for c in commands if isinstance(c, E.Send)]
    assert len(refused) == 1 and isinstance(refused[0], M.DispatchRefused)
    assert (refused[0].job, refused[0].attempt, refused[0].uid) == ("1", 1, "b" * 16)
    assert agent.records[("1", 1)].uid == "a" * 16  # the held record is untouched


def test_agent_refuses_a_legacy_dispatch_whose_spec_differs() -> None:
    agent = _operating_agent([LocalJob(job="1", attempt=1, spec=spec("old"))])
    commands = _dispatch(agent, spec=spec("new"))
    assert [type(c.message) for c in commands if isinstance(c, E.Send)] == [M.DispatchRefused]
    assert not any(isinstance(c, E.StartProcess) for c in commands)


@pytest.mark.parametrize("held_uid,sent_uid", [("a" * 16, "a" * 16), (None, None), (None, "a" * 16)])
def test_agent_ignores_a_true_duplicate_dispatch(held_uid: str | None, sent_uid: str | None) -> None:
    agent = _operating_agent([LocalJob(job="1", attempt=1, spec=spec("same"), uid=held_uid)])
    assert _dispatch(agent, spec=spec("same"), uid=sent_uid) == []


def test_agent_kill_with_a_uid_spares_another_submission() -> None:
    agent = _operating_agent([LocalJob(job="1", attempt=1, spec=spec(), uid="a" * 16)])
    other = agent.handle(E.MessageFromController(message=M.Kill(seq=2, job="1", attempt=1, uid="b" * 16), now=2.0))
    assert other == []
    mine = agent.handle(E.MessageFromController(message=M.Kill(seq=3, job="1", attempt=1, uid="a" * 16), now=2.0))
    assert mine == [E.KillProcess(job="1", attempt=1)]


def test_agent_reports_carry_the_uid_back() -> None:
    agent = _operating_agent([LocalJob(job="1", attempt=1, spec=spec(), uid="a" * 16)])
    commands = agent.handle(E.ProcessExited(job="1", attempt=1, exit_code=0, signal=None, finished_at=3.0, now=3.0))
    finished = [c.message for c in commands if isinstance(c, E.Send)]
    assert [(m.job, m.uid) for m in finished] == [("1", "a" * 16)]


# ---- versions: older agents get no uid ------------------------------------------------------


def test_a_version_2_agent_is_sent_no_uid() -> None:
    h = Harness()
    h.connect("a1")
    join = h.agents["a1"].outbox_wire[0]
    h.agents["a1"].outbox_wire[0] = M.Join(agent=join.agent, slots=join.slots, version=2, running=0,
                                           log_dir=join.log_dir, log_layout=join.log_layout)
    h.pump()
    job = h.submit(1)[0]
    commands = h.dispatch(job, "a1")
    (dispatch,) = sends_of(commands, M.Dispatch)
    assert dispatch.uid is None and "uid" not in M.to_wire(dispatch)
    h.cancel(job)
    (kill,) = [m for m in h.agents["a1"].received if isinstance(m, M.Kill)]
    assert "uid" not in M.to_wire(kill)


def test_report_entries_without_uid_keep_the_version_2_row() -> None:
    entry = M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING)
    assert len(entry.to_wire()) == 7
    with_uid = M.ReportEntry(job="1", attempt=1, status=M.EntryStatus.RUNNING, uid="a" * 16)
    assert len(with_uid.to_wire()) == 8 and M.ReportEntry.from_wire(with_uid.to_wire()) == with_uid
    with pytest.raises(ValueError, match="uid"):
        M.ReportEntry.from_wire(entry.to_wire() + [None])


# ---- the id reservation fact and the uid in the log and snapshot --------------------------


def test_job_ids_reserved_never_moves_backwards_and_replays() -> None:
    state = ControllerState()
    apply(state, F.JobIdsReserved(upto=9))
    assert state.next_job_id() == "10"
    before = state.digest()
    with pytest.raises(LocalProtocolError, match="behind"):
        apply(state, F.JobIdsReserved(upto=9))
    assert state.digest() == before
    assert replay([F.JobIdsReserved(upto=9)]).digest() == before


def test_uid_survives_the_log_and_the_snapshot_and_old_facts_decode_without_it() -> None:
    fact = F.JobSubmitted(job="1", spec=spec(), submitted_at=1.0, uid="c" * 16)
    state = replay([F.decode(F.encode(fact))])
    assert state.jobs["1"].uid == "c" * 16
    assert restore(snapshot(state)).digest() == state.digest()
    old = F.encode(fact)
    del old["uid"]
    old["v"] = 1
    assert F.decode(old).uid is None
    data = snapshot(state)
    data["jobs"][0] = data["jobs"][0][:13]  # a snapshot written before uids
    assert restore(data).jobs["1"].uid is None


# ---- anti-entropy converges ---------------------------------------------------------------


def test_a_mismatch_no_round_repairs_arms_at_most_one_round() -> None:
    """The agent holds an attempt the controller cannot place (an orphan still dying):
    N heartbeats with the same disagreement arm one round, not N."""
    h = Harness()
    h.join("a1")
    job = h.run_jobs(1)[0]
    h.send_to_controller("a1", M.Finished(job=job, attempt=1, exit_code=0, signal=None, finished_at=1.0))
    # The agent still says it runs (job, 1) (it never saw the process end): the
    # controller kills it, but until it dies the digests disagree.
    placed = h.controller.state.placement_digest("a1")
    rounds_before = sum(1 for c in h.controller_commands if isinstance(c, E.StartRoundTimer))
    seen = h.controller.sessions["a1"].seq
    theirs = M.running_digest([(job, 1)])
    for i in range(10):
        h.now += 2.0
        h.send_to_controller("a1", M.Heartbeat(running=1, digest=theirs, seen_seq=seen))
        session = h.controller.sessions["a1"]
        if session.round is not None:  # answer the round the way the agent would: still running
            tok = session.round.token
            h.send_to_controller("a1", M.ResyncReport(token=tok, page=0, pages=1, entries=(
                M.ReportEntry(job=job, attempt=1, status=M.EntryStatus.RUNNING),)))
        seen = h.controller.sessions["a1"].seq
    assert h.controller.state.placement_digest("a1") == placed
    rounds = sum(1 for c in h.controller_commands if isinstance(c, E.StartRoundTimer)) - rounds_before
    assert rounds == 1
    # Once the agent's side changes (the orphan is gone), a new disagreement may arm again.
    h.send_to_controller("a1", M.Heartbeat(running=2, digest=theirs ^ 1, seen_seq=seen))
    assert h.controller.sessions["a1"].round is not None
