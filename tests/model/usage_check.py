"""INV-FAIRSHARE-REPLAY, judged independently of model/priority.py's table and model/state.py's apply.

``usage_from_log`` recomputes each user's fair-share usage from the fact log alone: every attempt
that ran (a start from ``JobStarted``, ``JobAdopted`` or its ``JobFinished``) and ended --
``JobFinished``, ``JobRequeued`` (v2: ``requeued_at``) or ``JobCancelConfirmed`` (v2:
``confirmed_at``) -- costs its CPUs times each second it ran, every second halved per half-life
up to ``now``.  It is a plain sum over attempts, not the table's running value, so a charge the
model forgets, a time it takes from elsewhere than the fact, or a decay it gets wrong shows as a
difference.  The stateful machine and tests/model/test_usage_facts.py compare it with the live
controller's table.
"""

from __future__ import annotations

import math
from typing import Iterable

from reckon.model import facts as F

DEFAULT_HALF_LIFE = 7 * 86400.0  # a ControllerState's before any UsageDecaySet


def charged_attempts(log: Iterable[F.Fact]) -> list[tuple[str, int, float, float]]:
    """(user, cpus, start, end) of every attempt of an owned job that started and whose end a fact
    records, in log order."""
    owner: dict[str, tuple[str | None, int]] = {}  # job -> (user, cpus), from its submission
    start: dict[tuple[str, int], float] = {}  # (job, attempt) -> when its process started
    out: list[tuple[str, int, float, float]] = []

    def end(job: str, attempt: int, began: float | None, at: float | None) -> None:
        user, cpus = owner.get(job, (None, 0))
        if user is not None and began is not None and at is not None:
            out.append((user, cpus, began, at))

    for fact in log:
        if isinstance(fact, F.JobSubmitted):
            owner[fact.job] = (fact.owner.user if fact.owner is not None else None, fact.spec.slots)
        elif isinstance(fact, F.JobStarted):
            start[(fact.job, fact.attempt)] = fact.started_at
        elif isinstance(fact, F.JobAdopted) and fact.started_at is not None:
            start[(fact.job, fact.attempt)] = fact.started_at
        elif isinstance(fact, F.JobFinished):
            began = fact.started_at if fact.started_at is not None else start.get((fact.job, fact.attempt))
            end(fact.job, fact.attempt, began, fact.finished_at)
        elif isinstance(fact, F.JobRequeued):
            end(fact.job, fact.attempt, start.get((fact.job, fact.attempt)), fact.requeued_at)
        elif isinstance(fact, F.JobCancelConfirmed):
            end(fact.job, fact.attempt, start.get((fact.job, fact.attempt)), fact.confirmed_at)
    return out


def half_life_of(log: Iterable[F.Fact]) -> float:
    """The log's half-life.  The oracle covers one half-life for all its charges: a change after
    the first charge (the table decays what it holds with the new one from its last charge on) is
    outside it, and raises."""
    half_life, charged = DEFAULT_HALF_LIFE, False
    for fact in log:
        if isinstance(fact, F.UsageDecaySet):
            if charged and fact.half_life != half_life:
                raise ValueError("usage_check covers one half-life: it changed after a charge")
            half_life = fact.half_life
        elif isinstance(fact, (F.JobFinished, F.JobRequeued, F.JobCancelConfirmed)):
            charged = True
    return half_life


def usage_from_log(log: Iterable[F.Fact], now: float) -> dict[str, float]:
    """user -> decayed CPU-seconds at ``now``: for each attempt, the integral over its run of
    ``cpus * 2 ** (-(now - s) / half_life) ds``."""
    log = list(log)
    h = half_life_of(log)
    usage: dict[str, float] = {}
    for user, cpus, start, end in charged_attempts(log):
        run = max(0.0, end - start)
        # integral_{end-run}^{end} 2**(-(now - s)/h) ds = h/ln2 * 2**(-(now-end)/h) * (1 - 2**(-run/h))
        usage[user] = usage.get(user, 0.0) + cpus * h / math.log(2.0) * 2.0 ** (-(now - end) / h) * (
            1.0 - 2.0 ** (-run / h))
    return usage


def differences(log: Iterable[F.Fact], table, now: float) -> list[str]:
    """Where the live table (a ``UsageTable``) and the oracle disagree at ``now``; [] if nowhere."""
    want = usage_from_log(log, now)
    found = []
    for user in sorted(set(want) | set(table.users)):
        got, expected = table.at(user, now), want.get(user)
        if expected is None or user not in table.users or not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-6):
            found.append(f"INV-FAIRSHARE-REPLAY: user {user} has usage {got if user in table.users else None} "
                         f"at {now}, the facts give {expected}")
    return found
