"""Checks that bite: re-inject the bug stories of the seeds and watch the machine catch them.

Each test monkeypatches one known bug back into the model (seed 000: the
3-tries drop; seed 002: lost exit codes, finish time replaced by processing
time, the scheduler flag never cleared, the query that never paginated, stale
allocations on requeue, the extra-job guard that regressed terminal jobs, the
report applied twice; Req 5.1: dispatch to a reconciling agent), runs the
stateful machine of ``test_stateful.py`` and asserts that Hypothesis reports a
failure naming the invariant that is meant to catch it.  A bite test passes
only if the invariants fail: if someone weakens an invariant until it no
longer notices its bug, the bite test goes red.

The runs are derandomized (the same examples every time) and skip shrinking:
all we need is *a* failure and the ID in its message.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from reckon.model import agent_links as AL
from reckon.model import connections as CN
from reckon.model import controller as C
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model import reports as R
from reckon.model import state as S
from reckon.model import startup
from reckon.model.agent import Agent
from reckon.model.records import LocalRecords
from reckon.model.session import AgentSession, AgentSessionState
from reckon.model.transaction import Transaction
from reckon.model.jobs import JOB_TRANSITIONS, JobState, JobTransition
from reckon.model.scheduler import AgentNote

from tests.model import explorer as X
from tests.model.test_stateful import CALLERS, ReckonMachine

BITE_SETTINGS = settings(
    settings.get_profile("ci"),
    max_examples=2000,  # an upper bound: each run stops at the first failure
    stateful_step_count=80,  # longer runs reach the rarer interleavings sooner
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
    print_blob=False,
)
OPERATOR = CALLERS[3]


def assert_bites(*inv_ids: str) -> None:
    """Run the machine; it must fail with one of ``inv_ids`` in the error."""
    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(ReckonMachine, settings=BITE_SETTINGS)
    text = str(info.value)
    assert any(i in text for i in inv_ids), f"failed, but not by {inv_ids}: {text[:1500]}"


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_plain_machine_does_not_fail():
    """The control: without a re-injected bug the same settings find nothing."""
    run_state_machine_as_test(ReckonMachine, settings=settings(BITE_SETTINGS, max_examples=100))


def test_bite_outbox_gives_up_after_three_sends(monkeypatch):
    """Seed 000: the completion report was retried 3 times, then dropped for good."""
    handle = Agent.handle

    def three_tries(self, event):
        out = handle(self, event)
        tries = self.__dict__.setdefault("_tries", {})  # in memory, as in the original
        for cmd in list(out):
            if isinstance(cmd, E.Send) and isinstance(cmd.message, M.Finished):
                key = (cmd.message.job, cmd.message.attempt)
                tries[key] = tries.get(key, 0) + 1
                if tries[key] >= 3 and self.outbox.pop(key, None) is not None:
                    out.append(E.OutboxDelete(job=key[0], attempt=key[1]))
        return out

    monkeypatch.setattr(Agent, "handle", three_tries)
    # A directed run, not a search (the search took a minute of `make test` to stumble on three lost
    # sends): one job ends, and each of its completion reports is lost on the way.
    m = X.ExploredMachine.start(X.Scope(agents=1, jobs=1))
    m.process_ends(i=0, outcome=(0, None))
    with pytest.raises(AssertionError, match="INV-OUTBOX-DURABLE"):
        for _ in range(6):
            for item in [w for w in m.wire if w.to == "controller" and w.data is not None]:
                m.wire.remove(item)  # the report (and whatever travels with it) is lost
            m.advance_time(dt=m.sides["a1"].config.retry_max * 2, jitter=0.0, fire=True)
            m.check()


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_failed_exit_code_not_applied(monkeypatch):
    """Seed 002 (bug-1754): no apply seam recorded a failed job's exit code."""
    finished = S._APPLY[F.JobFinished]

    def no_fail_code(state, fact):
        changes = finished(state, fact)
        job = state.jobs[fact.job]
        if job.state is JobState.FAILED and job.exit_code:
            job.exit_code = None
        return changes

    monkeypatch.setitem(S._APPLY, F.JobFinished, no_fail_code)
    assert_bites("INV-TRUE-OUTCOME")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_replay_seam_drops_exit_code(monkeypatch):
    """Seed 002: the replay seam (apply_wal_entry) ran other code than the live one and lost the code."""

    def drifting_replay(facts, state=None):
        state = state if state is not None else S.ControllerState()
        for fact in facts:
            S.apply(state, fact)
            if isinstance(fact, F.JobFinished) and fact.exit_code:
                state.jobs[fact.job].exit_code = None
        return state

    monkeypatch.setattr(S, "replay", drifting_replay)
    monkeypatch.setattr(C, "replay", drifting_replay)
    assert_bites("INV-REPLAY-EQUALS-LIVE")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_decode_loses_exit_code(monkeypatch):
    """Seed 002: the stored fail fact carried no code trailer, so it read back as code 0."""
    decode = F.decode

    def lossy_decode(data):
        if data.get("k") == F.JobFinished.KIND and data.get("exit_code"):
            data = {**data, "exit_code": 0}
        return decode(data)

    monkeypatch.setattr(F, "decode", lossy_decode)
    assert_bites("INV-FACT-CODEC", "INV-REPLAY-EQUALS-LIVE")


