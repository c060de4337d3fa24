"""The ``pending`` op (issue #22): the reason codes and priorities of PENDING jobs, for squeue,
scontrol and sacct; a bad request is one line."""

from __future__ import annotations

import pytest
import trio

from reckon.model.jobs import JobSpec

from tests.daemon.trio_harness import controller

pytestmark = pytest.mark.filterwarnings("ignore::trio.TrioDeprecationWarning")


async def _pending(rig, **fields) -> dict:
    return await rig.daemon._client_op({"op": "pending", **fields})


async def test_the_codes_of_the_pending_jobs_asked_for(tmp_path):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            a = await rig.submit(JobSpec(name="a", command=("true",)))
            b = await rig.submit(JobSpec(name="b", command=("true",), after=(a,)))
            reply = await _pending(rig)  # no agent has joined: every pending job, ReqNodeNotAvail but b's
            assert reply["reasons"] == {a: "ReqNodeNotAvail", b: "Dependency"}
            assert set(reply["priorities"]) == {a, b}
            assert (await _pending(rig, ids=[b, "999"]))["reasons"] == {b: "Dependency"}  # unknown: left out
            shown = await rig.daemon._client_op({"op": "show", "job": b})
            assert shown["job"]["pending_code"] == "Dependency"  # show and the op agree
            listed = {j["id"]: j["pending_code"] for j in (await rig.daemon._client_op({"op": "jobs"}))["jobs"]}
            assert listed == reply["reasons"]


@pytest.mark.parametrize("request_, error", [
    ({"ids": "1"}, "pending ids must be a list of job ids"),
    ({"ids": [""]}, "pending ids must be a list of job ids"),
    ({"ids": [1]}, "pending ids must be a list of job ids"),
])
async def test_a_bad_pending_request_is_one_line(tmp_path, request_, error):
    with trio.fail_after(60):
        async with controller(tmp_path) as rig:
            with pytest.raises(ValueError, match=error):
                await _pending(rig, **request_)
