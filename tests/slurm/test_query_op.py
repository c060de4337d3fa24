"""The controller's ``query`` op (daemon/controller/query.py): filters, arrays, its refusals, the
index against a fresh build of it, a known job never missing across a compaction and a restart,
and a query during a batch's commit sees the state before that batch (committed facts only)."""

from __future__ import annotations

import secrets
import time

import pytest
import trio

from reckon.daemon.controller.query import QueryIndex
from reckon.model import events as E
from reckon.model.arrays import ArrayRange
from reckon.model.jobs import JobSpec

from tests.daemon.trio_harness import controller, until

pytestmark = pytest.mark.filterwarnings("ignore::trio.TrioDeprecationWarning")


async def _query(rig, **fields) -> dict:
    return await rig.daemon._client_op({"op": "query", **fields})


def _ids(reply: dict) -> list[str]:
    return [j["id"] for j in reply["jobs"]]


async def _submit(rig, name: str = "t", **spec) -> str:
    return await rig.submit(JobSpec(name=name, command=("true",), **spec))


async def _array(rig, count: int, name: str = "arr") -> list[str]:
    commands = await rig.daemon.call(event=E.SubmitArray(
        spec=JobSpec(name=name, command=("true",)), array=ArrayRange(start=1, end=count, max_running=2),
        now=time.time(), uids=tuple(secrets.token_hex(8) for _ in range(count))))
    return [f.job for c in commands if isinstance(c, E.Append) for f in c.facts if type(f).__name__ == "JobSubmitted"]


async def test_filters_arrays_and_unknown_ids(tmp_path):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            a = await _submit(rig, "alpha")
            b = await _submit(rig, "beta")
            members = await _array(rig, 3)
            await rig.daemon.call(event=E.CancelJob(job=b, now=time.time()))
            assert _ids(await _query(rig)) == [a, b, *members]
            assert _ids(await _query(rig, ids=[b, a])) == [a, b]  # submit order, whatever the order asked
            assert _ids(await _query(rig, ids=[members[0]])) == members  # an array's id: all its members
            assert _ids(await _query(rig, ids=[f"{members[0]}_2"])) == [members[1]]  # Slurm's A_I
            assert _ids(await _query(rig, names=["alpha", "arr"])) == [a, *members]
            assert _ids(await _query(rig, states=["CANCELLED"])) == [b]
            assert _ids(await _query(rig, states=["PENDING"], names=["beta"])) == []
            assert _ids(await _query(rig, limit=2)) == [a, b]
            # Token mode, a single-user cluster: no job has an owner, each is every user's.
            assert _ids(await _query(rig, users=["nobody"])) == [a, b, *members]
            assert _ids(await _query(rig, users=["nobody"], names=["beta"])) == [b]
            reply = await _query(rig, ids=["999", a])
            assert _ids(reply) == [a] and reply["unknown"] == ["999"]
            assert isinstance(reply["now"], float)
            job = reply["jobs"][0]
            assert {"labels", "array_max", "stdout", "stderr", "reason"} <= set(job)
            arr = (await _query(rig, ids=[members[1]]))["jobs"][0]
            assert arr["array_id"] == members[0] and arr["array_index"] == 2 and arr["array_max"] == 2
            # The time window: a job cancelled before it ran ended at its submission.
            submitted = job["submitted_at"]
            assert _ids(await _query(rig, until=submitted - 1)) == []
            assert a in _ids(await _query(rig, since=time.time() + 3600))  # still pending: not ended
            assert b not in _ids(await _query(rig, since=time.time() + 3600))
            rig.daemon.queries.check(rig.daemon)


@pytest.mark.parametrize("request_, error", [
    ({"ids": "1"}, "query ids must be a list of non-empty strings"),
    ({"names": [""]}, "query names must be a list of non-empty strings"),
    ({"states": ["TIMEOUT"]}, "unknown state 'TIMEOUT'"),
    ({"since": "yesterday"}, "query since must be a time"),
    ({"until": float("nan")}, "query until must be a time"),
    ({"limit": 0}, "query limit must be a positive integer"),
])
async def test_a_bad_query_is_one_line(tmp_path, request_, error):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            with pytest.raises(ValueError, match=error):
                await _query(rig, **request_)


