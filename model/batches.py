"""A batch submit (``submit_many``, ``reckon submit --file``): all the jobs or none.

One event, one ``handle()`` call: every entry is checked against the state as
it is, then all are applied.  A refused entry refuses the batch, changes
nothing and names the entry, so no other event (a cancel of a dependency, a
``reckon forget`` of the one agent large enough) can land between the check
and the submits and leave half a batch behind.
"""

from __future__ import annotations

from . import events as E
from . import facts as F
from .id_marks import mark_for_submit
from .admission import beyond_the_user_limit, unrunnable_reason, with_default_mem
from .partitions import admit
from .errors import LocalProtocolError, PermissionDenied
from .jobs import JobSpec
from .permissions import owner_of
from .policy import dependency_refusal
from .state import ControllerState
from .transaction import Transaction


def entry_refusal(state: ControllerState, spec: JobSpec, queue_anyway: bool) -> str | None:
    """Why one entry of a batch cannot be submitted now; None if it can.

    Everything the apply of its ``JobSubmitted`` would refuse is refused here
    first, so the apply of a checked batch cannot stop half-way."""
    if spec.array_id is not None:
        return "an array job cannot be part of a batch (submit the array on its own)"
    if not queue_anyway and (refusal := unrunnable_reason(state, spec)) is not None:
        return refusal
    return dependency_refusal(state, spec)


def on_submit_batch(tx: Transaction, ev: E.SubmitBatch) -> None:
    state = tx.state
    specs = []
    for number, spec in enumerate(ev.specs, start=1):
        try:
            spec = with_default_mem(spec, tx.config.default_mem_per_cpu)  # before the partition's limits
            spec = admit(state.partitions, spec, ev.caller)  # its partition's refusals, default time
        except (LocalProtocolError, PermissionDenied) as exc:
            raise type(exc)(f"nothing submitted: entry {number} of {len(ev.specs)}: {exc}") from None
        specs.append(spec)
        refusal = (entry_refusal(state, spec, ev.queue_anyway)
                   or beyond_the_user_limit(tx.config.user_limits, owner_of(ev.caller), spec))
        if refusal is not None:
            raise LocalProtocolError(f"nothing submitted: entry {number} of {len(ev.specs)}: {refusal}")
    mark_for_submit(tx, count=len(ev.specs))  # every entry's id, before any
    owner = owner_of(ev.caller)
    for spec, uid in zip(specs, ev.uids):
        job_id = state.next_job_id()
        tx.apply(F.JobSubmitted(job=job_id, spec=spec, submitted_at=ev.now, uid=uid, owner=owner))
        if ev.hold:  # in the same call: one group commit, never seen unheld
            tx.apply(F.JobHeld(job=job_id))
