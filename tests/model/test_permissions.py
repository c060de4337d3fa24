"""Users in the model (issue #20): ownership as a fact, the one permission rule, per-user limits.

A job belongs to the caller of its submit (``JobSubmitted.owner``), forever; a refusal is one
line naming the owner and changes nothing (digest before == after, no command); operators and
token mode (caller None) may do everything; the scheduler starts no job past its owner's limit.
"""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.arrays import parse_array
from reckon.model.controller import ControllerConfig
from reckon.model.errors import PermissionDenied
from reckon.model.nodes import pending_reason
from reckon.model.permissions import ACTIONS, Caller, check
from reckon.model.resources import Owner
from reckon.model.state import replay, restore, snapshot

from tests.model.harness import Harness, facts_of, sends_of, spec

ALICE = Caller(uid=1001, gid=1001, user="alice")
BOB = Caller(uid=1002, gid=1002, user="bob")
ROOT = Caller(uid=0, gid=0, user="root", operator=True)


def submit(h: Harness, caller: Caller | None, *, slots: int = 1) -> str:
    job = h.controller.state.next_job_id()
    h.controller_handle(E.SubmitJob(spec=spec(f"j{job}", slots=slots), now=h.now, uid=h.uid(), caller=caller,
                                    queue_anyway=True))
    return job


def refused(h: Harness, event: E.ControllerEvent, match: str) -> None:
    """``event`` is refused with a line matching ``match``, and it changed nothing."""
    before, log = h.controller.state.digest(), len(h.log)
    with pytest.raises(PermissionDenied, match=match):
        h.controller.handle(event)
    assert h.controller.state.digest() == before and len(h.log) == log


# ---- the rule --------------------------------------------------------------------------------


def test_the_rule_table() -> None:
    alice = ALICE.owner()
    for action in ACTIONS:
        assert check(None, action, alice) is None  # token mode: everything
        assert check(ROOT, action, alice) is None and check(ROOT, action, None) is None  # operators: everything
    for action in ("submit", "see"):
        assert check(BOB, action, alice) is None
    for action in ("cancel", "hold", "release", "requeue", "signal", "read"):
        assert check(ALICE, action, alice) is None
        assert check(BOB, action, alice, job="12") == f"job 12 belongs to alice: bob may not {action} it"
        assert "belongs to no user" in check(BOB, action, None, job="12")  # token-mode jobs: operators only
    for action in ("drain", "resume", "forget"):
        assert check(ALICE, action, None, node="n1") == f"only an operator may {action} agent n1: alice is not one"
    with pytest.raises(ValueError, match="unknown action"):
        check(ALICE, "explode", None)


def test_owner_is_compared_by_uid_not_by_name() -> None:
    renamed = Caller(uid=1001, gid=5, user="alice2")  # the same uid under another name
    assert check(renamed, "cancel", ALICE.owner()) is None
    impostor = Caller(uid=1003, gid=1001, user="alice")  # the same name, another uid
    assert check(impostor, "cancel", ALICE.owner()) is not None


# ---- ownership as a fact ----------------------------------------------------------------------


def test_the_owner_is_the_caller_of_the_submit_and_survives_log_and_snapshot() -> None:
    h = Harness()
    mine, tokens = submit(h, ALICE), submit(h, None)
    h.controller_handle(E.SubmitBatch(specs=(spec("b1"), spec("b2")), now=h.now, uids=(h.uid(), h.uid()),
                                      caller=BOB, queue_anyway=True))
    h.controller_handle(E.SubmitArray(spec=spec("arr"), array=parse_array("0-1"), now=h.now,
                                      uids=(h.uid(), h.uid()), caller=BOB, queue_anyway=True))
    submitted = [f for f in h.log if isinstance(f, F.JobSubmitted)]
    assert [f.owner for f in submitted] == [ALICE.owner(), None] + [BOB.owner()] * 4
    assert h.job(mine).to_dict()["user"] == "alice" and h.job(mine).to_dict()["owner"] == ALICE.owner().to_dict()
    assert h.job(tokens).to_dict()["user"] is None and h.job(tokens).to_dict()["owner"] is None
    h.assert_replay_agrees()  # the owner crosses encode/decode
    assert restore(snapshot(h.controller.state)).jobs[mine].owner == ALICE.owner()