def test_bite_finish_time_is_processing_time(monkeypatch):
    """Seed 002 (bug-1747, Req 4.2): the controller recorded when it processed the report."""
    on_finished = R.on_finished

    def processing_time(tx, session, msg):
        return on_finished(tx, session, dataclasses.replace(msg, finished_at=session.last_heard))

    monkeypatch.setattr(R, "on_finished", processing_time)
    assert_bites("INV-TRUE-OUTCOME")


def test_bite_scheduler_never_told_round_resolved(monkeypatch):
    """Seed 002: resolving a round cleared RECONCILING on the controller but never told the scheduler."""
    apply_report = R.apply_report

    def silent_resolve(tx, session, rnd, entries):
        start = len(tx.commands)
        apply_report(tx, session, rnd, entries)
        for k in range(len(tx.commands) - 1, start - 1, -1):
            cmd = tx.commands[k]
            if isinstance(cmd, E.Notify) and isinstance(cmd.note, AgentNote) and cmd.note.agent == session.name:
                del tx.commands[k]
                break

    monkeypatch.setattr(R, "apply_report", silent_resolve)
    assert_bites("INV-SCHEDULER-VIEW", "INV-LIVENESS-SCHEDULES")


def test_bite_query_never_paginates(monkeypatch):
    """Seed 002 (bug-1755): the query was sent with no page limit, one unbounded page."""
    arm_round = CN.arm_round

    def one_page(tx, session, token, placed, now, *, welcome):
        configured = tx.config
        tx.config = dataclasses.replace(configured, page_size=M.MAX_PAGE_ENTRIES)
        try:
            arm_round(tx, session, token, placed, now, welcome=welcome)
        finally:
            tx.config = configured

    monkeypatch.setattr(CN, "arm_round", one_page)  # the join's round
    monkeypatch.setattr(AL, "arm_round", one_page)  # the heartbeat's
    assert_bites("INV-PAGE-SIZE")


def test_bite_requeue_keeps_allocation(monkeypatch):
    """Seed 002 (bug-1631): a job returned to PENDING carried its allocation into the next attempt."""

    def requeue_keeping_slots(state, fact):
        job = S._require_running(state, fact.job, fact.attempt)
        job.state = JobState.PENDING
        agent, job.agent = job.agent, None  # forgets the agent, keeps its slots and running entry
        job.attempt += 1
        job.started_at = None
        job.requeues += 1
        return S.Changes(jobs=(job.id,), agents=(agent,))

    monkeypatch.setitem(S._APPLY, F.JobRequeued, requeue_keeping_slots)
    # The kept running entry also leaves a stale pair in the placement digest: since the
    # machine gained the drain_or_resume rule, the derandomized search meets that first.
    # validate_state, run right after the handle that applied it, names it before either.
    assert_bites("INV-SLOTS-ACCOUNTED", "INV-SINGLE-OWNER", "INV-DIGEST-CURRENT", "INV-STATE-VALID")


