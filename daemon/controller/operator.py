"""The operator's client operations: show (with why a job waits), nodes, drain, resume, history.

Each runs through the controller's core loop like every other client
operation: reads see only durable state, and drain/resume answer once their
fact is durable.  History is read from the fact log on the store's thread.
"""

from __future__ import annotations

import pwd
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import trio

from reckon.model import events as E
from reckon.model.errors import LocalProtocolError
from reckon.model.history import job_history
from reckon.model.nodes import node_resources
from reckon.model.pending import pending_codes, why_pending
from reckon.model.partition_ops import RemovePartition, SetPartition
from reckon.model.partitions import agent_partitions
from reckon.model.permissions import Caller

from reckon.daemon.commands import facts_of

if TYPE_CHECKING:
    from reckon.daemon.controller.host import DaemonHost


def job_with_reason(daemon: "DaemonHost", job_id: str) -> dict:
    obj = daemon.job_object(job_id)
    # Why it waits (issue #22): Slurm's code beside the words, the code squeue and `jobs` print too.
    why = why_pending(daemon.model, job_id, daemon.scheduler.leads)
    obj["pending_reason"], obj["pending_code"] = (why.text, why.code) if why is not None else (None, None)
    # Backfill (issue #22): the start the latest pass promised this job, if it is the one reserved for.
    promise = daemon.scheduler.expected_start(job_id) if obj["pending_reason"] is not None else None
    obj["expected_start"], obj["expected_agent"] = promise if promise is not None else (None, None)
    return obj


def node_objects(daemon: "DaemonHost") -> list[dict]:
    model, tracker = daemon.model, daemon.nodes
    out = []
    for name, info in sorted(model.state.agents.items()):
        state = model.node_state(name)
        # A state no notification has shown yet is the one the agent had when this controller started.
        tracker.observe(name, state, slots=info.slots,
                        at=daemon.started_at if tracker.since(name) is None else None)
        out.append({"name": name, "state": state.value, "slots": info.slots, "used": info.used,
                    "drained": info.drained, "since": tracker.since(name), **node_resources(info),
                    "partitions": list(agent_partitions(model.state.partitions, name))})
    return out


def partition_objects(daemon: "DaemonHost") -> list[dict]:
    """Every partition (model/partitions.py), by name, with the agents it holds now."""
    state = daemon.model.state
    out = []
    for name in sorted(state.partitions):
        p = state.partitions[name]
        obj = p.describe()
        obj["agents"] = [agent for agent in sorted(state.agents) if p.has_node(agent)]
        out.append(obj)
    return out


