"""The query op's ``fields`` selection (issue #21's polling cost): its validation, the selected
keys and their kept encodings (daemon/encoded.py ``Selections``), the op on the wire, and that
squeue's and sacct's column-to-key maps (daemon/slurm/formats.py, sacct_fields.py) print byte for byte what the
whole objects print, for every column over many job shapes."""

from __future__ import annotations

import itertools
import time

import cbor2
import pytest
import trio

from reckon.daemon.controller.query import EXTRA_FIELDS, JOB_FIELDS, job_object, selection
from reckon.daemon.encoded import Selections, cbor_reply
from reckon.daemon.slurm import formats as S
from reckon.daemon.slurm import sacct_fields as A
from reckon.model.jobs import JobRecord, JobSpec

from tests.daemon.trio_harness import controller

pytestmark = pytest.mark.filterwarnings("ignore::trio.TrioDeprecationWarning")


# ---- the op's validation ----------------------------------------------------------------------

def test_a_selection_is_checked_and_kept_in_order_once():
    assert selection({}) is None and selection({"fields": None}) is None
    assert selection({"fields": ["state", "id", "state"]}) == ("state", "id")
    with pytest.raises(ValueError, match="^unknown query field 'colour'; one of ") as exc:
        selection({"fields": ["id", "colour"]})
    assert "\n" not in str(exc.value)
    for bad in ("id", [""], [1], {"id": 1}):
        with pytest.raises(ValueError, match="^query fields must be a list of non-empty strings$"):
            selection({"fields": bad})


def test_every_key_job_object_makes_can_be_selected():
    spec = JobSpec(name="x", command=("true",), env=(("SLURM_SUBMIT_HOST", "h"),), labels=(("account", "a"),))
    from types import SimpleNamespace

    daemon = SimpleNamespace(log_dirs={}, model=SimpleNamespace(sessions={}))
    obj = job_object(daemon, JobRecord(id="1", spec=spec))
    assert set(obj) <= JOB_FIELDS and "submit_host" in obj
    assert set(EXTRA_FIELDS) <= JOB_FIELDS


# ---- Selections ---------------------------------------------------------------------------------

def _obj(job_id: str, **changes) -> dict:
    return {**JobRecord(id=job_id, spec=JobSpec(name="n", command=("true",))).to_dict(), **changes}


def test_a_selection_is_the_same_dict_while_its_object_is_and_its_cbor_is_cbor2s():
    kept = Selections(limit=3)
    a, b = _obj("1"), _obj("2", submit_host="h")
    first = kept.select([a, b], ("id", "state", "submit_host"))
    assert first == [{"id": "1", "state": "PENDING"}, {"id": "2", "state": "PENDING", "submit_host": "h"}]
    again = kept.select([a, b], ("id", "state", "submit_host"))
    assert all(x is y for x, y in zip(first, again))
    reply = {"jobs": again, "now": 1.5}
    assert cbor_reply(reply, kept) == cbor2.dumps(reply)
    assert kept.of({"id": "9"}) == cbor2.dumps({"id": "9"})  # a dict it did not make: encoded now
    a2 = _obj("1", state="RUNNING")  # the index replaced job 1's object
    [changed] = kept.select([a2], ("id", "state", "submit_host"))
    assert changed == {"id": "1", "state": "RUNNING"} and kept.of(changed) == cbor2.dumps(changed)
    assert kept.select([a], ("state",)) == [{"state": "PENDING"}]  # another selection: its own entries
    assert len(kept) == 3  # bounded, oldest first: job 2's entry went
    assert len(kept._by_dict) == 3


# ---- the op -------------------------------------------------------------------------------------

async def test_the_op_returns_only_the_keys_asked_for_on_the_wire_and_refuses_an_unknown_one(tmp_path):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            ids = [await rig.submit(JobSpec(name="w", command=("true",))) for _ in range(2)]
            client, _ = await rig.connect("/client")
            await client.send({"op": "query", "names": ["w"], "fields": ["id", "state"]})
            reply = await client.receive()
            assert reply["ok"] and reply["jobs"] == [{"id": i, "state": "PENDING"} for i in ids]
            await client.send({"op": "query", "ids": ids[:1], "fields": ["state"]})
            assert (await client.receive())["jobs"] == [{"state": "PENDING"}]
            await client.send({"op": "query", "names": ["w"]})
            assert len((await client.receive())["jobs"][0]) > 40  # no fields: whole objects
            await client.send({"op": "query", "names": ["w"], "fields": ["id", "colour"]})
            reply = await client.receive()
            assert not reply["ok"] and reply["error"].startswith("unknown query field 'colour'")


# ---- squeue's and sacct's maps ------------------------------------------------------------------

