"""Client operations of protocol version 4 on the controller: array submits,
hold, release and requeue (issue #10).  Each is one model event through the
core loop (``ControllerDaemon.call``): the model decides, the reply is sent
once the facts are durable.  Kept out of clients.py, which routes to here.
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
OPS = frozenset({"submit_array", *_JOB_EVENTS})


async def run(server: "DaemonHost", op: str, request: dict, caller: Caller | None = None) -> dict[str, Any]:
    if op == "submit_array":
        return await _submit_array(server, request, caller)
    job_id = str(request["job"])
    await server.call(event=_JOB_EVENTS[op](job=job_id, now=time.time(), caller=caller))
    return {"job": await server.call(call=lambda: server.job_object(job_id))}


async def _submit_array(server: "DaemonHost", request: dict, caller: Caller | None = None) -> dict[str, Any]:
    """One SubmitArray event: every job of the array in one handle call, so one group commit."""
    spec = JobSpec.from_dict(request["spec"])
    array = parse_array(request["array"])
    uids = tuple(secrets.token_hex(8) for _ in range(array.count))
    queue_anyway = request.get("queue_anyway", False) is True  # see model/admission.py
    commands = await server.call(event=E.SubmitArray(spec=spec, array=array, now=time.time(), uids=uids,
                                                     queue_anyway=queue_anyway, caller=caller))
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
