"""The ``query`` op: jobs by id, array, name, user, state and time, from an index of committed facts.

squeue, sacct, scontrol, sinfo, the HTTP API and ``reckon.Client.jobs`` poll this, many times a
second from many clients (workflow tools poll per job).  It is answered from ``QueryIndex``, kept
by the core loop, not by a walk of the job table in the loop:

* **What it holds**: one job object per job (``JobRecord.to_dict()`` and the query's extras)
  plus sets by array, name, user and state.  Every job the controller knows is in it: the live
  table keeps every job for good (a snapshot prunes facts, never records), so a job is still
  here after a compaction and after a restart (the index is rebuilt from the replayed state).
  A query that names a known job always gets it (Parsl takes a missing job as COMPLETED).
* **When it changes**: ``committed`` runs in the core loop right after a batch's group commit
  returned and before any of the batch's replies or effects leave.  The model applied exactly
  the committed facts then (the loop is serial; the next batch is not decided yet), so the jobs
  those facts name are copied as they are: the index is always the state at a commit boundary.
* **Why a read needs no turn of the loop**: trio is cooperative, and both ``committed`` and
  ``answer`` run without an await, so a query sees one whole commit boundary, never a batch
  being decided (whose facts are not durable) and never half a batch.  A client's own submit is
  answered after its batch's ``committed``, so it reads its writes.  On PostgreSQL a leader first
  checks its lease as a reply of the loop would (``before_release``), so a deposed controller
  does not answer from its old index.
"""

from __future__ import annotations

import bisect
import math
import time
from typing import Any, Iterable

from reckon.model.jobs import JobRecord, JobSpec, JobState

from reckon.daemon.controller.logs import output_paths_of

MAX_TERMS = 100_000  # entries of one list field of a query
STATES = tuple(JobState.__members__)