def test_bite_changed_record_kept_twice_in_held_digest(monkeypatch):
    """A changed record counted into the kept heartbeat digest without taking its old self out."""

    def store_forgetting_old(self, key, record):
        self._records[key] = record
        if record.held:
            self._toggle(key, +1)

    monkeypatch.setattr(LocalRecords, "__setitem__", store_forgetting_old)
    assert_bites("INV-DIGEST-CURRENT")


def test_bite_requeue_bumps_attempt_before_release(monkeypatch):
    """A requeue that moves to the next attempt before releasing the placement.

    The slots come back right, but the placement digest takes out a pair that
    was never put in.
    """

    def requeue_attempt_first(state, fact):
        job = S._require_running(state, fact.job, fact.attempt)
        job.state = JobState.PENDING
        job.attempt += 1
        agent = S._release(state, job)
        job.started_at = None
        job.requeues += 1
        return S.Changes(jobs=(job.id,), agents=(agent,))

    monkeypatch.setitem(S._APPLY, F.JobRequeued, requeue_attempt_first)
    assert_bites("INV-DIGEST-CURRENT", "INV-STATE-VALID")  # validate_state recomputes the digest at the handle


def test_bite_completion_counted_as_acknowledged_once_sent(monkeypatch):
    """Seed 000 in another guise: a completion taken as delivered once it is sent
    (outbox entry dropped, record marked acked) instead of once the controller acks it."""
    send_report = Agent._send_report

    def fire_and_forget(self, entry, now, jitter, out):
        send_report(self, entry, now, jitter, out)
        key = (entry.report.job, entry.report.attempt)
        self.__dict__.setdefault("_sent_once", set()).add(key)  # acknowledged after this step

    handle = Agent.handle

    def handle_then_forget(self, event):
        out = handle(self, event)
        for key in self.__dict__.pop("_sent_once", ()):
            self._acknowledge(key, out)
        return out

    monkeypatch.setattr(Agent, "_send_report", fire_and_forget)
    monkeypatch.setattr(Agent, "handle", handle_then_forget)
    assert_bites("INV-ACK-MEANS-RECORDED")


def test_bite_extra_job_guard_regresses_terminal(monkeypatch):
    """Seed 002 (bug-1748): the unqueried-extra guard re-assigned an already finished job to RUNNING."""
    for terminal in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        monkeypatch.setitem(JOB_TRANSITIONS, (terminal, JobTransition.ADOPT), JobState.RUNNING)
    reconcile = R.reconcile
    apply_report = R.apply_report
    in_a_report: dict[str, object] = {}

    def in_report(tx, session, rnd, entries):
        in_a_report["queried"] = rnd.queried
        try:
            apply_report(tx, session, rnd, entries)
        finally:
            in_a_report.pop("queried")

    def assignment_guard(tx, session, entry, *, queried, **how):
        job = tx.state.jobs.get(entry.job)
        extra = "queried" in in_a_report and not queried  # an unqueried extra of a report
        if (extra and job is not None and job.terminal and job.attempt == entry.attempt
                and entry.status is not M.EntryStatus.UNRECOGNIZED):
            # "not assigned to this worker" -> record it as assigned to the reporter
            # (With the GPUs it asks: a well-formed adoption, so the regression is what fails.)
            gpus = job.gpu_ids if len(job.gpu_ids) == job.spec.gpus else tuple(range(job.spec.gpus))
            tx.apply(F.JobAdopted(job=job.id, attempt=entry.attempt, agent=session.name,
                                  started_at=entry.started_at, gpus=gpus))
            return M.AckOutcome.APPLIED
        return reconcile(tx, session, entry, queried=queried, **how)

    monkeypatch.setattr(R, "reconcile", assignment_guard)
    monkeypatch.setattr(R, "apply_report", in_report)
    # The regressed job looks unrecorded to an agent already told its outcome is in:
    # INV-ACK-MEANS-RECORDED may see it first, in the same step.
    assert_bites("INV-TERMINAL-STABLE", "INV-FACTS-NO-DUPLICATE", "INV-ACK-MEANS-RECORDED")


