"""State directories are 0700 and state files 0600, whatever the umask (daemon/store/filemodes.py).

The controller's database holds job environments; the -wal and -shm files
SQLite makes beside a database hold the same data, so they are checked too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from reckon.daemon.store.agent import AgentStore
from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.statelock import hold_state_dir
from reckon.model import facts as F

HANG = 30


@pytest.fixture(autouse=True)
def ordinary_umask():
    old = os.umask(0o022)  # group- and world-readable files by default: the modes must not follow it
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_controller_state_is_owner_only(tmp_path):
    state = tmp_path / "new" / "controller"
    with trio.fail_after(HANG), hold_state_dir(state, "controller"):
        async with await FactStore.open(state) as store:
            await store.append([F.ClusterCreated(cluster="c0ffee")])
            files = {p.name: _mode(p) for p in state.iterdir()}
    assert _mode(state) == 0o700
    assert {"controller.db", "controller.db-wal", "controller.db-shm", "lock"} <= set(files)
    assert files == {name: 0o600 for name in files}


async def test_agent_state_is_owner_only(tmp_path):
    state = tmp_path / "agent"
    with trio.fail_after(HANG), hold_state_dir(state, "agent"):
        async with await AgentStore.open(state) as store:
            await store.claim_identity("node1")
            files = {p.name: _mode(p) for p in state.iterdir()}
    assert _mode(state) == 0o700
    assert {"agent.db", "agent.db-wal", "agent.db-shm", "lock"} <= set(files)
    assert files == {name: 0o600 for name in files}


async def test_an_existing_open_state_directory_and_database_are_tightened(tmp_path):
    state = tmp_path / "controller"
    state.mkdir(mode=0o755)
    (state / "controller.db").touch(mode=0o644)
    with trio.fail_after(HANG), hold_state_dir(state, "controller"):
        async with await FactStore.open(state) as store:
            await store.append([F.ClusterCreated(cluster="c0ffee")])
    assert _mode(state) == 0o700
    assert _mode(state / "controller.db") == 0o600
    assert _mode(state / "lock") == 0o600
