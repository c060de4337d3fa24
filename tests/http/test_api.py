"""The HTTP API against a real controller and agent (tests/http/cluster.py): every route, its
errors, and token auth; a job really runs and its output comes back through the API."""

from __future__ import annotations

import pytest
import trio

from reckon.daemon.controller import job_ops
from tests.http.cluster import DEADLINE, cluster

ECHO = {"name": "hello", "command": ["sh", "-c", "echo hello from http; echo oops >&2"], "slots": 1}
TRAP = {"name": "trap", "slots": 1, "command": [
    "sh", "-c", "trap 'echo got USR1; exit 3' USR1; echo ready; while :; do sleep 0.1; done"]}
NEVER = {"name": "big", "command": ["true"], "slots": 64}  # no agent has 64 slots: it stays PENDING


async def test_every_route_on_a_real_cluster(tmp_path):
    with trio.fail_after(DEADLINE * 4):
        async with cluster(tmp_path) as c:
            api = c.client
            # whoami, status, nodes
            assert (await api.get("/api/v1/whoami")).json() == {"auth": "token", "caller": None}
            nodes = await c.until(lambda: _nodes(api), "the agent joined")
            assert nodes[0]["name"] == "node1" and nodes[0]["cpus"] == 2 and nodes[0]["state"] == "IDLE"

            # submit one job; it runs; its output and history
            reply = await api.post("/api/v1/jobs", json={"spec": ECHO})
            assert reply.status_code == 200, reply.text
            job = reply.json()["job"]["id"]
            done = await c.finished(job)
            assert (done["state"], done["exit_code"], done["agent"]) == ("COMPLETED", 0, "node1")
            assert [a["attempt"] for a in done["attempts"]] == [1]
            out = (await api.get(f"/api/v1/jobs/{job}/logs")).json()
            assert out["data"] == "hello from http\n" and out["next_offset"] == 16 and out["over"] is True
            err = (await api.get(f"/api/v1/jobs/{job}/logs", params={"stream": "stderr", "offset": 1})).json()
            assert err["data"] == "ops\n" and err["stream"] == "stderr"
            history = (await api.get(f"/api/v1/jobs/{job}/history")).json()["history"]
            assert history["record"]["id"] == job and history["attempts"][0]["agent"] == "node1"
            past = (await api.get("/api/v1/history", params={"since": 0})).json()["jobs"]
            assert [j["id"] for j in past] == [job]

            # several at once, held; hold/release/cancel; requeue a finished job
            many = (await api.post("/api/v1/jobs", json={"specs": [NEVER, NEVER], "queue_anyway": True})).json()
            first, second = many["jobs"]
            assert (await api.post(f"/api/v1/jobs/{first}/hold")).json()["job"]["held"] is True
            assert (await api.post(f"/api/v1/jobs/{first}/release")).json()["job"]["held"] is False
            refused = await api.post(f"/api/v1/jobs/{first}/release")  # not held: the model's refusal
            assert (refused.status_code, refused.json()) == (409, {"error": f"job {first} is not held"})
            cancelled = (await api.post(f"/api/v1/jobs/{second}/cancel", json={})).json()
            assert cancelled["job"]["state"] == "CANCELLED"
            requeued = (await api.post(f"/api/v1/jobs/{job}/requeue")).json()["job"]
            assert requeued["attempt"] == 2 and requeued["state"] in ("PENDING", "RUNNING", "COMPLETED")
            await c.until(lambda: _state(c, job, "COMPLETED"), "the requeued job ran again")

            # lists: jobs with filters, the query op, arrays
            listed = (await api.get("/api/v1/jobs", params={"state": "CANCELLED"})).json()["jobs"]
            assert [j["id"] for j in listed] == [second]
            assert (await api.get("/api/v1/jobs", params={"state": "NOPE"})).status_code == 400
            array = (await api.post("/api/v1/arrays", json={"spec": NEVER, "array": "1-3", "queue_anyway": True})).json()
            members = (await api.get(f"/api/v1/arrays/{array['array']}")).json()["jobs"]
            assert sorted(j["id"] for j in members) == sorted(array["jobs"])
            assert (await api.get("/api/v1/arrays/999")).status_code == 404
            assert (await api.get(f"/api/v1/arrays/{job}")).json() == {"error": f"job {job} is not an array"}
            queried = (await api.get("/api/v1/query", params={"ids": f"{job},{second}"})).json()
            assert sorted(j["id"] for j in queried["jobs"]) == sorted([job, second]) and queried["now"] > 0
            by_state = (await api.get("/api/v1/query", params={"states": "COMPLETED"})).json()["jobs"]
            assert [j["id"] for j in by_state] == [job]
            selected = (await api.get("/api/v1/query", params={"states": "COMPLETED", "fields": "id,state"})).json()
            assert selected["jobs"] == [{"id": job, "state": "COMPLETED"}]
            refused = await api.get("/api/v1/query", params={"fields": "id,colour"})
            assert refused.status_code == 400 and refused.json()["error"].startswith("unknown query field 'colour'")
            assert (await api.post(f"/api/v1/jobs/{array['array']}/cancel")).json()["array"][0]["state"] == "CANCELLED"

            # nodes: drain, resume; forget a connected one is refused
            drained = (await api.post("/api/v1/nodes/node1/drain")).json()
            assert drained["changed"] is True and drained["node"]["drained"] is True
            assert (await api.post("/api/v1/nodes/node1/resume")).json()["node"]["drained"] is False
            forget = await api.post("/api/v1/nodes/node1/forget")
            assert forget.status_code == 409 and "is connected" in forget.json()["error"]
            status = (await api.get("/api/v1/status")).json()["status"]
            assert status["jobs"] == {"COMPLETED": 1, "CANCELLED": 4, "PENDING": 1}

            # errors: unknown job / node, a bad spec, unknown route, the document
            for path in ("/api/v1/jobs/999", "/api/v1/jobs/999/logs", "/api/v1/jobs/999/history"):
                missing = await api.get(path)
                assert missing.status_code == 404, (path, missing.text)
                assert missing.json()["error"] in ("unknown job '999'", "unknown job 999"), path
            assert (await api.post("/api/v1/nodes/nope/drain")).status_code == 404
            bad = await api.post("/api/v1/jobs", json={"spec": {"name": "x", "command": ["true"], "slots": 0}})
            assert bad.status_code == 400 and "slots" in bad.json()["error"]
            assert (await api.get("/api/v1/nothing")).status_code == 404
            assert (await api.get("/api/v1/openapi.json")).json()["openapi"] == "3.1.0"