@pytest.mark.long  # a search of about 40 s: `make test-long`
def test_bite_report_applied_twice(monkeypatch):
    """Seed 002: a reassembled report must reach resync_apply_report() exactly once."""
    apply_report = R.apply_report
    on_page = R.on_report_page
    reassembled: dict[tuple[int, bytes], tuple] = {}  # per controller: a machine run may build several

    def remembering_apply(tx, session, rnd, entries):
        reassembled[(id(tx.volatile), rnd.token)] = (rnd, entries)
        apply_report(tx, session, rnd, entries)

    def reapplying_page(tx, session, page, now):
        seen = reassembled.get((id(tx.volatile), page.token))
        if seen is not None and (session.round is None or session.round.token != page.token):
            rnd, entries = seen
            return R.apply_report(tx, session, rnd, entries)  # a duplicate last page re-applies
        return on_page(tx, session, page, now)

    def end_any_round(self):
        """The session machine refuses to end a round a second time (END_ROUND needs RECONCILING),
        which stops this bug before the invariant sees it: the bug goes past it too."""
        rnd, self.round = self.round, None
        if self.state is AgentSessionState.RECONCILING:
            self.state = AgentSessionState.CONNECTED
        return rnd

    monkeypatch.setattr(R, "apply_report", remembering_apply)
    monkeypatch.setattr(R, "on_report_page", reapplying_page)
    monkeypatch.setattr(AgentSession, "end_round", end_any_round)
    assert_bites("INV-REPORT-APPLIED-ONCE")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_dispatch_to_reconciling_agent(monkeypatch):
    """Req 5.1: the dispatch gate forgot that a reconciling agent must get no new work."""
    monkeypatch.setattr(AgentSession, "reconciling", property(lambda self: False))
    # The start gate also waits for rounds to end (through ``reconciling``): it may be caught there first.
    assert_bites("INV-DISPATCH-GATED", "INV-START-HOLD")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_report_of_another_submission_applied(monkeypatch):
    """Issue #9 bug 3: after a controller state rollback an id is issued again, and the
    old submission's process outcome (or adoption) is taken for the new job.

    The id mark now keeps ids from being issued again at all; switched off here
    (with its own check) so that the uid check behind it is still shown to matter."""
    monkeypatch.setattr(startup, "_continue_ids", lambda tx, mark, mark_file=True, facts=None: False)
    violate = ReckonMachine._violate
    monkeypatch.setattr(ReckonMachine, "_violate", lambda self, inv_id, text: (
        None if inv_id == "INV-JOB-ID-UNIQUE" else violate(self, inv_id, text)))
    monkeypatch.setattr(R, "same_submission", lambda ours, theirs: True)
    # The old submission's start time taken for the new job is the same bug; which of
    # the two checks sees it first depends on the derandomized run (it changed when the
    # machine got its issue #10 rules).
    assert_bites("INV-OUTCOME-OWNER", "INV-TRUE-START-TIME")


def test_bite_ids_restart_below_the_mark(monkeypatch):
    """Issue #9 gap 1: a start ignores the id mark, so ids a restored older state never saw are issued again."""
    monkeypatch.setattr(startup, "_continue_ids", lambda tx, mark, mark_file=True, facts=None: False)
    assert_bites("INV-JOB-ID-UNIQUE")


def test_bite_start_gate_opens_at_once(monkeypatch):
    """Issue #9 gap 2: the start gate ends at the first event, before the known agents rejoined."""
    source = startup.check_gate

    def opens_at_once(tx, ev):
        if tx.start_gate is not None:
            tx.start_gate.waiting.clear()
            tx.start_gate.known = True
        source(tx, ev)

    monkeypatch.setattr(C, "POST_HANDLE", tuple(opens_at_once if h is source else h for h in C.POST_HANDLE))
    assert_bites("INV-START-HOLD")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_unknown_running_job_not_killed(monkeypatch):
    """Issue #9 bug 3: ``reports.reconcile`` returned ``unknown_job`` before its orphan kill, so a
    process of a job the (rolled back) controller does not know ran on for ever."""
    monkeypatch.setattr(Transaction, "reserve_ids", lambda self, job_id: None)
    kill = R.kill_entry

    def no_kill_for_unknown(tx, session, entry):
        if entry.job in tx.state.jobs:
            kill(tx, session, entry)

    monkeypatch.setattr(R, "kill_entry", no_kill_for_unknown)
    assert_bites("INV-LIVENESS-QUIET", "INV-LIVENESS-AGREE")