def test_an_old_submit_fact_with_an_owner_is_corrupt() -> None:
    data = F.encode(F.JobSubmitted(job="1", spec=spec(), submitted_at=1.0, owner=ALICE.owner()))
    data["v"] = 2
    with pytest.raises(ValueError, match="unknown fields \\['owner'\\]"):
        F.decode(data)
    del data["owner"]  # what a v2 fact is
    assert F.decode(data).owner is None
    # A submit without an owner (token mode) encodes as before owners existed: no key at all.
    assert "owner" not in F.encode(F.JobSubmitted(job="1", spec=spec(), submitted_at=1.0))


def test_the_dispatch_carries_the_owner_to_the_agent_which_keeps_it() -> None:
    h = Harness()
    h.join("a1")
    job = submit(h, ALICE)
    h.schedule()
    [dispatch] = sends_of(h.controller_commands, M.Dispatch)
    assert dispatch.owner == ALICE.owner()
    assert M.to_wire(dispatch)["owner"] == {"uid": 1001, "gid": 1001, "user": "alice"}
    commands = h.deliver_to_agent("a1")
    [start] = [c for c in commands if isinstance(c, E.StartProcess)]
    assert start.owner == ALICE.owner()
    assert h.agents["a1"].durable_records[(job, 1)].owner == ALICE.owner()


def test_a_token_mode_dispatch_and_an_old_agent_see_no_owner_field() -> None:
    h = Harness()
    h.join("a1")
    submit(h, None)
    h.schedule()
    [dispatch] = sends_of(h.controller_commands, M.Dispatch)
    assert "owner" not in M.to_wire(dispatch)
    session = h.controller.sessions["a1"]
    session.version = 5
    assert session.owner_for(ALICE.owner()) is None  # a version 5 agent is never sent a field it cannot read
    session.version = M.OWNERS_SINCE
    assert session.owner_for(ALICE.owner()) == ALICE.owner()


# ---- refusals change nothing -----------------------------------------------------------------


def test_another_user_may_not_touch_a_job_and_nothing_changes() -> None:
    h = Harness()
    h.join("a1")
    job = submit(h, ALICE)
    line = f"job {job} belongs to alice: bob may not"
    refused(h, E.HoldJob(job=job, now=h.now, caller=BOB), line + " hold it")
    refused(h, E.CancelJob(job=job, now=h.now, caller=BOB), line + " cancel it")
    h.controller_handle(E.HoldJob(job=job, now=h.now, caller=ALICE))
    refused(h, E.ReleaseJob(job=job, now=h.now, caller=BOB), line + " release it")
    h.controller_handle(E.ReleaseJob(job=job, now=h.now, caller=ROOT))  # an operator may
    h.schedule()
    h.pump()
    h.exit("a1", job)
    h.pump()
    assert h.job(job).terminal
    refused(h, E.RequeueJob(job=job, now=h.now, caller=BOB), line + " requeue it")
    h.controller_handle(E.RequeueJob(job=job, now=h.now, caller=ALICE))
    assert not h.job(job).terminal


def test_a_token_mode_job_is_operators_only_under_callers() -> None:
    h = Harness()
    job = submit(h, None)
    refused(h, E.CancelJob(job=job, now=h.now, caller=ALICE), "belongs to no user")
    h.controller_handle(E.CancelJob(job=job, now=h.now, caller=ROOT))
    assert h.job(job).terminal


def test_node_operations_are_operators_only() -> None:
    h = Harness()
    h.join("a1")
    refused(h, E.DrainAgent(agent="a1", now=h.now, caller=ALICE), "only an operator may drain agent a1")
    refused(h, E.ResumeAgent(agent="a1", now=h.now, caller=ALICE), "only an operator may resume agent a1")
    h.disconnect("a1")
    refused(h, E.ForgetAgent(agent="a1", now=h.now, caller=BOB), "only an operator may forget agent a1")
    assert facts_of(h.controller_handle(E.DrainAgent(agent="a1", now=h.now, caller=ROOT)))
    assert facts_of(h.controller_handle(E.ForgetAgent(agent="a1", now=h.now, caller=ROOT)))


