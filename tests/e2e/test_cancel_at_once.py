"""Submit and cancel at once, over one client connection (issue #9, bug 2, as found).

The cancel reaches the agent while the job's launch is still under way.  The
job must be stopped (recorded CANCELLED, ended by SIGTERM), not run to its end
and recorded CANCELLED with exit code 0.
"""

from __future__ import annotations

import signal

import pytest
import trio

from reckon.daemon.client import Client

from tests.e2e.conftest import HANG

pytestmark = pytest.mark.e2e


def test_a_job_cancelled_right_after_submit_is_stopped(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1", slots=4)
    spec = {"name": "sleeper", "command": ["sh", "-c", f"sleep 30; echo ran-to-the-end > {truth_dir}/end"],
            "cwd": None, "env": [], "slots": 1}

    async def submit_and_cancel() -> list[str]:
        ids = []
        with trio.fail_after(HANG):
            async with Client(cluster.url, cluster.token) as client:
                for _ in range(5):  # a few tries at different points of the launch
                    job = (await client.call("submit_many", specs=[spec]))["jobs"][0]
                    await client.call("cancel", job=job)
                    ids.append(job)
        return ids

    ids = trio.run(submit_and_cancel)
    final = cluster.wait_jobs(ids, timeout=25)  # well before the 30 s the job would take
    for job in ids:
        record = final[job]
        assert record["state"] == "CANCELLED", record
        # Either stopped by the kill, or never launched at all: never "ran to its end with 0".
        assert record["exit_code"] is None, record
        assert record["signal"] in (None, signal.SIGTERM), record
    assert not (truth_dir / "end").exists()