def _shapes() -> list[dict]:
    """Job objects in the states and shapes the columns tell apart."""
    now = time.time()
    owner = {"user": "alice", "owner": {"user": "alice", "uid": 1001, "gid": 1002}}
    base = {**_obj("1"), "stdout": "/o/1.out", "stderr": "/o/1.err", "submitted_at": now - 100, "cwd": "/w"}
    ran = {"started_at": now - 50, "agent": "a1", "ran_on": "a1"}
    ended = {**ran, "finished_at": now - 10}
    shapes = [
        {}, {"held": True}, {"after": ["7"], "after_any": ["8"]}, {"requeues": 1, "attempt": 2},
        {"state": "RUNNING", **ran, "time_limit": 600.0, "mem": 3 << 30, "gpus": 2, "gres": [["fpga", 1]]},
        {"state": "COMPLETED", **ended, "exit_code": 0, **owner,
         "usage": {"cpu_user": 3.25, "cpu_system": 0.5, "max_rss": 12 << 20, "wall": 40.0, "source": "cgroup"}},
        {"state": "RUNNING", **ran, "attempt": 2,  # an earlier attempt's usage: not shown while it runs
         "usage": {"cpu_user": 1.0, "cpu_system": 0.0, "max_rss": None, "wall": 2.0, "source": "rusage"}},
        {"state": "FAILED", **ended, "exit_code": 3, "labels": {"account": "lab", "partition": "p2", "qos": "hi"}},
        {"state": "FAILED", **ended, "reason": "timeout", "time_limit": 30.0},
        {"state": "FAILED", **ended, "reason": "oom", "signal": 9},
        {"state": "CANCELLED", **ended, "signal": 15, **owner},
        {"state": "CANCELLED", "finished_at": now - 5, "reason": "dependency never satisfied"},
        {"command": ["sbatch"], "script": True, "cpus": 4, "slots": 4},
    ]
    jobs = [{**base, **shape, "id": str(k + 1)} for k, shape in enumerate(shapes)]
    # An array of five, limit 2: two running, three pending (one held).
    for k in range(5):
        member = {**base, "id": str(100 + k), "name": "arr", "array_id": "100", "array_index": k + 1, "array_max": 2}
        if k < 2:
            member.update(state="RUNNING", **ran)
        elif k == 4:
            member["held"] = True
        jobs.append(member)
    return jobs


def _select(jobs: list[dict], fields: list[str]) -> list[dict]:
    return [{k: j[k] for k in fields if k in j} for j in jobs]


def _squeue(jobs: list[dict], fmt: str, expand: bool, now: float) -> list[str]:
    parsed = S.parse_squeue_format(fmt)
    rows = S.array_rows(S.mark_array_limits(jobs), expand=expand)
    return S.squeue_lines(rows, parsed, now)


def _sacct(jobs: list[dict], fmt: str, now: float, allocations: bool) -> list[str]:
    rows = [r for j in S.array_rows(jobs, expand=False) for r in A.sacct_rows(j, allocations=allocations, now=now)]
    return A.sacct_lines(rows, A.parse_sacct_format(fmt), now, header=True, parsable="|2")


@pytest.mark.parametrize("code", sorted(S.SQUEUE_HEADERS))
def test_each_squeue_column_prints_the_same_from_its_selection(code):
    jobs, now = _shapes(), time.time()
    fmt = f"%{code}"
    wanted = S.squeue_query_fields(S.parse_squeue_format(fmt))
    for expand in (False, True):
        assert _squeue(_select(jobs, wanted), fmt, expand, now) == _squeue(jobs, fmt, expand, now), (code, expand)
    # and the filters' keys (-p, -A) with -p/-A given
    assert set(S.FILTER_FIELDS) <= set(S.squeue_query_fields(S.parse_squeue_format(fmt), filtered=True))


@pytest.mark.parametrize("name", sorted(A.SACCT_FIELDS))
def test_each_sacct_field_prints_the_same_from_its_selection(name):
    jobs, now = _shapes(), time.time()
    wanted = A.sacct_query_fields(A.parse_sacct_format(name))
    for allocations in (False, True):
        assert _sacct(_select(jobs, wanted), name, now, allocations) == _sacct(jobs, name, now, allocations), name


class _Reads(dict):
    """A job object that records which keys are read (a new read in a column shows here)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def test_the_maps_name_every_key_each_column_reads():
    now = time.time()
    derived = {"_slurm_id", "_slurm_tasks", "_array_limited", "_partition_reason",
               "pending_code", "priority"}  # the rows' own keys (array_rows, mark_pending, ...)
    for code, job in itertools.product(sorted(S.SQUEUE_HEADERS), _shapes()):
        reads = _Reads(job)
        S.squeue_value(code, reads, now)
        extra = reads.read - set(S.squeue_query_fields(S.parse_squeue_format(f"%{code}"))) - derived
        assert not extra, (code, extra)
    for name, job in itertools.product(sorted(A.SACCT_FIELDS), _shapes()):
        for step in (None, "batch", "extern"):
            reads = _Reads(job)
            A.sacct_value(name, {"job": reads, "step": step}, now)
            extra = reads.read - set(A.sacct_query_fields(A.parse_sacct_format(name))) - derived
            assert not extra, (name, step, extra)
    # the keys the maps name are all the query op's
    assert set(S.ROW_FIELDS) | set(S.FILTER_FIELDS) <= JOB_FIELDS
    assert {k for keys in [*S.SQUEUE_FIELDS.values(), *A.SACCT_KEYS.values()] for k in keys} <= JOB_FIELDS
