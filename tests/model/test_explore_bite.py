"""Checks that bite, for the exhaustive explorer (issue #13).

Each test re-injects one bug into ``model/`` (a one-line source mutation of a
real method, see ``mutate``), runs the explorer at the CI bound
(``explorer.SCENARIOS``) and asserts that it reports the named invariant.  The
first six are the classes issue #13 found the random machine missing; the rest
are bugs invented for other parts of the model.  Which layer catches each
(unit tests, the random machine, the explorer) is recorded in
docs/invariants.md, "Exhaustive exploration".
"""

from __future__ import annotations

import inspect
import textwrap

import pytest

from reckon.model import agent as A
from reckon.model import connections as CN
from reckon.model import job_ops as J
from reckon.model import reports as R
from reckon.model import resync as RS
from reckon.model import state as S
from reckon.model import startup as ST
from reckon.model.transaction import Transaction

import tests.model.explorer as X
from tests.model import mutants


def mutate(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, old: str, new: str) -> None:
    """Replace ``old`` (exactly once) by ``new`` in the source of ``owner.name`` and install the result."""
    original = inspect.getattr_static(owner, name)
    func = original.__func__ if isinstance(original, staticmethod) else original
    source = inspect.getsource(func)  # as indented in the file: ``old`` is copied from there
    assert source.count(old) == 1, f"mutation site not unique in {owner.__name__}.{name}: {old!r}"
    namespace: dict = {}
    exec(compile(textwrap.dedent(source.replace(old, new)), f"<mutant of {owner.__name__}.{name}>", "exec"),  # noqa: S102
         func.__globals__, namespace)
    mutant = namespace[name]
    monkeypatch.setattr(owner, name, mutant)
    handlers = getattr(owner, "_HANDLERS", None)
    if isinstance(handlers, dict):  # handlers dispatch through a table built at class creation
        for event, handler in list(handlers.items()):
            if handler is func:
                monkeypatch.setitem(handlers, event, getattr(mutant, "__func__", mutant))


def mutate_function(monkeypatch: pytest.MonkeyPatch, module, name: str, old: str, new: str) -> None:
    func = getattr(module, name)
    source = inspect.getsource(func)
    assert source.count(old) == 1, f"mutation site not unique in {module.__name__}.{name}: {old!r}"
    namespace: dict = {}
    exec(compile(textwrap.dedent(source.replace(old, new)), f"<mutant of {name}>", "exec"),  # noqa: S102
         func.__globals__, namespace)
    monkeypatch.setattr(module, name, namespace[name])
    mutants.patch_tables(func, namespace[name], module, monkeypatch.setattr, monkeypatch.setitem)


def assert_explorer_finds(*inv_ids: str, scenario: str) -> X.Violation:
    """Explore ``scenario`` of the CI bound (the one where the bug shows first); it must report ``inv_ids``."""
    results = X.run_scenarios(tuple(s for s in X.SCENARIOS if s.name == scenario))
    assert results, f"no CI scenario {scenario!r}"
    scenario, result = results[-1]
    assert result.violation is not None, "the explorer found nothing: " + "; ".join(
        f"{sc.name}: {r.summary()}" for sc, r in results)
    assert result.violation.invariant in inv_ids, f"found, but not by {inv_ids}:\n{result.violation}"
    print(f"{scenario.name}: {result.summary()}\n{result.violation}")
    return result.violation


# ---- the classes issue #13 names ------------------------------------------------------------


def test_explore_bite_round_token_check_removed(monkeypatch):
    """A page of a stale round is applied to the open one."""
    mutate_function(monkeypatch, R, "on_report_page", "if rnd is None or rnd.token != page.token:",
           "if rnd is None:")
    mutate(monkeypatch, RS.ResyncRound, "add_page", "if page.token != self.token:", "if False:")  # its backstop
    assert_explorer_finds("INV-STALE-IGNORED", "INV-REPORT-COMPLETE", "INV-REPORT-APPLIED-ONCE",
                          "INV-TRUE-OUTCOME", scenario="two-rounds")


def test_explore_bite_dispatch_gate_removed(monkeypatch):
    """A RECONCILING agent gets new work."""
    mutate_function(monkeypatch, J, "on_dispatch", "and session.connected and not session.reconciling",
           "and session.connected")
    assert_explorer_finds("INV-DISPATCH-GATED", scenario="rejoining")


def test_explore_bite_deadline_never_resolves(monkeypatch):
    """A round deadline that never resolves the round."""
    mutate_function(monkeypatch, CN, "on_deadline", "    end_round(tx, session, expire=True)\n", "    return\n")
    assert_explorer_finds("INV-ROUND-ENDS", "INV-LIVENESS-QUIET", scenario="rejoining")


