"""The controller's client requests (``/client``): one request, one reply.

The operator's and version 4 operations live in operator.py and job_ops.py;
this routes to them and answers submit, cancel, jobs, status, logs and forget.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from functools import partial

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import WebSocketConnection

from reckon.model import events as E
from reckon.model.errors import ProtocolError
from reckon.model.facts import JobCancelConfirmed, JobRequeued
from reckon.model.jobs import JobSpec, JobState
from reckon.model.pending import pending_codes
from reckon.model.permissions import Caller

from reckon.daemon import wire
from reckon.daemon.commands import facts_of, submitted_ids
from reckon.daemon.encoded import cbor_reply
from reckon.daemon.controller import job_ops, operator, query
from reckon.daemon.controller.logs import output_paths_of

log = logging.getLogger("reckon.controller")
BIG_REPLY = 1000  # job objects in a reply above which it is encoded on a worker thread
MAX_POLL_DEFER = 0.05  # seconds a query waits at most for the batch being decided to end
POLL_DEFER = os.environ.get("RECKON_POLL_DEFER", "1") != "0"  # (measuring: 0 answers at once)


class ClientRequests:
    """Part of ``ControllerDaemon`` (daemon/controller/core.py): the client operations."""

    async def _client_connection(self, ws: WebSocketConnection, caller: Caller | None = None) -> None:
        """Serve one client's requests, as ``caller`` (the authenticated user, daemon/auth/; None:
        token mode, whoever holds the token may do everything)."""
        while True:
            try:
                data = await ws.get_message()
            except WSClosed:
                return
            try:
                request = wire.loads(data, limit=wire.MAX_AGENT_MESSAGE)
                if request.get("op") == "whoami":  # who the controller takes this connection for
                    reply = {"ok": True, **whoami(self.options.auth, caller)}
                else:
                    reply = {"ok": True, **await self._client_op(request, caller)}
            except (ProtocolError, ValueError, TypeError, KeyError) as exc:
                reply = {"ok": False, "error": str(exc) if not isinstance(exc, KeyError) else f"missing field {exc}"}
            jobs = reply.get("jobs")
            # A query's objects are the index's: each encoded once, while it is the same object
            # (daemon/encoded.py; squeue and sacct poll the same jobs many times a second).
            if reply["ok"] and request.get("op") == "query":
                objects = self.encoded_jobs if request.get("fields") is None else self.selections
                encode = partial(cbor_reply, objects=objects)
            else:
                encode = wire.dumps
            if isinstance(jobs, list) and len(jobs) > BIG_REPLY:
                # Encoding 10,000 job objects takes ~0.1 s: off the event loop, so the core loop's
                # batches go on meanwhile.  Safe: the objects are the query index's (replaced on a
                # change, never changed: query.py) or this reply's own.
                data = await trio.to_thread.run_sync(encode, reply)
            else:
                data = encode(reply)
            await ws.send_message(data)

    # Every client operation, the ones _client_op answers itself and its tables' (the HTTP API's
    # routes are held to this list: tests/http/test_routes_cover_ops.py).
    OWN_OPS = frozenset({"query", "submit", "submit_many", "cancel", "update", "priority", "jobs", "status", "logs",
                         "forget", "whoami"})

    @classmethod
    def client_ops(cls) -> frozenset[str]:
        return cls.OWN_OPS | frozenset(operator.OPS) | job_ops.OPS

    async def _client_op(self, request: dict, caller: Caller | None = None) -> dict:
        op = request.get("op")
        if op == "query":  # squeue, sacct, the HTTP API: from the index, no turn of the loop (query.py)
            if self.deciding and POLL_DEFER:  # answered at the batch's end (core.py batch_ended), not mid-batch
                with trio.move_on_after(MAX_POLL_DEFER):
                    await self.batch_ended.wait()
            return query.query(self, request)
        if op in operator.OPS:  # show, nodes, drain, resume, history, partitions, partition_set, pending
            return await operator.OPS[op](self, request, caller)
        queue_anyway = request.get("queue_anyway", False) is True  # see model/admission.py
        if op == "submit":  # one job: its refusal is the model's own, with no batch around it
            [job_id] = submitted_ids(await self.call(event=E.SubmitJob(
                spec=JobSpec.from_dict(request["spec"]), now=time.time(), uid=secrets.token_hex(8),
                queue_anyway=queue_anyway, caller=caller, hold=job_ops.hold_of(request))))
            return {"job": await self.call(call=lambda: self.job_object(job_id))}
        if op == "submit_many":
            specs = [JobSpec.from_dict(s) for s in request["specs"]]
            return {"jobs": await self._submit_batch(specs, queue_anyway, caller, job_ops.hold_of(request))}
        if op == "cancel":
            job_id, whole_array = str(request["job"]), request.get("array")  # array: None = the array if it names one
            await self.call(event=E.CancelJob(job=job_id, now=time.time(), whole_array=whole_array, caller=caller))
            return await self.call(call=lambda: job_ops.cancel_reply(self, job_id))
        if op in job_ops.OPS:
            return await job_ops.run(self, op, request, caller)
        if op == "update":  # issue #22: the operator's priority adjustment (model/priority.py)
            job_id, priority = str(request["job"]), request["priority"]
            if type(priority) is not int:
                raise ValueError(f"priority must be an integer, got {priority!r}")
            await self.call(event=E.UpdateJob(job=job_id, priority=priority, now=time.time(), caller=caller))
            return {"job": await self.call(call=lambda: self.job_object(job_id))}
        if op == "priority":  # reckon priority JOB: its factors now
            job_id = str(request["job"])
            return {"priority": await self.call(call=lambda: self.priority_object(job_id))}
        if op == "jobs":
            state = request.get("state")
            if state is not None and state not in JobState.__members__:
                raise ValueError(f"unknown state {state!r}; one of {', '.join(JobState.__members__)}")
            user = request.get("user")
            if user is not None and (not isinstance(user, str) or not user):
                raise ValueError("user must be a user name")
            jobs = await self.call(call=lambda: self.job_objects(state, user))
            if user is not None and not jobs:
                await operator.refuse_unknown_user(self, user)  # a typo is one line, not an empty table
            return {"jobs": jobs}
        if op == "status":
            return {"status": await self.call(call=self.status)}
        if op == "logs":
            return await self.output.read(request, caller)
        if op == "forget":
            return await self._forget(str(request["agent"]), caller)
        raise ValueError(f"unknown op {op!r}")

    async def _forget(self, agent: str, caller: Caller | None = None) -> dict:
        """The operator declares a disconnected agent gone: its jobs are requeued, its name released."""
        commands = await self.call(event=E.ForgetAgent(agent=agent, now=time.time(), caller=caller))
        facts = facts_of(commands)
        requeued = [f.job for f in facts if isinstance(f, JobRequeued)]
        cancelled = [f.job for f in facts if isinstance(f, JobCancelConfirmed)]
        log.warning("the operator forgot agent %s: %d job(s) requeued, %d cancel(s) confirmed; its name is free",
                    agent, len(requeued), len(cancelled))
        self.log_dirs.pop(agent, None)
        return {"agent": agent, "requeued": requeued, "cancelled": cancelled}

    async def _submit_batch(self, specs: list[JobSpec], queue_anyway: bool = False,
                            caller: Caller | None = None, hold: bool = False) -> list[str]:
        """Submit jobs all or none, in one model event (model/batches.py); their ids, in order."""
        if not specs:
            return []
        # A fresh random uid per submission: no report about another submission
        # that had this id (a rolled-back state) can ever be taken for this one.
        uids = tuple(secrets.token_hex(8) for _ in specs)
        return submitted_ids(await self.call(event=E.SubmitBatch(specs=tuple(specs), now=time.time(), uids=uids,
                                                                  queue_anyway=queue_anyway, caller=caller,
                                                                  hold=hold)))

    def job_object(self, job_id: str) -> dict:
        job = self.model.state.job(job_id)
        obj = job.to_dict()
        obj["stdout"], obj["stderr"] = output_paths_of(self, job)
        obj["priority"] = self.model.volatile.priorities.get(job_id)  # PENDING jobs' (model/priority.py)
        return obj

    def job_objects(self, state: str | None, user: str | None = None) -> list[dict]:
        priorities = self.model.volatile.priorities
        jobs = [{**j.to_dict(), "priority": priorities.get(j.id)} for j in self.model.state.jobs.values()
                if (state is None or j.state.value == state)
                and (user is None or (j.owner is not None and j.owner.user == user))]
        # Why each PENDING one waits (issue #22): Slurm's code, as `show` and squeue give it.
        codes = pending_codes(self.model, [j["id"] for j in jobs if j["state"] == "PENDING"], self.scheduler.leads)
        for obj in jobs:
            obj["pending_code"] = codes.get(obj["id"])
        return jobs

    def priority_object(self, job_id: str) -> dict:
        """A job's priority factors now (``reckon priority``), with the weights they are taken at."""
        job = self.model.state.job(job_id)
        config = self.model.config.priority
        out = self.model.priority_factors(job_id).to_dict()
        out.update(job=job_id, state=job.state.value, user=job.owner.user if job.owner is not None else None,
                   noted=self.model.volatile.priorities.get(job_id),
                   weights={"age": config.weight_age, "fairshare": config.weight_fairshare,
                            "partition": config.weight_partition, "jobsize": config.weight_jobsize})
        return out

    def status(self) -> dict:
        # From the query index's state sets (the last commit's), not a walk of every job: the
        # status page asks this every 2 s, and a table may hold millions of jobs.
        counts = {state: len(ids) for state, ids in self.queries.states.items() if ids}
        config = self.model.config
        limits = {"max_running_per_user": config.max_running_per_user, "max_cpus_per_user": config.max_cpus_per_user}
        return {"jobs": counts, "facts": self.store.last_seq, "pid": os.getpid(), "started_at": self.started_at,
                "scheduler": config.scheduler, "limits": limits, "default_mem_per_cpu": config.default_mem_per_cpu}


def whoami(mode: str, caller: Caller | None) -> dict:
    """The ``whoami`` reply: the authentication mode and the caller (None in token mode: an operator)."""
    return {"auth": mode, "caller": None if caller is None else
            {"uid": caller.uid, "gid": caller.gid, "user": caller.user, "operator": caller.operator}}
