"""The model decides nothing by set iteration order (issue #13).

Python's str hashes are salted per process (PYTHONHASHSEED), so iterating a set
of job ids gives another order in every run.  Where that order decides what the
model does (which Kill is sent first, the order of a query's jobs), two runs of
the same events behaved differently, and the derandomized property tests found
or missed a bug depending on the seed.  ``placed_on`` is the one such place:
it is in job id order now.
"""

from __future__ import annotations

from reckon.model import facts as F
from reckon.model.controller import Controller
from reckon.model.state import replay

from tests.model.harness import spec


def _controller_with_jobs_on_a1(n: int) -> Controller:
    facts: list[F.Fact] = [F.AgentRegistered(agent="a1", slots=n, identity=None)]
    for k in range(1, n + 1):
        facts.append(F.JobSubmitted(job=str(k), spec=spec(f"j{k}"), submitted_at=1.0, uid=f"{k:016x}"))
    for k in range(1, n + 1):  # dispatched in an order unlike both id order and any one hash order
        j = str((k * 7) % n + 1)
        facts.append(F.JobDispatched(job=j, attempt=1, agent="a1"))
    return Controller(state=replay(facts))


def test_placed_on_lists_jobs_in_id_order_not_set_order():
    ctrl = _controller_with_jobs_on_a1(12)
    # In the running set's order, twelve ids come out sorted for hardly any hash seed.
    assert list(ctrl.placed_on("a1")) == [str(k) for k in range(1, 13)]
