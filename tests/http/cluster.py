"""A real controller (and optionally a real agent running real jobs) with the HTTP API served
beside it exactly as ``reckon controller --http`` wires it (daemon/cli/daemons.py ``start_http``),
all on loopback inside the test's trio run; and an httpx client to it."""

from __future__ import annotations

import contextlib
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import trio

from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.daemon.cli.daemons import start_http
from reckon.daemon.controller.server import ControllerOptions, serve_controller

DEADLINE = 60.0  # seconds for anything the tests wait on (a loaded 2-core machine)


@dataclass
class Cluster:
    url: str  # the HTTP API's base URL
    ws_url: str
    daemon: Any
    client: httpx.AsyncClient

    async def until(self, predicate, what: str, step: float = 0.05) -> Any:
        with trio.move_on_after(DEADLINE):
            while True:
                value = await predicate()
                if value:
                    return value
                await trio.sleep(step)
        raise AssertionError(f"not within {DEADLINE} s: {what}")

    async def job(self, job_id: str) -> dict:
        reply = await self.client.get(f"/api/v1/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        return reply.json()["job"]

    async def finished(self, job_id: str) -> dict:
        async def done():
            job = await self.job(job_id)
            return job if job["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None
        return await self.until(done, f"job {job_id} finished")


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, *, agent: bool = True, token: str | None = "t0ken", auth: str = "token",
                  munge_socket: str | None = None, tls: tuple[Path, Path, Path] | None = None,
                  headers: dict[str, str] | None = None) -> AsyncIterator[Cluster]:
    cert, key, ca = tls if tls is not None else (None, None, None)
    options = ControllerOptions(host="127.0.0.1", port=0, state_dir=tmp_path / "controller", token=token, auth=auth,
                                munge_socket=munge_socket, rejoin_grace=0.0, tls_cert=cert, tls_key=key)
    async with trio.open_nursery() as nursery:
        port, served = await nursery.start(serve_controller, options)
        url = await start_http(nursery, served, options, "127.0.0.1", 0)
        ws_url = f"{'wss' if tls else 'ws'}://127.0.0.1:{port}"
        if agent:
            await nursery.start(run_agent, AgentOptions(
                name="node1", slots=2, state_dir=tmp_path / "agent", controller=ws_url, token=token, auth=auth,
                munge_socket=munge_socket, cgroups=False, kill_grace=2.0, ca=ca))
        default = {"Authorization": f"Bearer {token}"} if token and auth == "token" else {}
        async with httpx.AsyncClient(base_url=url, headers={**default, **(headers or {})},
                                     verify=ssl.create_default_context(cafile=str(ca)) if ca else True,
                                     timeout=DEADLINE) as client:
            yield Cluster(url=url, ws_url=ws_url, daemon=served, client=client)
        nursery.cancel_scope.cancel()
