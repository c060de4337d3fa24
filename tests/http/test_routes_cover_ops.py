"""Every client operation of the controller has an HTTP route (or is named here as not over HTTP),
and the routes of the scheduling operations (issue #22) work on a real controller."""

from __future__ import annotations

import trio

from reckon.daemon.controller.clients import ClientRequests
from reckon.daemon.http.routes import ROUTES
from tests.http.cluster import DEADLINE, cluster

NEVER = {"name": "big", "command": ["true"], "slots": 64}  # no agent has 64 slots: it stays PENDING
NOT_OVER_HTTP: frozenset[str] = frozenset()


def test_every_client_op_has_a_route():
    routed = {route.op for route in ROUTES} | {"submit_many"}  # POST /jobs picks submit or submit_many
    assert ClientRequests.client_ops() - NOT_OVER_HTTP - routed == set()
    assert routed - ClientRequests.client_ops() == set()  # and no route names an op the controller lacks


async def test_priority_pending_and_partition_routes(tmp_path):
    with trio.fail_after(DEADLINE * 2):
        async with cluster(tmp_path, agent=False) as c:
            api = c.client
            job = (await api.post("/api/v1/jobs", json={"spec": NEVER, "queue_anyway": True})).json()["job"]["id"]
            factors = (await api.get(f"/api/v1/jobs/{job}/priority")).json()["priority"]
            assert factors["job"] == job and factors["state"] == "PENDING" and "weights" in factors
            set_to = await api.post(f"/api/v1/jobs/{job}/priority", json={"priority": 500})
            assert set_to.status_code == 200, set_to.text
            after = (await api.get(f"/api/v1/jobs/{job}/priority")).json()["priority"]
            assert (after["adjust"], after["priority"]) == (500, factors["priority"] + 500)
            bad = await api.post(f"/api/v1/jobs/{job}/priority", json={"priority": "high"})
            assert (bad.status_code, bad.json()) == (400, {"error": "priority must be an integer, got 'high'"})
            pending = (await api.get("/api/v1/pending", params={"ids": job})).json()
            assert list(pending["reasons"]) == [job] and job in pending["priorities"]
            assert (await api.get("/api/v1/partitions")).json() == {"partitions": []}
            made = await api.post("/api/v1/partitions/short", json={"changes": [["nodes", ["node[1-2]"]]]})
            assert made.status_code == 200, made.text
            assert made.json()["changed"] is True and made.json()["partition"]["nodes"] == ["node[1-2]"]
            listed = (await api.get("/api/v1/partitions")).json()["partitions"]
            assert [(p["name"], p["state"]) for p in listed] == [("short", "UP")]
            removed = await api.post("/api/v1/partitions/short", json={"remove": True})
            assert removed.status_code == 200, removed.text
            assert (await api.get("/api/v1/partitions")).json() == {"partitions": []}
