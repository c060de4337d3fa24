"""Re-injected bugs for measuring the checks (issue #13), and which layer catches each.

Each ``Mutant`` is a one-line source mutation of a real function of ``model/``
(applied with ``apply``: the function is recompiled from its patched source and
installed in place, handler tables included).  ``ISSUE_CLASSES`` are the
classes issue #13 names; ``INVENTED`` were written down (this file was
committed) before any of them was run against any check, so that no check was
tuned to them.  ``python -m tests.model.mutants LAYER [ID...]`` (from the checkout's root) runs one layer against the
mutants and prints, per mutant, what caught it (or ``survived``):

- ``unit``: the model's hand-written tests (tests/model without the random
  machines, the explorer and the bite tests), in a subprocess;
- ``machine``: ``test_stateful.ReckonMachine`` with the ``ci`` profile's budget;
- ``swarm``: ``swarm.SwarmMachine`` with the same budget;
- ``explorer``: ``explorer.SCENARIOS`` (the CI bound).

The results are in docs/checking.md; the bite tests (test_explore_bite.py,
test_swarm_bite.py) keep the lessons in the suite.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: mutants run as tests.model.mutants


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str
    module: str  # where the function lives
    owner: str | None  # its class, or None for a module-level function
    name: str
    old: str
    new: str


def _resolve(m: Mutant):
    import importlib

    module = importlib.import_module(m.module)
    holder = getattr(module, m.owner) if m.owner else module
    return module, holder


def apply(m: Mutant, setattr_=setattr, setitem=None) -> None:
    """Install the mutant (``setattr_``/``setitem``: a monkeypatch's, to undo it after a test)."""
    setitem = setitem or (lambda d, k, v: d.__setitem__(k, v))
    module, holder = _resolve(m)
    original = inspect.getattr_static(holder, m.name) if m.owner else getattr(module, m.name)
    func = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    if isinstance(func, property):
        func = func.fget
    source = inspect.getsource(func)
    assert source.count(m.old) == 1, f"{m.id}: mutation site not unique in {m.name}: {m.old!r}"
    namespace: dict = {}
    exec(compile(textwrap.dedent(source.replace(m.old, m.new)), f"<mutant {m.id}>", "exec"),  # noqa: S102
         func.__globals__, namespace)
    mutant = namespace[m.name]
    if isinstance(mutant, (property, staticmethod, classmethod)):  # the source carried its decorator
        setattr_(holder, m.name, mutant)
        func_of_mutant = getattr(mutant, "fget", None) or mutant.__func__
        mutant = func_of_mutant
    elif isinstance(original, property):
        setattr_(holder, m.name, property(mutant))
    elif isinstance(original, staticmethod):
        setattr_(holder, m.name, staticmethod(mutant))
    else:
        setattr_(holder, m.name, mutant)
    patch_tables(func, getattr(mutant, "__func__", mutant), holder, setattr_, setitem)


def patch_tables(func, mutant, holder, setattr_=setattr, setitem=None) -> None:
    """Point every dispatch table that names ``func`` at ``mutant``: the holder's own
    (``_HANDLERS``, ``_APPLY``), the controller's ``HANDLERS`` and its ``POST_HANDLE`` hooks,
    all built at import."""
    import reckon.model.controller as controller

    setitem = setitem or (lambda d, k, v: d.__setitem__(k, v))
    tables = [getattr(holder, name, None) for name in ("_HANDLERS", "_APPLY")] + [controller.HANDLERS]
    for table in tables:
        if isinstance(table, dict):
            for key, handler in list(table.items()):
                if handler is func:
                    setitem(table, key, mutant)
    if func in controller.POST_HANDLE:
        setattr_(controller, "POST_HANDLE", tuple(mutant if h is func else h for h in controller.POST_HANDLE))


ISSUE_CLASSES = (
    Mutant("I1", "round-token check removed: a stale round's page reaches the open one", "reckon.model.reports",
           None, "on_report_page", "if rnd is None or rnd.token != page.token:", "if rnd is None:"),
    Mutant("I2", "dispatch gate removed: a RECONCILING agent gets new work", "reckon.model.job_ops", None,
           "on_dispatch", "and session.connected and not session.reconciling", "and session.connected"),
    Mutant("I3", "a round deadline never resolves the round", "reckon.model.connections", None, "on_deadline",
           "    end_round(tx, session, expire=True)\n", "    return\n"),
    Mutant("I4", "agent stale-token check removed: any ResyncDone acknowledges", "reckon.model.agent", "Agent", "_on_done",
           "if msg.token != self._answered:", "if False:"),
    Mutant("I5", "an extra adopted although another agent holds it", "reckon.model.reports", None, "reconcile",
           "adoptable = job.state is JobState.PENDING and job.attempt == entry.attempt",
           "adoptable = job.attempt == entry.attempt"),
    Mutant("I6", "heartbeat digest compare only compares counts", "reckon.model.reports", None, "on_heartbeat",
           "if theirs == ours:", "if theirs[0] == ours[0]:"),
)

# Written down before any was run (see the module docstring).
INVENTED = (
    Mutant("N1", "scheduler: first fit ignores the job's size", "reckon.model.scheduler", "Scheduler", "place",
           "if free[name] >= slots:", "if free[name] >= 1:"),
    Mutant("N2", "scheduler: forgets that an agent is reconciling", "reckon.model.scheduler", "Scheduler", "notify",
           "note.connected, note.reconciling,", "note.connected, False,"),
    Mutant("N3", "agent: a Kill ignores the submission uid", "reckon.model.agent", "Agent", "_on_message",
           "and (msg.uid is None or record.uid is None or msg.uid == record.uid)):", "):"),
    Mutant("N4", "agent: an indeterminate attempt is reported RUNNING", "reckon.model.agent", "Agent", "_entry",
           "status=M.EntryStatus.UNRECOGNIZED,\n                             uid=record.uid)",
           "status=M.EntryStatus.RUNNING,\n                             uid=record.uid)"),
    Mutant("N5", "agent: heartbeats never say what was seen (never comparable)", "reckon.model.agent", "Agent", "_on_tick",
           "seen_seq=self.seen_seq))", "seen_seq=0))"),
    Mutant("N6", "controller: the kill of a cancel requested while away is not repeated after the round",
           "reckon.model.reports", None, "apply_report", "        if job.cancel_requested:\n",
           "        if False:\n"),
    Mutant("N7", "state: a requeue keeps the old attempt's start time", "reckon.model.state", None, "_requeued",
           "job.started_at = None", "pass"),
    Mutant("N8", "records: an unacknowledged outcome expires", "reckon.model.records", "LocalJob", "expirable",
           "(self.status is LocalStatus.FINISHED and self.acked)", "(self.status is LocalStatus.FINISHED)"),
    Mutant("N9", "controller: a connected agent is declared lost", "reckon.model.connections", None, "on_tick",
           "if session.connected or session.lost or", "if session.lost or"),
    Mutant("N10", "agent: a late copy of the answered round's query is answered again", "reckon.model.agent", "Agent",
           "_on_query_page", "if msg.token in self._answered_before:", "if False:"),
    Mutant("N11", "controller: a refusal of an old attempt requeues the current one", "reckon.model.reports",
           None, "on_dispatch_refused", "or job.attempt != msg.attempt ", ""),
    Mutant("N12", "controller: a heartbeat is compared before the agent saw all we sent", "reckon.model.reports",
           None, "on_heartbeat", "msg.seen_seq != session.seq or ", ""),
    Mutant("N13", "agent: an acknowledged outcome is not marked acknowledged", "reckon.model.agent", "Agent",
           "_acknowledge", "self._store(out, replace(record, acked=True))", "pass"),
)

# Issue #19's agent-side kill check: an agent holding two attempts of one job (an orphan still dying
# beside the new attempt) gets a Kill of the old one (explorer scenario "orphan-dying").
KILL_BY_JOB = Mutant("K1", "agent: a Kill kills every running attempt of its job, not the one it names",
                     "reckon.model.agent", "Agent", "_on_message",
                     "out.append(E.KillProcess(job=msg.job, attempt=msg.attempt))",
                     "out.extend(E.KillProcess(job=key[0], attempt=key[1]) for key, held in self.records.items() "
                     "if key[0] == msg.job and held.status is LocalStatus.RUNNING)")

# Issue #20's resources: the shared fit forgets the memory in use (the scheduler, the dispatch
# check and apply all use AgentInfo.free), and a running job's GPUs are not marked held (the
# lowest-free pick then gives a GPU twice).  INV-NO-OVERCOMMIT and INV-GPU-ONCE must catch them.
RESOURCES = (
    Mutant("R1", "state: the free memory of an agent ignores what its running jobs hold", "reckon.model.state",
           "AgentInfo", "free", "mem = None if res.mem is None else res.mem - self.mem_used",
           "mem = None if res.mem is None else res.mem"),
    Mutant("R2", "state: a placed job's GPUs are not marked held", "reckon.model.state", None, "_hold",
           "info.gpus_held.setdefault(index, set()).add(job.id)", "pass"),
)

# Issue #22's fair share: an attempt that ends by a requeue (its agent lost or forgotten, a cancel
# confirmed is the other such end) is not charged.  Replay agrees with live (the same apply both
# sides): only the oracle of tests/model/usage_check.py, from the facts alone, can tell.
FAIRSHARE = (
    Mutant("U1", "state: a requeued attempt is not charged its CPU-seconds", "reckon.model.state", None,
           "_requeued", "    _charge(state, job, job.started_at, fact.requeued_at)\n", ""),
)

# Issue #22's scheduling: backfill lets a later job start on the reserved agent whatever its end
# (INV-BACKFILL-PROMISE); the controller checks a proposal against its partition's state but not its
# agents, so a proposal made before the operator moved the partition is dispatched outside it
# (INV-PARTITION); the scheduler places by free slots alone, whatever the job's partition (the
# controller refuses such proposals: alone, a pb job proposed to a1 forever while a2 is free); the
# scheduler keeps a reprioritized job at its old place in the queue.
SCHEDULING = (
    Mutant("B1", "scheduler: backfill ignores the reservation (a later job starts on the reserved agent)",
           "reckon.model.scheduler", "Scheduler", "place",
           "return held is None or all(r.admits(usage, now, time_limit) for r in held)", "return True"),
    Mutant("P1", "controller: a proposal is checked against its partition's state, not its agents",
           "reckon.model.job_ops", None, "on_dispatch",
           "may_run_on(tx.state.partitions, job.spec, ev.agent)\n                                         and ", ""),
    Mutant("P2", "scheduler: placement ignores the job's partition", "reckon.model.scheduler", "Scheduler", "place",
           "partition = self._partition_of.get(job)  # issue #22", "partition = None  # issue #22"),
    Mutant("Q1", "scheduler: a queued job's new priority is not taken (it keeps its place in the queue)",
           "reckon.model.scheduler", "Scheduler", "notify", "if known is None or known[0] != key:",
           "if known is None:"),
)

# Issue #22's priorities: the operator's adjustment left out of a job's priority, or taken into it
# only at the next sweep (the controller and the scheduler then agree on the wrong order:
# INV-SCHEDULER-VIEW is blind to both, INV-PRIORITY-ORDER must catch them), and a user's negative
# nice accepted (INV-PERMISSION must catch it).
PRIORITIES = (
    # model/priority.py's factors, installed where the controller calls it (model/transaction.py).
    Mutant("A1", "priority: an operator's adjustment is not counted", "reckon.model.transaction", None, "factors",
           "- nice + adjust", "- nice"),
    Mutant("A2", "submit: a user's negative nice is accepted", "reckon.model.job_ops", None, "check_submit",
           "if spec.nice < 0:", "if False:"),
    Mutant("A3", "controller: an adjustment keeps the priority noted before it (until the next sweep)",
           "reckon.model.job_ops", None, "on_update", "tx.volatile.priorities.pop(job.id, None)", "pass"),
)

ALL = {m.id: m for m in ISSUE_CLASSES + INVENTED + (KILL_BY_JOB,) + RESOURCES + FAIRSHARE + SCHEDULING + PRIORITIES}

UNIT_IGNORES = ("test_stateful.py", "test_swarm.py", "test_swarm_bite.py", "test_explore.py",
                "test_explore_bite.py", "test_checks_bite.py")


def _first_inv(text: str) -> str:
    for word in text.replace(",", " ").replace(":", " ").split():
        if word.startswith("INV-"):
            return word
    return text.strip().splitlines()[0][:80] if text.strip() else "failed"


def run_machine(machine: type, examples: int = 300, steps: int = 50) -> str | None:
    """The machine at the ci profile's budget, derandomized; the invariant it failed, or None."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples, stateful_step_count=steps, deadline=None, database=None, derandomize=True,
            phases=[Phase.generate], report_multiple_bugs=False, print_blob=False,
            suppress_health_check=list(HealthCheck)))
    except Exception as exc:  # noqa: BLE001 - any failure is a catch
        return _first_inv(str(exc)) if "INV-" in str(exc) else type(exc).__name__
    return None


def run_layer(layer: str, m: Mutant) -> str | None:
    if layer == "unit":
        here = os.path.dirname(os.path.abspath(__file__))
        ignores = [f"--ignore={os.path.join(here, f)}" for f in UNIT_IGNORES]
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p",
                               "tests.model.mutant_plugin", here, *ignores], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.dirname(here)),
                              env={**os.environ, "RECKON_MUTANT": m.id})
        if proc.returncode == 0:
            return None
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED") or line.startswith("ERROR")]
        return failed[0].split(" - ")[0].split("::")[-1] if failed else f"rc {proc.returncode}"
    apply(m)
    if layer == "machine":
        from tests.model.test_stateful import ReckonMachine
        return run_machine(ReckonMachine)
    if layer == "swarm":
        from tests.model.swarm import SwarmMachine
        return run_machine(SwarmMachine)
    if layer == "explorer":
        import tests.model.explorer as X
        results = X.run_scenarios(X.SCENARIOS)
        v = results[-1][1].violation
        return f"{v.invariant} ({results[-1][0].name})" if v else None
    raise SystemExit(f"unknown layer {layer}")


def main() -> None:  # pragma: no cover - a measuring tool
    layer, ids = sys.argv[1], sys.argv[2:] or list(ALL)
    for mid in ids:
        started = time.monotonic()
        # A fresh interpreter per mutant: a mutant must not leak into the next one.
        if os.environ.get("RECKON_MUTANT_CHILD"):
            found = run_layer(layer, ALL[mid])
            print(f"{mid}\t{layer}\t{found or 'survived'}", flush=True)
            return
        proc = subprocess.run([sys.executable, "-m", "tests.model.mutants", layer, mid], capture_output=True,
                              text=True, cwd=_ROOT, env={**os.environ, "RECKON_MUTANT_CHILD": "1"})
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"{mid}\t{layer}\terror: {proc.stderr[-300:]}"
        print(f"{line}\t{time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":  # pragma: no cover
    main()