async def _partitions(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    return {"partitions": await daemon.call(call=lambda: partition_objects(daemon))}


async def _partition_set(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    """``reckon partition set NAME key=value ...`` (the client parsed the values), or ``remove``."""
    name = request.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("name must be a partition name")
    if request.get("remove"):
        event: Any = RemovePartition(name=name, now=time.time(), caller=caller)
    else:
        changes = request.get("changes")
        if not isinstance(changes, (list, tuple)) or not all(
                isinstance(c, (list, tuple)) and len(c) == 2 and isinstance(c[0], str) for c in changes):
            raise ValueError("changes must be a list of [key, value] pairs")
        event = SetPartition(name=name, changes=tuple((k, v) for k, v in changes), now=time.time(), caller=caller)
    changed = bool(facts_of(await daemon.call(event=event)))
    partitions = await daemon.call(call=lambda: partition_objects(daemon))
    return {"changed": changed, "partition": next((p for p in partitions if p["name"] == name), None)}


async def _show(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    job_id = str(request["job"])
    job = await daemon.call(call=lambda: job_with_reason(daemon, job_id))  # unknown job: a clear error
    # Usage per attempt (issue #20 accounting), from the fact log as `history` reads it; "usage"
    # is the latest finished attempt's.  Attempts before a pruning snapshot are not there.
    facts = await daemon.store.facts_about(job_id)
    job["attempts"] = [{"attempt": a["attempt"], "agent": a["agent"], "ended": a["ended"], "gpus": a["gpus"],
                        "usage": a["usage"]} for a in job_history(job_id, facts).to_dict()["attempts"]]
    return {"job": job}


MAX_IDS = 100_000  # job ids of one ``pending`` request, as a query's (daemon/controller/query.py MAX_TERMS)


def pending_object(daemon: "DaemonHost", ids: list[str] | None) -> dict:
    """The reason code and priority of each PENDING job of ``ids`` (every PENDING job: None); an
    id of no job, or of a job not PENDING, is left out (it may have started since the caller's query)."""
    model = daemon.model
    if ids is None:
        ids = [job.id for job in model.state.jobs.values() if job.state.value == "PENDING"]
    else:
        ids = [job_id for job_id in ids if job_id in model.state.jobs]
    reasons = pending_codes(model, ids, daemon.scheduler.leads)
    priorities = model.volatile.priorities
    return {"reasons": reasons, "priorities": {job_id: priorities.get(job_id) for job_id in reasons}}


async def _pending(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    """Why jobs wait, for squeue/scontrol/sacct (the ``query`` op answers from committed facts
    alone; a reason reads the agents and the scheduler, so it takes a turn of the core loop)."""
    ids = request.get("ids")
    if ids is not None and (not isinstance(ids, (list, tuple)) or not all(isinstance(i, str) and i for i in ids)):
        raise ValueError("pending ids must be a list of job ids")
    if ids is not None and len(ids) > MAX_IDS:
        raise ValueError(f"pending ids has more than {MAX_IDS} entries")
    return await daemon.call(call=lambda: pending_object(daemon, None if ids is None else list(ids)))


async def _nodes(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    # The partitions too (issue #22): sinfo and scontrol show partition print nodes by partition.
    return await daemon.call(call=lambda: {"nodes": node_objects(daemon), "partitions": partition_objects(daemon)})


async def _drain_or_resume(daemon: "DaemonHost", request: dict, drain: bool, caller: Caller | None) -> dict:
    agent = str(request["agent"])
    event = (E.DrainAgent if drain else E.ResumeAgent)(agent=agent, now=time.time(), caller=caller)
    commands = await daemon.call(event=event)
    changed = bool(facts_of(commands))
    # A second turn of the loop: a `reckon forget` of this agent may have come between the two.
    node = await daemon.call(call=lambda: node_object(daemon, agent, "drained" if drain else "resumed"))
    return {"agent": agent, "changed": changed, "node": node}


def node_object(daemon: "DaemonHost", agent: str, done: str) -> dict:
    """``agent``'s node, which ``done`` (drained, resumed) a moment ago; it may be forgotten since."""
    for node in node_objects(daemon):
        if node["name"] == agent:
            return node
    raise LocalProtocolError(f"agent {agent} was {done}, then forgotten before its state could be read")


async def _drain(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    return await _drain_or_resume(daemon, request, True, caller)


async def _resume(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    return await _drain_or_resume(daemon, request, False, caller)


def _has_account(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        return False
    return True


async def refuse_unknown_user(daemon: "DaemonHost", user: str) -> None:
    """For ``jobs --user U`` / ``history --user U`` that found nothing: a name with no account on
    this machine and no job in the table is a typo, said in one line, not an empty table.  A user
    known by a job (whose account lives elsewhere) is not refused.  The account lookup (NSS: maybe
    LDAP, maybe slow) runs on a thread, off the core loop."""
    owns = await daemon.call(call=lambda: any(job.owner is not None and job.owner.user == user
                                              for job in daemon.model.state.jobs.values()))
    if not owns and not await trio.to_thread.run_sync(_has_account, user):
        raise LocalProtocolError(f"no user {user}: no account of that name here and no job of theirs")


def user_history(daemon: "DaemonHost", user: str | None, since: float | None) -> list[dict]:
    """The finished jobs of ``user`` (every user's: None) that ended at or after ``since``, oldest
    end first, each with its latest attempt's usage (``"usage"``, when the agent measured it).
    Everyone may see it, as everyone sees the queue."""
    found: list[tuple[float, int, dict]] = []
    for order, job in enumerate(daemon.model.state.jobs.values()):  # submit order breaks ties
        if not job.terminal or (user is not None and (job.owner is None or job.owner.user != user)):
            continue
        ended = job.finished_at if job.finished_at is not None else job.submitted_at  # cancelled before it ran
        if since is None or ended >= since:
            found.append((ended, order, job.to_dict()))
    found.sort(key=lambda entry: entry[:2])
    return [obj for _, _, obj in found]


async def _history(daemon: "DaemonHost", request: dict, caller: Caller | None = None) -> dict:
    if request.get("job") is None:  # history --user U --since T: past jobs, not one job's attempts
        user, since = request.get("user"), request.get("since")
        if user is not None and (not isinstance(user, str) or not user):
            raise ValueError("user must be a user name")
        if since is not None and (type(since) not in (int, float) or since != since):
            raise ValueError("since must be a time in seconds since the epoch")
        jobs = await daemon.call(call=lambda: user_history(daemon, user, since))
        if user is not None and not jobs:
            await refuse_unknown_user(daemon, user)  # a typo is one line, not an empty table
        return {"jobs": jobs}
    job_id = str(request["job"])
    record = await daemon.call(call=lambda: job_with_reason(daemon, job_id))  # unknown job: a clear error
    facts = await daemon.store.facts_about(job_id)
    history = job_history(job_id, facts).to_dict()
    history["record"] = record
    return {"history": history}


OPS: dict[str, Callable[["DaemonHost", dict, Caller | None], Awaitable[dict[str, Any]]]] = {
    "show": _show,
    "nodes": _nodes,
    "drain": _drain,
    "resume": _resume,
    "history": _history,
    "partitions": _partitions,
    "partition_set": _partition_set,
    "pending": _pending,
}