@pytest.mark.skipif("signal" not in job_ops.OPS,
                    reason="this controller has no signal op yet (it comes with JobSpec v7, branch spec7)")
async def test_a_running_job_is_signalled_and_a_pending_one_refused(tmp_path):
    with trio.fail_after(DEADLINE * 2):
        async with cluster(tmp_path) as c:
            api = c.client
            pending = (await api.post("/api/v1/jobs", json={"spec": NEVER, "queue_anyway": True})).json()["job"]["id"]
            refused = await api.post(f"/api/v1/jobs/{pending}/signal", json={"signal": 10})
            assert (refused.status_code, refused.json()) == (
                409, {"error": f"job {pending} is PENDING: only a RUNNING job can be signalled"})
            trap = (await api.post("/api/v1/jobs", json={"spec": TRAP})).json()["job"]["id"]
            await c.until(lambda: _said(c, trap, "ready"), "the trapping job runs and has set its trap")
            signalled = await api.post(f"/api/v1/jobs/{trap}/signal", json={"signal": 10, "batch_only": True})
            assert signalled.status_code == 200 and signalled.json()["job"]["id"] == trap
            ended = await c.finished(trap)
            assert (ended["state"], ended["exit_code"]) == ("FAILED", 3)
            assert await _said(c, trap, "got USR1")


async def test_token_auth_is_the_websockets(tmp_path):
    with trio.fail_after(DEADLINE):
        async with cluster(tmp_path, agent=False) as c:
            missing = await _bare(c.url, "/api/v1/jobs")  # no Authorization header at all
            assert (missing.status_code, missing.json()) == (401, {"error": "missing token"})
            wrong = await c.client.get("/api/v1/jobs", headers={"Authorization": "Bearer wrong"})
            assert (wrong.status_code, wrong.json()) == (401, {"error": "bad token"})
            assert (await c.client.get("/api/v1/jobs")).status_code == 200
            page = await _bare(c.url, "/")  # the page holds no data: no credential needed
            assert page.status_code == 200 and "text/html" in page.headers["content-type"]


async def _bare(url: str, path: str):
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=DEADLINE) as bare:
        return await bare.get(path)


async def _nodes(api):
    nodes = (await api.get("/api/v1/nodes")).json()["nodes"]
    return nodes if nodes and nodes[0]["state"] == "IDLE" else None


async def _said(c, job: str, text: str) -> bool:
    reply = (await c.client.get(f"/api/v1/jobs/{job}/logs")).json()
    return text in reply.get("data", "")


async def _state(c, job: str, state: str):
    return (await c.job(job))["state"] == state