def test_bite_retries_exceed_the_limit(monkeypatch):
    """Issue #10: an off-by-one in the retry policy runs a failed job once more than --retries allows."""
    from reckon.model import policy

    def one_too_many(spec, *, retried, **kw):
        return policy.retry_due(dataclasses.replace(spec, retries=spec.retries + 1), retried=retried, **kw)

    monkeypatch.setattr(S, "retry_due", one_too_many)
    assert_bites("INV-RETRIES-BOUNDED")


def test_bite_retries_never_happen(monkeypatch):
    """Issue #10: a failed attempt of a job with retries left ends the job FAILED.  A directed run
    of the machine's rules (the search took a minute of `make test` to fail a job with retries)."""
    def fail_once() -> None:
        m = X.ExploredMachine.start(X.Scope(agents=1, jobs=0))
        m.submit(slots=[1], command=["x"], retries=1)
        m.work()
        m.advance_time(dt=2.5, jitter=0.0, fire=False)
        m.settle()
        m.process_ends(i=0, outcome=(1, None))  # its first attempt fails: one retry is due
        for _ in range(3):
            m.work()
            m.advance_time(dt=2.5, jitter=0.0, fire=True)
            m.settle()
            m.check()

    fail_once()  # as the model is: the job runs again
    monkeypatch.setattr(S, "retry_due", lambda spec, **kw: False)
    with pytest.raises(AssertionError, match="INV-RETRIES-BOUNDED"):
        fail_once()


def test_bite_release_keeps_the_slots(monkeypatch):
    """A way out of RUNNING that gives the agent's slots back forgets to: the index of used slots
    drifts from the jobs, caught by validate_state at the handle that did it."""
    release = S._release

    def keeps_slots(state, job):
        used = state.agents[job.agent].used
        agent = release(state, job)
        state.agents[agent].used = used
        return agent

    monkeypatch.setattr(S, "_release", keeps_slots)
    assert_bites("INV-STATE-VALID")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_round_timeout_taken_as_not_fatal(monkeypatch):
    """The agent's refusal policy carries on after a timed-out round, on a connection the controller closes."""
    from reckon.model import agent as A

    monkeypatch.setitem(A.REFUSAL_RETRY, M.RefusalCode.ROUND_TIMEOUT, A.Retry.CARRY_ON)
    assert_bites("INV-REFUSAL-RETRY")


# R1 (the fit forgets the memory held) is caught by INV-NO-OVERCOMMIT here too, but only after
# about six minutes of examples on this budget: test_resources.py bites it in a few steps instead.
@pytest.mark.parametrize("mutant, caught_by", [
    ("R2", "INV-STATE-VALID"),  # the GPU holdings drift from the RUNNING jobs' gpu_ids
])
def test_bite_resources(monkeypatch, mutant, caught_by):
    """Issue #20: break the GPU holdings the lowest-free pick reads."""
    from tests.model import mutants

    mutants.apply(mutants.ALL[mutant], monkeypatch.setattr, monkeypatch.setitem)
    assert_bites(caught_by)


def _prioritize_a_queued_job() -> ReckonMachine:
    """A directed run of the machine's rules: two agents of one slot run two jobs, two more wait;
    the operator pushes the later one up the queue past every factor (INV-PRIORITY-ORDER judges it)."""
    m = ReckonMachine()
    m.setup(n_agents=2, slots=[1, 1], ctrl_page=5, agent_page=5, round_timeout=30.0, lost_after=None,
            recent_window=300.0, retry_max=4.0, initial_jobs=[], start_grace=0.0)
    for command in ("a", "b", "c", "d"):
        m.submit(slots=[1], command=[command], retries=0)
        m.work()
        m._check_all_invariants()
    assert m.controller.scheduler_view()[0] == ("3", "4")  # FIFO among equals
    later = list(m.controller.state.jobs).index("4")
    m.prioritize(i=later, priority=100_000, caller=OPERATOR)
    m._check_all_invariants()
    return m


def test_an_operator_s_adjustment_moves_a_job_up_the_queue():
    """The control of the bite below: as the model is, job 4 goes before job 3."""
    m = _prioritize_a_queued_job()
    assert m.controller.scheduler_view()[0] == ("4", "3")