def job_object(daemon: Any, job: JobRecord, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The query's job object: ``JobRecord.to_dict()`` and what Slurm's commands show beside it.

    The output paths are more than half the cost: taken from ``old`` (the job's previous object)
    while the attempt and agent are the same (a start, a finish), computed at a submit and a
    dispatch."""
    obj = job.to_dict()
    if old is not None and old["attempt"] == obj["attempt"] and old["agent"] == obj["agent"]:
        obj["stdout"], obj["stderr"] = old["stdout"], old["stderr"]
    else:
        obj["stdout"], obj["stderr"] = output_paths_of(daemon, job)
    spec = job.spec
    obj.setdefault("array_max", spec.array_max)
    obj.setdefault("mem", spec.mem)
    if "labels" not in obj:  # JobSpec v7 (labels: sorted pairs); older specs have none
        obj["labels"] = dict(getattr(spec, "labels", ()) or ())
    for name in ("time_limit", "output", "error"):
        obj.setdefault(name, getattr(spec, name, None))
    for key, value in spec.env:  # scontrol's AllocNode: the host sbatch/srun ran on (they send it)
        if key == "SLURM_SUBMIT_HOST":
            obj["submit_host"] = value
            break
    not_run = getattr(job, "not_run", None)
    if not_run is not None:
        obj.setdefault("not_run", not_run)
    return obj


# The keys ``job_object`` may add to ``JobRecord.to_dict()``'s: a new one goes here too, or a query's
# ``fields`` cannot name it (tests/slurm/test_query_fields.py checks job_object against this).
EXTRA_FIELDS = ("stdout", "stderr", "array_max", "mem", "labels", "time_limit", "output", "error",
                "submit_host", "not_run")
JOB_FIELDS = frozenset([*JobRecord(id="0", spec=JobSpec(name="x", command=("true",))).to_dict(), *EXTRA_FIELDS])


class QueryIndex:
    """The committed jobs' objects and their indexes; see the module docstring."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}  # id -> job object, in submit order
        self.order: dict[str, int] = {}  # id -> its place in submit order
        self.arrays: dict[str, list[str]] = {}  # array id -> its members, in submit order
        self.names: dict[str, dict[str, None]] = {}
        self.users: dict[str, dict[str, None]] = {}
        self.states: dict[str, dict[str, None]] = {s: {} for s in STATES}
        # (when it ended, its order, id) of every job that reached a terminal state, sorted: a
        # query ``since`` T walks the live jobs and those that ended after T, not the history.
        # An entry goes stale when its job runs again (a requeue); answer() checks each.
        self.ended: list[tuple[float, int, str]] = []
        self.boundaries = 0  # commit boundaries seen (how many times ``committed`` changed anything)

    @classmethod
    def of(cls, daemon: Any) -> "QueryIndex":
        """The index of the daemon's whole job table (a replayed state is committed state)."""
        index = cls()
        for job in daemon.model.state.jobs.values():
            index._put(job_object(daemon, job))
        return index

    def committed(self, daemon: Any, facts: Iterable[Any]) -> None:
        """A batch's facts are durable: copy the jobs they name as the model holds them now."""
        jobs = daemon.model.state.jobs
        named = {job_id: None for f in facts if (job_id := getattr(f, "job", None)) is not None}
        for job_id in named:
            job = jobs.get(job_id)
            if job is not None:
                self._put(job_object(daemon, job, self.jobs.get(job_id)))
        if named:
            self.boundaries += 1

    def check(self, daemon: Any) -> None:
        """Raise if the index differs from one built anew from the job table (``validate_state``
        runs, after a commit, when the two must agree).  Output paths are left out: they follow
        the agents' log directories, which change with a join and no fact."""
        fresh = QueryIndex.of(daemon)

        def bare(jobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
            return {k: {f: v for f, v in o.items() if f not in ("stdout", "stderr")} for k, o in jobs.items()}

        for name in ("order", "arrays", "names", "users", "states"):
            if getattr(fresh, name) != getattr(self, name):
                raise RuntimeError(f"the query index's {name} differ from the job table's")
        if not set(fresh.ended) <= set(self.ended):
            raise RuntimeError("the query index's ended jobs miss some of the job table's")
        if bare(fresh.jobs) != bare(self.jobs):
            wrong = next((k for k in fresh.jobs if bare({k: fresh.jobs[k]}) != bare({k: self.jobs.get(k, {})})), "?")
            raise RuntimeError(f"the query index's job {wrong} differs from the job table's")

    def _put(self, obj: dict[str, Any]) -> None:
        job_id = obj["id"]
        old = self.jobs.get(job_id)
        if old is None:
            self.order[job_id] = len(self.order)
            if obj["array_id"] is not None:
                self.arrays.setdefault(obj["array_id"], []).append(job_id)
            self.names.setdefault(obj["name"], {})[job_id] = None
            self.users.setdefault(obj["user"], {})[job_id] = None  # None: no owner (token mode)
        elif old["state"] != obj["state"]:
            del self.states[old["state"]][job_id]
        self.states[obj["state"]][job_id] = None
        self.jobs[job_id] = obj
        if obj["state"] not in LIVE and (old is None or old["state"] in LIVE or _ended(old) != _ended(obj)):
            bisect.insort(self.ended, (_ended(obj), self.order[job_id], job_id))

    # ---- answering ------------------------------------------------------------------

    def members(self, job_id: str) -> list[str]:
        """The ids a query's id means: an array's id is all its members; ``A_I`` is array A's index I."""
        members = self.arrays.get(job_id)
        if members is not None:
            return members
        if job_id in self.jobs:
            return [job_id]
        array, sep, index = job_id.partition("_")
        if sep and index.isdigit() and array in self.arrays:
            wanted = int(index)
            return [m for m in self.arrays[array] if self.jobs[m]["array_index"] == wanted]
        return []

    def answer(self, ids: list[str] | None = None, names: list[str] | None = None,
               users: list[str] | None = None, states: list[str] | None = None,
               since: float | None = None, until: float | None = None,
               limit: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        """(the matching job objects in submit order, the ids asked for that name no job).

        The objects are the index's own, shared by every reply: a caller never changes one (the
        index replaces an object when its job changes, so a reply being encoded stays whole)."""
        unknown: list[str] = []
        sets: list[Iterable[str]] = []
        if ids is not None:
            found: dict[str, None] = {}
            jobs, arrays = self.jobs, self.arrays
            for job_id in ids:
                if job_id in jobs and job_id not in arrays:  # a plain job (squeue --job's usual case)
                    found[job_id] = None
                    continue
                members = self.members(job_id)
                if not members:
                    unknown.append(job_id)
                found.update(dict.fromkeys(members))
            sets.append(found)
        for terms, index in ((names, self.names), (users, self.users), (states, self.states)):
            if terms is not None:
                union: dict[str, None] = {}
                for term in terms:
                    union.update(index.get(term, {}))
                sets.append(union)
        if sets:
            # Walk the smallest candidate set; test the others by membership.
            sets.sort(key=len)
            first, rest = sets[0], [s if isinstance(s, dict) else dict.fromkeys(s) for s in sets[1:]]
            candidates = [j for j in first if all(j in s for s in rest)] if rest else list(first)
            candidates.sort(key=self.order.__getitem__)
        elif since is not None:  # live jobs, and those that ended since
            start = bisect.bisect_left(self.ended, (since, -1, ""))
            recent = {job_id: None for _, _, job_id in self.ended[start:]}
            candidates = [*self.states["PENDING"], *self.states["RUNNING"], *recent]
            candidates = sorted(set(candidates), key=self.order.__getitem__)
        else:
            candidates = list(self.jobs)
        out = []
        for job_id in candidates:
            obj = self.jobs[job_id]
            if (since is not None or until is not None) and not _in_window(obj, since, until):
                continue
            out.append(obj)
            if limit is not None and len(out) >= limit:
                break
        return out, unknown


LIVE = ("PENDING", "RUNNING")


def _ended(obj: dict[str, Any]) -> float:
    """When a terminal job ended: its finish, or its submission for one cancelled before it ran."""
    return obj["finished_at"] if obj["finished_at"] is not None else obj["submitted_at"]


def _in_window(obj: dict[str, Any], since: float | None, until: float | None) -> bool:
    """Whether the job was known between ``since`` and ``until``: submitted by ``until``, and
    not ended before ``since`` (a live job has not ended; a job cancelled before it ran ended at
    its submission, as ``history --since`` counts it)."""
    if until is not None and obj["submitted_at"] > until:
        return False
    return since is None or obj["state"] in LIVE or _ended(obj) >= since


# ---- the op ---------------------------------------------------------------------------------


def _strings(request: dict, key: str) -> list[str] | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"query {key} must be a list of non-empty strings")
    if len(value) > MAX_TERMS:
        raise ValueError(f"query {key} has more than {MAX_TERMS} entries")
    return list(value)


def _time(request: dict, key: str) -> float | None:
    value = request.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"query {key} must be a time in seconds since the epoch")
    return float(value)


def selection(request: dict) -> tuple[str, ...] | None:
    """The job-object keys a query asks for (``fields``; None: whole objects), in the order asked,
    each once; an unknown name is a one-line ValueError naming it."""
    value = request.get("fields")
    if value is None:
        return None
    names = _strings(request, "fields")
    assert names is not None
    for name in names:
        if name not in JOB_FIELDS:
            raise ValueError(f"unknown query field {name!r}; one of {', '.join(sorted(JOB_FIELDS))}")
    return tuple(dict.fromkeys(names))


def parse(request: dict) -> dict[str, Any]:
    """The query's terms, checked: a bad one is a one-line ValueError."""
    states = _strings(request, "states")
    for state in states or ():
        if state not in JobState.__members__:
            raise ValueError(f"unknown state {state!r}; one of {', '.join(STATES)}")
    limit = request.get("limit")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError("query limit must be a positive integer")
    return {"ids": _strings(request, "ids"), "names": _strings(request, "names"),
            "users": _strings(request, "users"), "states": states, "since": _time(request, "since"),
            "until": _time(request, "until"), "limit": limit}


def query(daemon: Any, request: dict) -> dict[str, Any]:
    """The ``query`` op's reply (daemon/controller/clients.py routes it here); no await: see above."""
    fields = parse(request)
    selected = selection(request)
    try:
        daemon.before_release()  # a PostgreSQL leader's lease, as the loop checks before any reply
    except Exception as exc:
        raise ValueError(f"this controller may not answer: {exc}") from None
    if fields["users"] is not None and daemon.options.auth == "token":
        # Token mode is a single-user cluster: its jobs have no owner, and each is every user's
        # (`squeue --me`, `scancel -u NAME` pick them; the commands show them as the caller's).
        fields["users"] = [*fields["users"], None]
    jobs, unknown = daemon.queries.answer(**fields)
    if selected is not None:  # only the keys asked for: a poll's reply is a tenth of the bytes
        jobs = daemon.selections.select(jobs, selected)
    reply: dict[str, Any] = {"jobs": jobs, "now": time.time()}
    if unknown:
        reply["unknown"] = unknown
    return reply
