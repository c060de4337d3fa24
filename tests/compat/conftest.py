"""The real workflow tools against reckon's Slurm commands: collected only with RECKON_COMPAT=1
(`make test-compat`, which installs the tools into .venv-compat from requirements-compat.txt).

Each test gets ``slurm`` (a ``SlurmSite``): a controller and agents on loopback (the e2e
``Cluster``), the Slurm commands written by ``reckon slurm-commands DIR``, and this process's
environment pointed at them (PATH, RECKON_CONTROLLER), as a user's shell would be.  The tools
then run exactly as on a Slurm login node: they find ``sbatch`` & co. on PATH.
"""

from __future__ import annotations

import os

import pytest

# Nothing here imports a tool: `make test` (which has none installed) still loads this file.
collect_ignore_glob = [] if os.environ.get("RECKON_COMPAT") == "1" else ["test_*.py"]

from tests.compat.site import SlurmSite  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Each test starts a cluster and a tool that forks workers: one at a time on one xdist worker."""
    for item in items:
        if "/tests/compat/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group("compat"))


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    site = SlurmSite(tmp_path, monkeypatch)
    try:
        yield site
    finally:
        site.close()


@pytest.fixture(autouse=True)
def hang_guard():
    """End a test that overruns, whatever it is blocked in (a tool waiting for a job forever)."""
    import signal

    def expired(signum, frame):
        raise TimeoutError("the compat test ran longer than 300 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(300)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
