"""Helpers of the tests that run jobs as real users in real cgroups (tests/daemon/test_agent_users.py,
tests/daemon/test_agent_cgroups.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from reckon.daemon.agent import cgroups
from reckon.daemon.agent.launcher import read_records
from reckon.model.jobs import JobSpec

HANG = 30  # seconds: a guard no passing test reaches


def sh(script: str, **kw) -> JobSpec:
    return JobSpec(name="t", command=("/bin/sh", "-c", script), **kw)


def start_time(pid: int) -> int | None:
    """/proc start time of a live (non-zombie) process, else None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def reap_jobs(root: Path) -> None:
    """SIGKILL every job process group and supervisor named by a pid record under ``root``."""
    for run_file in root.rglob("jobs/*.run"):
        info = (read_records(run_file) or (None, None))[0]
        if info is None:
            continue
        for pid, start, group in ((info["job_pid"], info["job_start"], True),
                                  (info["supervisor"], info["supervisor_start"], False)):
            if start_time(pid) == start:
                try:
                    (os.killpg if group else os.kill)(pid, signal.SIGKILL)
                except OSError:
                    pass


_count = 0


@pytest.fixture
def enforcement():
    """What cgroups.detect() finds for a fresh agent name; its cgroups are all gone afterwards."""
    global _count
    if os.geteuid() != 0:
        pytest.fail("this test needs root (it makes real cgroups)", pytrace=False)
    _count += 1
    found = cgroups.detect(f"test-{os.getpid()}-{_count}")
    assert found["version"] in (1, 2), f"no usable cgroups on this machine: {found['why']}"
    yield found
    left = cgroups.clean_leftovers(found, keep=set())
    for base in cgroups.bases(found):
        try:
            os.rmdir(base)
        except OSError:
            pass
    assert not left, f"the test left cgroups behind: {left}"