# The agent's stale-token ResyncDone check removed (mutants.I4) is not reached at the CI bound
# (it needs two rounds on one connection, a completion during the second and a late copy of the
# first's ResyncDone): the swarm machine bites it by design, tests/model/test_swarm_bite.py.


@pytest.mark.long  # over 5 s (the two-rounds / dispatching scope): `make test-long`
def test_explore_bite_adopts_job_held_elsewhere(monkeypatch):
    """An extra is adopted although another agent's record holds it."""
    mutate_function(monkeypatch, R, "reconcile",
           "adoptable = job.state is JobState.PENDING and job.attempt == entry.attempt",
           "adoptable = job.attempt == entry.attempt")
    assert_explorer_finds("INV-SINGLE-OWNER", "INV-SLOTS-ACCOUNTED", "LocalProtocolError", "INV-FACTS-NO-DUPLICATE",
                          scenario="rolled-back")


def test_explore_bite_heartbeat_compares_counts_only(monkeypatch):
    """mutants.I6: two disagreements that cancel out in the counts (an orphan the agent runs, a
    placed job whose supervisor was lost) are never repaired.  Reachable only with a live
    connection reordered (docs/checking.md: equivalent on a connection that loses and reorders
    nothing), so the scenario judges tampered connections too."""
    mutate_function(monkeypatch, R, "on_heartbeat", "if theirs == ours:", "if theirs[0] == ours[0]:")
    assert_explorer_finds("INV-LIVENESS-AGREE", scenario="equal-counts")


@pytest.mark.long  # over 5 s (the two-rounds / dispatching scope): `make test-long`
def test_explore_bite_requeue_ignores_cancel(monkeypatch):
    """An unrecognized attempt with a cancel pending is requeued instead of confirmed: dispatched again."""
    # Every lost attempt takes the one path (Transaction.attempt_lost), so the bug is injected there.
    mutate(monkeypatch, Transaction, "attempt_lost", """        if job.cancel_requested:
            self.apply(F.JobCancelConfirmed(job=job.id, attempt=job.attempt, confirmed_at=at))
        else:
            self.apply(F.JobRequeued(job=job.id, attempt=job.attempt, reason=reason, requeued_at=at))""",
           """        self.apply(F.JobRequeued(job=job.id, attempt=job.attempt, reason=reason, requeued_at=at))""")
    assert_explorer_finds("INV-CANCELLED-NOT-DISPATCHED", scenario="two-rounds")


# ---- invented bugs in other parts of the model -------------------------------------------------


def test_explore_bite_refusal_of_old_attempt_requeues_current(monkeypatch):
    """mutants.N11: a late copy of a DispatchRefused of attempt 1 requeues attempt 2, which the agent
    runs (an id issued again after a restore without the id mark file): INV-REQUEUE-NOT-RUNNING."""
    mutate_function(monkeypatch, R, "on_dispatch_refused", "or job.attempt != msg.attempt ", "")
    assert_explorer_finds("INV-REQUEUE-NOT-RUNNING", scenario="reused-id")


def test_explore_bite_duplicate_dispatch_starts_again(monkeypatch):
    """The agent treats a duplicated Dispatch of an attempt it holds as new work."""
    mutate(monkeypatch, A.Agent, "_on_dispatch", "        if held is None:\n", "        if True:\n")
    assert_explorer_finds("INV-SINGLE-PROCESS", scenario="dispatching")


def test_explore_bite_finish_keeps_allocation(monkeypatch):
    """A finished job keeps its agent's slots (and its place in the running set)."""
    mutate_function(monkeypatch, S, "_finished", "agent = _release(state, job)", "agent = job.agent")
    assert_explorer_finds("INV-SINGLE-OWNER", "INV-SLOTS-ACCOUNTED", "INV-DIGEST-CURRENT", "INV-STATE-VALID",
                          scenario="dispatching")


def test_explore_bite_exit_not_in_durable_outbox(monkeypatch):
    """A completion is sent before (here: without) being made durable."""
    mutate(monkeypatch, A.Agent, "_on_exited", "        out.append(E.OutboxPut(report=report))", "        pass")
    assert_explorer_finds("INV-OUTBOX-DURABLE", scenario="dispatching")


def test_explore_bite_orphan_never_killed(monkeypatch):
    """An attempt that is current nowhere is left running."""
    mutate_function(monkeypatch, R, "kill_orphan", "    if session.connected:", "    if False:")
    assert_explorer_finds("INV-LIVENESS-AGREE", "INV-LIVENESS-QUIET", scenario="dispatching")