def test_an_array_cancel_is_all_or_nothing_and_names_the_others() -> None:
    h = Harness()
    h.controller_handle(E.SubmitArray(spec=spec("arr"), array=parse_array("0-2"), now=h.now,
                                      uids=(h.uid(), h.uid(), h.uid()), caller=ALICE, queue_anyway=True))
    refused(h, E.CancelJob(job="1", now=h.now, caller=BOB), "job 1 belongs to alice: bob may not cancel it")
    # A state where one member is another's (no submit makes it; the rule must still hold).
    h.controller.state.jobs["3"].owner = BOB.owner()
    refused(h, E.CancelJob(job="1", now=h.now, caller=ALICE), r"array 1: job\(s\) 3 belong to bob: alice may not")
    h.controller.state.jobs["3"].owner = ALICE.owner()
    h.controller_handle(E.CancelJob(job="1", now=h.now, caller=ALICE))
    assert all(h.job(j).terminal for j in ("1", "2", "3"))


# ---- per-user limits -------------------------------------------------------------------------


def limited(**limits: int) -> Harness:
    h = Harness(controller_config=ControllerConfig(**limits))
    h.add_agent("a1", slots=16)
    h.join("a1")
    return h


def running_of(h: Harness, user: str) -> list[str]:
    return [j.id for j in h.controller.state.jobs.values()
            if j.state.value == "RUNNING" and j.owner is not None and j.owner.user == user]


def test_no_user_runs_more_jobs_than_the_limit_and_why_pending_says_so() -> None:
    h = limited(max_running_per_user=2)
    alice = [submit(h, ALICE) for _ in range(5)]
    bob = submit(h, BOB)
    h.schedule()
    assert running_of(h, "alice") == alice[:2] and running_of(h, "bob") == [bob]
    assert pending_reason(h.controller, alice[2]) == (
        "waiting: alice runs 2 jobs, the per-user limit (max_running_per_user) is 2")
    assert h.schedule() == []  # parked: a pass does not propose them again
    h.pump()
    h.exit("a1", alice[0])
    h.pump()
    h.schedule()
    assert running_of(h, "alice") == [alice[1], alice[2]]
    h.assert_views_agree()


def test_the_cpu_limit_counts_slots() -> None:
    h = limited(max_cpus_per_user=4)
    first, second, third = submit(h, ALICE, slots=3), submit(h, ALICE, slots=2), submit(h, ALICE, slots=1)
    h.schedule()
    assert running_of(h, "alice") == [first, third]  # 3 + 1; the 2-CPU job would make 5
    assert pending_reason(h.controller, second) == (
        "waiting: alice runs jobs on 4 CPUs and this one needs 2, the per-user limit (max_cpus_per_user) is 4")


def test_the_limits_hold_within_one_pass_and_across_a_controller_restart() -> None:
    h = limited(max_running_per_user=3)
    jobs = [submit(h, ALICE) for _ in range(6)]
    h.schedule()
    h.pump()  # the agent runs them
    assert len(running_of(h, "alice")) == 3
    h.crash_controller()  # a fresh scheduler learns the running jobs from the initial notes
    h.join("a1")
    h.pump()
    h.controller_handle(E.Tick(now=h.now + 100))  # past any start gate
    assert h.controller.start_gate is None
    h.schedule()
    assert running_of(h, "alice") == jobs[:3]


def test_a_parked_job_that_is_cancelled_does_not_strand_the_rest() -> None:
    h = limited(max_running_per_user=1)
    jobs = [submit(h, ALICE) for _ in range(3)]
    h.schedule()
    h.schedule()  # jobs 2 and 3 are parked
    h.pump()
    h.exit("a1", jobs[0])
    h.pump()
    h.controller_handle(E.CancelJob(job=jobs[1], now=h.now, caller=ALICE))
    h.schedule()
    assert running_of(h, "alice") == [jobs[2]]


def test_the_controller_refuses_a_proposal_past_the_limit() -> None:
    """A stale proposal (the scheduler's view behind) cannot start a job past its owner's limit:
    the controller decides, as for slots, and the job stays PENDING."""
    h = limited(max_running_per_user=1)
    first, second = submit(h, ALICE), submit(h, ALICE)
    h.dispatch(first, "a1")
    assert not facts_of(h.dispatch(second, "a1"))
    assert running_of(h, "alice") == [first] and h.job(second).state.value == "PENDING"
    assert h.controller.state.user_running["alice"] == [1, 1]


