"""End to end on a MUNGE cluster (issue #20): user A submits, user B may neither cancel nor read A's job,
an operator may; jobs lists the owner."""

from __future__ import annotations

import pytest

from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.client_common import ClientError
from reckon.daemon.auth.client import ClientAuth
from tests.e2e.test_munge import as_uid, munge_cluster  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e


def test_a_user_may_not_touch_anothers_job_an_operator_may(munge_cluster, munged):
    cluster = munge_cluster
    cluster.start_agent("a1")
    alice, bob = as_uid(munged.socket, 54321), as_uid(munged.socket, 54322)
    spec = {"name": "s", "command": ["sleep", "30"], "cwd": "/", "env": [], "slots": 1}
    with SyncClient(cluster.url, alice, timeout=10) as client:
        job = client.call("submit", spec=spec)["job"]
    assert job["user"] == "#54321" and job["owner"]["uid"] == 54321
    with SyncClient(cluster.url, bob, timeout=10) as client:
        with pytest.raises(ClientError, match=f"job {job['id']} belongs to #54321: #54322 may not cancel it"):
            client.call("cancel", job=job["id"])
        with pytest.raises(ClientError, match="may not read it"):
            client.call("logs", job=job["id"])
        assert [j["id"] for j in client.call("jobs", user="#54321")["jobs"]] == [job["id"]]
    cluster.wait_job(job["id"])  # a uid without a passwd entry cannot run here: it fails at once
    with SyncClient(cluster.url, bob, timeout=10) as client:
        with pytest.raises(ClientError, match="#54322 may not requeue it"):
            client.call("requeue", job=job["id"])
    with SyncClient(cluster.url, ClientAuth(mode="munge", munge_socket=munged.socket), timeout=10) as client:
        assert client.call("requeue", job=job["id"])["job"]["attempt"] == 2  # root: an operator
