"""Issue #22's fair share with real users and processes: alice floods the queue with an array,
bob submits one job after; bob's job starts within a bound (the next recomputation and a slot
freeing), not behind alice's backlog as first-in first-out would put it.

Real munged and Unix users (as tests/e2e/test_shared_cluster.py): the controller knows who asks,
and fair share charges each user's CPU-seconds from the facts.  Bite (2026-12-02): with
``weight_fairshare = 0`` in the config, "30 of alice's jobs started before bob's"."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.test_shared_cluster import As
from tests.unixusers import unix_users  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e


def test_a_light_users_job_starts_before_a_heavy_users_backlog(cluster, munged, unix_users):
    config = cluster.base / "reckon.toml"
    # Age off (it would move priorities between the two users' submits); recomputed every second.
    config.write_text('[priority]\nweight_age = 0\nrecompute_every = "1s"\n')
    cluster.use_munge(munged.socket)
    cluster.start_controller("--config", str(config))
    cluster.start_agent("a1", slots=2)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"reckon-fairshare-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    try:
        alice, bob = (As(cluster, munged.socket, u.name) for u in (unix_users.alice, unix_users.bob))
        spec = {"name": "flood", "command": ["sleep", "1"], "cwd": str(work), "env": [], "slots": 1}
        flood = alice.call("submit_array", spec=spec, array="1-30")["jobs"]
        cluster.wait_for(lambda: sum(cluster.job(j)["state"] != "PENDING" for j in flood[:2]) == 2,
                         what="alice's first jobs running")
        mine = bob.submit("true", work)
        record = cluster.wait_job(mine)
        assert record["state"] == "COMPLETED"
        started_before = [j for j in flood if (cluster.job(j).get("started_at") or float("inf")) < record["started_at"]]
        # FIFO would start all 30 of alice's first; fair share lets bob's job in within a few.
        assert len(started_before) <= 8, f"{len(started_before)} of alice's jobs started before bob's"
        assert cluster.job(flood[-1])["state"] == "PENDING"  # her backlog is still there: bob did not wait it out
        prio = cluster.cli_json("priority", flood[-1])
        assert prio["fairshare"] < 1.0  # alice's usage lowered her factor
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