@pytest.mark.parametrize("mutant", ["A1", "A3"])
def test_bite_adjustment_not_heeded(monkeypatch, mutant):
    """Issue #22, mutants A1 (the operator's adjustment is left out of a job's priority) and A3 (it
    counts only from the next sweep on).  The controller and the scheduler agree on the wrong order:
    INV-SCHEDULER-VIEW holds."""
    from tests.model import mutants

    mutants.apply(mutants.ALL[mutant], monkeypatch.setattr, monkeypatch.setitem)
    with pytest.raises(AssertionError, match="INV-PRIORITY-ORDER"):
        _prioritize_a_queued_job()


@pytest.mark.parametrize("mutant", ["A1", "A3"])
def test_bite_adjustment_not_heeded_is_found_by_search(monkeypatch, mutant):
    """A1 and A3 again, found by the machine's own search (an adjustment of -100000 left unheeded
    keeps a job ahead of a later one: example 12 of the bite budget, about 1 s, measured)."""
    from tests.model import mutants

    mutants.apply(mutants.ALL[mutant], monkeypatch.setattr, monkeypatch.setitem)
    assert_bites("INV-PRIORITY-ORDER")


def _submit_with_a_negative_nice(caller) -> ReckonMachine:
    """A directed run of the machine's submit rule: ``caller`` submits a job with nice -100."""
    m = ReckonMachine()
    m.setup(n_agents=2, slots=[1, 1], ctrl_page=5, agent_page=5, round_timeout=30.0, lost_after=None,
            recent_window=300.0, retry_max=4.0, initial_jobs=[], start_grace=0.0)
    m.submit(slots=[1], command=["x"], retries=0, caller=caller, asks={"nice": -100})
    m.work()
    m._check_all_invariants()
    return m


def test_a_negative_nice_is_an_operator_s():
    """The control of the bites below: alice's submit is refused, the operator's goes through."""
    assert not _submit_with_a_negative_nice(CALLERS[1]).controller.state.jobs
    [job] = _submit_with_a_negative_nice(OPERATOR).controller.state.jobs.values()
    assert job.spec.nice == -100


def test_bite_negative_nice_of_a_user_accepted(monkeypatch):
    """Issue #22, mutant A2: a user's submit with a negative nice (a push up the queue, an operator's
    to give) is accepted."""
    from tests.model import mutants

    mutants.apply(mutants.ALL["A2"], monkeypatch.setattr, monkeypatch.setitem)
    with pytest.raises(AssertionError, match="INV-PERMISSION: alice submitted with nice -100"):
        _submit_with_a_negative_nice(CALLERS[1])


@pytest.mark.long  # a search of over 5 s (14 s measured): `make test-long`
def test_bite_negative_nice_of_a_user_accepted_is_found_by_search(monkeypatch):
    """A2 again, found by the machine's own search rather than a directed run."""
    from tests.model import mutants

    mutants.apply(mutants.ALL["A2"], monkeypatch.setattr, monkeypatch.setitem)
    assert_bites("INV-PERMISSION")


def _lose_a_running_job(*, cancel: bool) -> X.ExploredMachine:
    """A directed run of the machine's rules: alice's job runs, (``cancel``: she cancels it,) its
    agent goes down and stays silent past lost_after: the attempt is requeued (or its cancel
    confirmed).  Every invariant is checked after each step."""
    m = X.ExploredMachine.start(X.Scope(agents=1, jobs=0, slots=2, lost_after=10.0))
    m.submit(slots=[2], command=["x"], retries=0, caller=CALLERS[1])
    m.work()
    m.advance_time(dt=2.5, jitter=0.0, fire=False)
    m.settle()
    m.check()
    if cancel:
        m.cancel(i=0, running_only=True, caller=CALLERS[1])
    m.agent_crash(i=0, restart_now=False, lost=[], slots=None)
    m.settle()  # the controller sees the connection close: silence counts from here
    for _ in range(6):
        m.advance_time(dt=2.5, jitter=0.0, fire=True)
        m.check()
    return m