def test_token_mode_jobs_are_not_limited() -> None:
    h = limited(max_running_per_user=1)
    for _ in range(3):
        submit(h, None)
    h.schedule()
    assert len([j for j in h.controller.state.jobs.values() if j.state.value == "RUNNING"]) == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_bad_limit_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="max_running_per_user must be a positive integer"):
        ControllerConfig(max_running_per_user=bad)


def test_replay_of_owned_jobs_equals_live() -> None:
    h = limited(max_running_per_user=2)
    for caller in (ALICE, BOB, None, ALICE):
        submit(h, caller)
    h.schedule()
    h.pump()
    assert replay(h.log).digest() == h.controller.state.digest()


def test_a_users_backlog_is_parked_once_not_walked_by_every_pass() -> None:
    """The cost per pass stays bounded: a job met at its owner's limit leaves the FIFO (parked in
    the user's own queue), so later passes do not walk the user's backlog; one ending lets one out."""
    h = limited(max_running_per_user=2)
    alice = [submit(h, ALICE) for _ in range(50)]
    bob = submit(h, BOB)
    h.schedule()
    assert running_of(h, "bob") == [bob]
    queued = {job for _, job in h.scheduler._queue}  # the FIFO (white box: what a pass pops)
    assert not queued & set(alice[2:]), "alice's waiting jobs are still in the FIFO"
    h.pump()
    h.exit("a1", alice[0])
    h.pump()
    h.schedule()
    assert running_of(h, "alice") == [alice[1], alice[2]]
    assert not {job for _, job in h.scheduler._queue} & set(alice[3:])


def test_a_cluster_of_owners_refuses_agents_that_would_not_know_whom_a_job_runs_as() -> None:
    """min_agent_version (6 on a MUNGE cluster): a version 5 agent is never told a job's owner
    (Dispatch.owner is left out for it) and would run alice's job as itself, root included."""
    h = Harness(controller_config=ControllerConfig(min_agent_version=M.OWNERS_SINCE))
    before = h.controller.state.digest()
    commands = h.controller.handle(E.AgentJoined(conn=5, join=M.Join(agent="old", slots=4, version=5),
                                                 token=b"t" * M.TOKEN_BYTES, now=0.0))
    [error] = sends_of(commands, M.Error)
    assert "cannot run jobs as their owners" in error.reason and error.code is M.RefusalCode.VERSION
    assert error.permanent and facts_of(commands) == [] and h.controller.state.digest() == before
    # A version 6 agent joins; without the floor, a version 5 one does too (token mode).
    h.join("a1")
    assert "a1" in h.controller.state.agents
    assert not sends_of(Harness().controller.handle(E.AgentJoined(
        conn=5, join=M.Join(agent="old", slots=4, version=5), token=b"t" * M.TOKEN_BYTES, now=0.0)), M.Error)
    with pytest.raises(ValueError, match="min_agent_version"):
        ControllerConfig(min_agent_version=M.PROTOCOL_VERSION + 1)


def test_a_job_asking_more_cpus_than_the_per_user_limit_is_refused_at_submit() -> None:
    """It could never start (it would wait PENDING forever): single, array and batch submits are
    refused in one line and change nothing; a job within the limit, and token mode, are not."""
    from reckon.model.errors import LocalProtocolError

    h = limited(max_cpus_per_user=4)
    words = "needs 5 CPUs and the per-user limit (max_cpus_per_user) is 4: it could never start"
    big = spec("big", slots=5)
    events = [E.SubmitJob(spec=big, now=h.now, uid=h.uid(), caller=ALICE, queue_anyway=True),
              E.SubmitArray(spec=big, array=parse_array("1-3"), now=h.now, uids=(h.uid(), h.uid(), h.uid()),
                            caller=ALICE, queue_anyway=True),
              E.SubmitBatch(specs=(spec("ok", slots=1), big), now=h.now, uids=(h.uid(), h.uid()), caller=ALICE,
                            queue_anyway=True)]
    for event in events:
        before, log = h.controller.state.digest(), len(h.log)
        with pytest.raises(LocalProtocolError) as info:
            h.controller.handle(event)
        assert words in str(info.value) and "\n" not in str(info.value), str(info.value)
        assert h.controller.state.digest() == before and len(h.log) == log
    assert h.job(submit(h, ALICE, slots=4)).state.value in ("PENDING", "RUNNING")  # at the limit: fine
    assert h.job(submit(h, None, slots=5)).state.value in ("PENDING", "RUNNING")  # token mode: no limits
