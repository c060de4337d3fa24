"""The HTTP API's munge mode (a fresh MUNGE credential per request in X-Reckon-Munge, decoded by
the controller's own Authenticator; a replay refused; the same permissions, 403 with the one-line
refusal) and TLS with the controller's own certificate."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import httpx
import pytest
import trio
import trustme

from reckon.daemon.auth import munge
from tests.http.cluster import DEADLINE, cluster

NEVER = {"name": "big", "command": ["true"], "slots": 64}


def credential_as(user: str, socket: str) -> str:
    """A MUNGE credential made by ``user`` (the munge program run as that user: we are root)."""
    done = subprocess.run([shutil.which("munge") or "/usr/bin/munge", "-n", "-S", socket], user=user,
                          capture_output=True, text=True, timeout=DEADLINE, check=True)
    return done.stdout.strip()


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make another user's MUNGE credential")
@pytest.mark.skipif(not _has_user("nobody"), reason="no user nobody here to make a non-operator's credential")
async def test_munge_mode_credentials_replays_and_permissions(tmp_path, munged):
    socket = munged.socket

    def root() -> dict[str, str]:
        return {"X-Reckon-Munge": munge.encode(socket)}

    with trio.fail_after(DEADLINE * 2):
        async with cluster(tmp_path, token=None, auth="munge", munge_socket=socket) as c:
            api = c.client
            missing = await api.get("/api/v1/whoami")
            assert missing.status_code == 401 and "this controller authenticates with MUNGE" in missing.json()["error"]
            bearer = await api.get("/api/v1/whoami", headers={"Authorization": "Bearer x"})
            assert bearer.status_code == 401 and "not a MUNGE credential" in bearer.json()["error"]

            once = root()
            me = await api.get("/api/v1/whoami", headers=once)
            assert me.json() == {"auth": "munge", "caller": {"uid": 0, "gid": 0, "user": "root", "operator": True}}
            replayed = await api.get("/api/v1/whoami", headers=once)
            assert replayed.status_code == 401 and "replayed" in replayed.json()["error"]
            also = await api.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {munge.encode(socket)}"})
            assert also.status_code == 200  # the WebSocket's own header works too

            job = (await api.post("/api/v1/jobs", json={"spec": NEVER, "queue_anyway": True},
                                  headers=root())).json()["job"]
            assert job["user"] == "root"
            nobody = await trio.to_thread.run_sync(credential_as, "nobody", socket)
            denied = await api.post(f"/api/v1/jobs/{job['id']}/cancel", headers={"X-Reckon-Munge": nobody})
            assert (denied.status_code, denied.json()) == (
                403, {"error": f"job {job['id']} belongs to root: nobody may not cancel it"})
            await c.until(lambda: _joined(c, root()), "the agent joined with its MUNGE credential")
            nobody = await trio.to_thread.run_sync(credential_as, "nobody", socket)
            drain = await api.post("/api/v1/nodes/node1/drain", headers={"X-Reckon-Munge": nobody})
            assert drain.status_code == 403 and drain.json()["error"].startswith("only an operator may drain")
            nobody = await trio.to_thread.run_sync(credential_as, "nobody", socket)
            seen = await api.get("/api/v1/jobs", headers={"X-Reckon-Munge": nobody})  # everyone sees the queue
            assert [j["id"] for j in seen.json()["jobs"]] == [job["id"]]
            cancel = await api.post(f"/api/v1/jobs/{job['id']}/cancel", headers=root())
            assert cancel.json()["job"]["state"] == "CANCELLED"


@pytest.fixture
def pki(tmp_path):
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, ca_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    return cert, key, ca_file


async def test_tls_when_the_controller_has_it(tmp_path, pki):
    with trio.fail_after(DEADLINE * 2):
        async with cluster(tmp_path, tls=pki) as c:
            assert c.url.startswith("https://127.0.0.1:")
            nodes = await c.until(lambda: _joined(c), "the agent joined over wss")
            assert nodes[0]["name"] == "node1"
            async with httpx.AsyncClient(timeout=DEADLINE) as untrusting:  # the system store: not our CA
                with pytest.raises(httpx.ConnectError):
                    await untrusting.get(c.url + "/api/v1/status")
            async with httpx.AsyncClient(timeout=DEADLINE) as plain:  # cleartext to the TLS port
                with pytest.raises(httpx.HTTPError):
                    await plain.get(c.url.replace("https:", "http:") + "/api/v1/status")


async def _joined(c, headers=None):
    nodes = (await c.client.get("/api/v1/nodes", headers=headers)).json()["nodes"]
    return nodes or None