@pytest.mark.parametrize("cancel", [False, True])
def test_a_lost_attempt_is_charged(cancel):
    """The control of the bite below: as the model is, the lost attempt is charged and the oracle agrees."""
    m = _lose_a_running_job(cancel=cancel)
    ended = F.JobCancelConfirmed if cancel else F.JobRequeued
    assert any(isinstance(f, ended) and f.job == "1" for f in m.log)
    assert m.controller.state.usage.at("alice", m.now) > 0


@pytest.mark.parametrize("cancel", [False, True])
def test_bite_a_lost_attempt_not_charged(monkeypatch, cancel):
    """Issue #22: mutant U1 forgets to charge fair share for an attempt that ends by a requeue (and
    its twin, for a confirmed cancel).  The replayed log agrees with live (the same apply both
    sides): only INV-FAIRSHARE-REPLAY's oracle (tests/model/usage_check.py) catches it."""
    from tests.model import mutants

    if cancel:
        mutants.apply(mutants.Mutant("U1c", "a confirmed cancel is not charged", "reckon.model.state", None,
                                     "_cancel_confirmed", "    _charge(state, job, job.started_at, fact.confirmed_at)\n",
                                     ""), monkeypatch.setattr, monkeypatch.setitem)
    else:
        mutants.apply(mutants.ALL["U1"], monkeypatch.setattr, monkeypatch.setitem)
    with pytest.raises(AssertionError, match="INV-FAIRSHARE-REPLAY: user alice"):
        _lose_a_running_job(cancel=cancel)


def _requeue_a_running_job() -> X.ExploredMachine:
    """A directed run of the machine's rules: a job runs, a user requeues it, it runs again."""
    m = X.ExploredMachine.start(X.Scope(agents=1, jobs=0))
    m.submit(slots=[1], command=["x"], retries=0)
    m.work()
    m.advance_time(dt=2.5, jitter=0.0, fire=False)
    m.settle()
    m.requeue_running(i=0)
    for _ in range(3):
        m.work()
        m.advance_time(dt=2.5, jitter=0.0, fire=True)
        m.settle()
        m.check()
    return m


def test_requeue_of_a_running_job_runs_it_twice():
    """The control of the two bites below: as the model is, the job runs a second attempt."""
    m = _requeue_a_running_job()
    job = m.controller.state.jobs["1"]
    assert (job.attempt, job.requeues, job.exit_code) == (2, 1, None)
    assert sorted(p.attempt for p in m.procs if p.job == "1") == [1, 2]


def test_bite_requeue_records_the_stopped_attempt(monkeypatch):
    """Version 7: the finish of a requeued attempt forgets the request, so the kill's signal becomes
    the job's outcome (FAILED) instead of a second run."""
    finished = S._APPLY[F.JobFinished]

    def forgets(state, fact):
        state.jobs[fact.job].requeue_requested = False
        return finished(state, fact)

    monkeypatch.setitem(S._APPLY, F.JobFinished, forgets)
    with pytest.raises(AssertionError, match="INV-REQUEUE-ONCE"):
        _requeue_a_running_job()


def test_bite_requeue_counted_twice(monkeypatch):
    """Version 7: one requeue request requeues the job, but counts twice."""
    back = S._back_to_pending

    def twice(state, job):
        changes = back(state, job)
        job.requeues += 1
        return changes

    monkeypatch.setattr(S, "_back_to_pending", twice)
    with pytest.raises(AssertionError, match="INV-REQUEUE-ONCE"):
        _requeue_a_running_job()


@pytest.mark.long  # a search of minutes on a loaded machine: `make test-long`
def test_bite_begin_time_ignored(monkeypatch):
    """Issue #21: a dispatch that does not wait for the job's --begin time (the check dropped)."""
    from reckon.model import job_ops, policy, transaction

    plain = policy.ready
    for module in (job_ops, transaction, C):  # the dispatch check, the scheduler's notes and its view alike
        monkeypatch.setattr(module, "ready", lambda state, job, now=None: plain(state, job, float("inf")))
    assert_bites("INV-BEGIN-TIME")


@pytest.mark.long  # a search of over 5 s: `make test-long`
def test_bite_singleton_ignored(monkeypatch):
    """Issue #21: a singleton job dispatched while another of its name and owner runs (no blocker)."""
    from reckon.model import policy

    monkeypatch.setattr(policy, "blocker", lambda named, job: None)
    assert_bites("INV-SINGLETON")
