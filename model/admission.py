"""Admission at submit: a job that no registered agent could ever run is refused, with the reason.

A job asking for more slots than the largest registered agent has would wait
PENDING forever and say nothing (issue #10).  The controller's state knows
every registered agent's slots, connected or not, so the refusal is the
model's.  With no agent registered yet (a cluster being set up) nothing is
refused: there is nothing to compare with.  ``queue_anyway`` (the CLI's
``--queue-anyway``) queues such a job for an agent that has yet to join.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .jobs import JobSpec
    from .state import ControllerState


def unrunnable_reason(state: "ControllerState", spec: "JobSpec") -> str | None:
    """Why no registered agent could ever run ``spec``; None if one could (or none is registered)."""
    largest = max((a.slots for a in state.agents.values() if a.registered), default=None)
    if largest is None or spec.slots <= largest:
        return None
    return (f"no agent can ever run this job: it needs {spec.slots} slots and the largest registered agent "
            f"has {largest} (--queue-anyway queues it for an agent yet to join)")