def test_explore_bite_close_keeps_session(monkeypatch):
    """A closed connection is not dropped: its round stays open, the agent stays 'connected'."""
    mutate_function(monkeypatch, CN, "on_closed", "    drop_connection(tx, ev.conn)", "    pass")
    assert_explorer_finds("INV-ROUND-ENDS", "INV-SCHEDULER-VIEW", "INV-DISPATCH-GATED", "INV-LIVENESS-QUIET",
                          scenario="rolled-back")


def test_explore_bite_start_gate_opens_at_once(monkeypatch):
    """Issue #9 gap 2: after a restart the start gate lets dispatch through before the known agents rejoined."""
    mutate_function(monkeypatch, ST, "check_gate", "    if gate.known and not gate.waiting:\n", "    if True:\n")
    assert_explorer_finds("INV-START-HOLD", scenario="rolled-back")


def test_explore_bite_agent_kills_by_job_alone(monkeypatch):
    """mutants.K1: an agent holding two attempts of one job (the orphan of a requeued attempt still
    dying while the new attempt runs there) gets a second Kill of the old one and kills both: the
    agent-side check of INV-NO-WRONG-KILL (ReckonMachine._check_agent_kills)."""
    m = mutants.KILL_BY_JOB
    mutate(monkeypatch, A.Agent, m.name, m.old, m.new)
    violation = assert_explorer_finds("INV-NO-WRONG-KILL", scenario="orphan-dying")
    assert "kills 1/2 for a Kill of 1/1" in violation.message


# ---- issue #22: backfill's promise and partition placement --------------------------------------


@pytest.mark.parametrize("scenario", ["backfill", "backfill-fault"])
def test_explore_bite_backfill_ignores_the_reservation(monkeypatch, scenario):
    """mutants.B1: a later job starts on the agent promised to a blocked wide job whatever its end:
    the 1-slot job without a time limit takes a slot the 2-slot job was promised at 110."""
    mutants.apply(mutants.ALL["B1"], monkeypatch.setattr, monkeypatch.setitem)
    violation = assert_explorer_finds("INV-BACKFILL-PROMISE", scenario=scenario)
    assert "was promised 110.0" in violation.message and "delay it to inf" in violation.message


def test_explore_bite_dispatch_ignores_the_partitions_agents(monkeypatch):
    """mutants.P1: the controller checks a proposal against its partition's state only.  A
    proposal made before the operator moved pa to a2 reaches the controller after: dispatched
    to a1, outside pa.  The scheduler's own filter cannot help (it proposed before the move)."""
    mutants.apply(mutants.ALL["P1"], monkeypatch.setattr, monkeypatch.setitem)
    violation = assert_explorer_finds("INV-PARTITION", scenario="partition-moved")
    assert [step[0] for step in violation.trace] == ["scheduler_pass", "set_partition", "late_proposal"]
    namespace: dict = {}  # the printed snippet replays it: the scope's repr and the operator's step included
    exec(violation.snippet(), {"ExploredMachine": X.ExploredMachine, "Scope": X.Scope}, namespace)  # noqa: S102
    with pytest.raises(AssertionError, match="INV-PARTITION: 2/1 dispatched to a1"):
        namespace["test_found_by_explorer"]()


def test_explore_bite_scheduler_ignores_the_partition(monkeypatch):
    """mutants.P2: the scheduler places by free slots alone.  The controller refuses what it
    proposes outside a job's partition, so a pb job is proposed to a1 (first by name) pass after
    pass while a2 is free: INV-LIVENESS-SCHEDULES."""
    mutants.apply(mutants.ALL["P2"], monkeypatch.setattr, monkeypatch.setitem)
    assert_explorer_finds("INV-LIVENESS-SCHEDULES", scenario="partition-moved")


def test_explore_bite_scheduler_and_dispatch_ignore_the_partition(monkeypatch):
    """mutants.P2 with P1, the controller's backstop, removed too: the job runs outside its partition."""
    mutants.apply(mutants.ALL["P2"], monkeypatch.setattr, monkeypatch.setitem)
    mutants.apply(mutants.ALL["P1"], monkeypatch.setattr, monkeypatch.setitem)
    assert_explorer_finds("INV-PARTITION", scenario="partition-moved")


def test_explore_bite_scheduler_ignores_a_new_priority(monkeypatch):
    """mutants.Q1: the scheduler keeps a reprioritized job at its old place in its queue: the
    operator's push of a queued job leaves the scheduler's order behind the controller's."""
    mutants.apply(mutants.ALL["Q1"], monkeypatch.setattr, monkeypatch.setitem)
    violation = assert_explorer_finds("INV-SCHEDULER-VIEW", scenario="backfill-priority")
    assert violation.trace[-1][0] == "prioritize"