async def test_a_query_during_a_commit_sees_the_state_before_the_batch(tmp_path):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            first = await _submit(rig)
            gate = rig.store.hold()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_submit, rig)
                await gate.entered.wait()  # the second submit is decided (in the model), not durable
                assert len(rig.daemon.model.state.jobs) == 2
                assert _ids(await _query(rig)) == [first]  # answered while the loop waits on the commit
                gate.release()
            assert len(_ids(await _query(rig))) == 2
            rig.daemon.queries.check(rig.daemon)


async def test_a_known_job_is_never_missing_across_compaction_and_restart(tmp_path):
    with trio.fail_after(90):
        async with controller(tmp_path) as rig:
            peer, _ = await rig.join("a1", slots=4)
            jobs = [await _submit(rig, f"j{i}") for i in range(3)]
            members = await _array(rig, 2)
            await until(lambda: all(rig.job(j).state.value == "RUNNING" for j in jobs))
            await rig.daemon._snapshot()  # a pruning snapshot: the facts behind these jobs are gone
            assert rig.store.facts_since_snapshot == 0
            after = _ids(await _query(rig, ids=[*jobs, members[0]]))
            assert after == [*jobs, *members]
            rig.daemon.queries.check(rig.daemon)
            before = {j["id"]: j["state"] for j in (await _query(rig))["jobs"]}
        async with controller(tmp_path) as rig:  # a restart: the index is rebuilt from the snapshot
            reply = await _query(rig, ids=[*jobs, members[0]])
            assert _ids(reply) == [*jobs, *members] and "unknown" not in reply
            assert {j["id"]: j["state"] for j in reply["jobs"]} == before
            assert _ids(await _query(rig, names=["j1"])) == [jobs[1]]


async def test_the_query_op_on_the_wire_and_a_big_reply_encoded_off_the_loop(tmp_path, monkeypatch):
    from reckon.daemon.controller import clients

    monkeypatch.setattr(clients, "BIG_REPLY", 2)  # three jobs: the worker thread's path
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            ids = [await _submit(rig, "w") for _ in range(3)]
            client, _ = await rig.connect("/client")
            await client.send({"op": "query", "names": ["w"]})
            reply = await client.receive()
            assert reply["ok"] and [j["id"] for j in reply["jobs"]] == ids
            await client.send({"op": "query", "states": ["DONE"]})
            reply = await client.receive()
            assert not reply["ok"] and reply["error"].startswith("unknown state 'DONE'")


async def test_the_index_check_bites(tmp_path):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            job = await _submit(rig)
            index = rig.daemon.queries
            index.check(rig.daemon)
            index.jobs[job] = {**index.jobs[job], "held": True}  # a change the index missed
            with pytest.raises(RuntimeError, match=f"the query index's job {job} differs"):
                index.check(rig.daemon)
            index._put(QueryIndex.of(rig.daemon).jobs[job])
            index.check(rig.daemon)
            del index.states["PENDING"][job]
            with pytest.raises(RuntimeError, match="the query index's states differ"):
                index.check(rig.daemon)


def test_a_time_window_walks_live_and_recently_ended_jobs_and_matches_a_walk_of_all():
    index = QueryIndex()

    def put(job_id: str, state: str, finished: float | None, submitted: float = 0.0) -> None:
        index._put({"id": job_id, "array_id": None, "name": "n", "user": None, "state": state,
                    "finished_at": finished, "submitted_at": submitted})

    for k in range(1, 41):
        put(str(k), "PENDING", None, submitted=k)
    for k in range(1, 31):  # ended out of order, as agents' clocks report them
        put(str(k), "COMPLETED" if k % 3 else "CANCELLED", float(100 + (k * 7) % 30) if k % 5 else None, submitted=k)
    put("4", "PENDING", None, submitted=4)  # requeued: its entry in ``ended`` is stale now
    put("6", "RUNNING", None, submitted=6)
    put("7", "FAILED", 200.0, submitted=7)  # ended again, later
    for since in (-1.0, 0.0, 5.0, 100.0, 110.0, 129.0, 150.0, 300.0):
        for until in (None, 10.0, 35.0):
            walked = [o["id"] for o in index.jobs.values() if
                      (until is None or o["submitted_at"] <= until) and
                      (o["state"] in ("PENDING", "RUNNING") or
                       (o["finished_at"] if o["finished_at"] is not None else o["submitted_at"]) >= since)]
            assert [o["id"] for o in index.answer(since=since, until=until)[0]] == walked, (since, until)
