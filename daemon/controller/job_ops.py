"""Client operations of protocol version 4 on the controller: array submits,
hold, release and requeue (issue #10), and of version 7 (issue #21): requeue of a
RUNNING job (the model's), ``hold`` at submit, and ``signal``.  Each is one model
event through the core loop (``ControllerDaemon.call``): the model decides, the
reply is sent once the facts are durable.  Kept out of clients.py, which routes to here.

``signal``: ``{"op": "signal", "job": ID, "signal": int, "batch_only": bool, "full": bool}``
sends the signal now to a RUNNING job's processes, through its agent (version 7).  The targets
are scancel's (Slurm 21.08 and later: "by default, signals other than SIGKILL are not sent to
the batch step"): neither flag, every process of the job but its top one (the job's steps, not
the batch shell, which would die of a USR2 it does not trap); ``batch_only`` (``-b``) the top
process only; ``full`` (``-f``) every process, the top one included (what ``reckon signal``
sends by default).  No fact: nothing durable changes.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from reckon.model import events as E
from reckon.model.arrays import parse_array
from reckon.model.jobs import JobSpec
from reckon.model.permissions import Caller

from reckon.daemon.commands import submitted_ids

if TYPE_CHECKING:  # pragma: no cover
    from reckon.daemon.controller.host import DaemonHost

# op -> the model event of a request naming one job
_JOB_EVENTS = {"hold": E.HoldJob, "release": E.ReleaseJob, "requeue": E.RequeueJob}
OPS = frozenset({"submit_array", "signal", *_JOB_EVENTS})


def hold_of(request: dict) -> bool:
    """A submit's ``hold`` (version 7): the job(s) start held, in the same fact group."""
    hold = request.get("hold", False)
    if not isinstance(hold, bool):
        raise ValueError("hold must be true or false")
    return hold


async def run(server: "DaemonHost", op: str, request: dict, caller: Caller | None = None) -> dict[str, Any]:
    if op == "submit_array":
        return await _submit_array(server, request, caller)
    job_id = str(request["job"])
    if op == "signal":
        sig, batch_only, full = request["signal"], request.get("batch_only", False), request.get("full", False)
        if type(sig) is not int or not 1 <= sig <= 64:
            raise ValueError(f"signal must be a signal number 1..64, got {sig!r}")
        if not isinstance(batch_only, bool) or not isinstance(full, bool):
            raise ValueError("batch_only and full must be true or false")
        await server.call(event=E.SignalJob(job=job_id, signal=sig, batch_only=batch_only, full=full,
                                            now=time.time(), caller=caller))
        return {"job": await server.call(call=lambda: server.job_object(job_id))}
    await server.call(event=_JOB_EVENTS[op](job=job_id, now=time.time(), caller=caller))
    return {"job": await server.call(call=lambda: server.job_object(job_id))}


async def _submit_array(server: "DaemonHost", request: dict, caller: Caller | None = None) -> dict[str, Any]:
    """One SubmitArray event: every job of the array in one handle call, so one group commit."""
    spec = JobSpec.from_dict(request["spec"])
    array = parse_array(request["array"])
    uids = tuple(secrets.token_hex(8) for _ in range(array.count))
    queue_anyway = request.get("queue_anyway", False) is True  # see model/admission.py
    commands = await server.call(event=E.SubmitArray(spec=spec, array=array, now=time.time(), uids=uids,
                                                     queue_anyway=queue_anyway, caller=caller,
                                                     hold=hold_of(request)))
    ids = submitted_ids(commands)
    return {"array": ids[0], "jobs": ids}


def cancel_reply(server: "DaemonHost", job_id: str) -> dict[str, Any]:
    """The cancel op's reply: the job, and for an array's id every job of the array."""
    reply: dict[str, Any] = {"job": server.job_object(job_id)}
    members = server.model.state.arrays.get(job_id)
    if members is not None:
        jobs = server.model.state.jobs
        reply["array"] = [{"id": j, "state": jobs[j].state.value, "cancel_requested": jobs[j].cancel_requested}
                          for j in members]
    return reply
