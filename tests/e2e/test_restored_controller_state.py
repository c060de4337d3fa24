"""A controller state directory restored from an older copy (issue #9 bug 3), with real processes.

The agent still runs a job the restored state never issued, and a new job
reuses that job's id before the agent is back.  The new job must run its own
process and get its own exit code; the old process is killed; the old job's
exit code is recorded for nobody.  INV-OUTCOME-OWNER.
"""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def _copy_state(src, dst, *, with_id_mark: bool = True) -> None:
    """What an operator does with the controller stopped: copy every controller.db* file (and,
    restoring the whole directory, the id-mark file: the one case where an id can repeat)."""
    dst.mkdir(parents=True, exist_ok=True)
    pattern = ("controller.db*", "id-mark") if with_id_mark else ("controller.db*",)
    for glob in pattern:
        for path in dst.glob(glob):
            path.unlink()
        for path in src.glob(glob):
            shutil.copy2(path, dst / path.name)


def test_restored_controller_state_never_gives_the_old_process_outcome_to_the_new_job(cluster, truth_dir):
    cluster.start_controller()
    cluster.start_agent("a1")
    cluster.stop("controller")
    backup = truth_dir / "controller-backup"
    _copy_state(cluster.controller_dir, backup)  # the copy: the history exists, no job yet

    cluster.start_controller()
    old_pid = truth_dir / "old.pid"
    old = cluster.submit("sh", "-c", f"echo $$ > {old_pid}; exec sleep 120")
    # The shell creates the file before it writes the pid: wait for the whole line, not the file.
    pid = int(wait_for(lambda: old_pid.exists() and old_pid.read_text().endswith("\n") and old_pid.read_text(),
                       what=f"{old_pid} to hold the pid"))
    assert cluster.alive(pid)

    # The controller is stopped and its older copy restored; the agent is away meanwhile
    # (stopped: its job process keeps running under its supervisor).
    cluster.stop("controller")
    cluster.stop("a1")
    _copy_state(backup, cluster.controller_dir)
    cluster.start_controller()
    ran = truth_dir / "new.ran"
    new = cluster.submit("sh", "-c", f"touch {ran}; exit 3")
    assert new == old  # the whole directory was restored: the id repeats, only the uid tells them apart

    cluster.start_agent("a1")
    record = cluster.wait_job(new)
    assert ran.exists(), "the new job never ran"
    assert (record["state"], record["exit_code"], record["signal"]) == ("FAILED", 3, None), record
    assert record["attempt"] == 2  # the agent refused attempt 1: it holds it for the old submission
    cluster.wait_for(lambda: not cluster.alive(pid), what="the old process to be killed")
    cluster.wait_node("a1", ("IDLE",))
    later = cluster.submit("true")
    assert int(later) == int(new) + 1
    assert cluster.wait_job(later)["state"] == "COMPLETED"


def test_a_restored_database_never_issues_an_id_again(cluster, truth_dir):
    """Issue #9 gap 1 through the CLI: only controller.db* is restored (the id-mark file stays),
    so ids continue above every id issued before, and the controller says why, once."""
    cluster.start_controller()
    first = cluster.submit("true")
    cluster.stop("controller")
    backup = truth_dir / "controller-backup"
    _copy_state(cluster.controller_dir, backup, with_id_mark=False)
    cluster.start_controller()
    second = cluster.submit("true")
    cluster.stop("controller")
    _copy_state(backup, cluster.controller_dir, with_id_mark=False)
    cluster.start_controller()
    third = cluster.submit("true")
    assert len({first, second, third}) == 3, (first, second, third)
    said = [line for line in cluster.log_text("controller").splitlines()
            if "controller state is older than its id mark: restored from a backup?" in line]
    assert len(said) == 1 and f"job ids continue from {third}" in said[0], said


def test_an_online_backup_restored_is_recognised_and_holds_dispatch(cluster, truth_dir):
    """A backup taken with SQLite's backup API while the controller runs (what `sqlite3 controller.db
    ".backup ..."` does), restored as the README says: the id-mark file records how far the log went
    after every commit, so the copy is recognised as older although its ids are in the current block."""
    import sqlite3

    cluster.start_controller()
    cluster.start_agent("a1")
    first = cluster.submit("true")
    assert cluster.wait_job(first)["state"] == "COMPLETED"
    backup = truth_dir / "online-backup.db"
    source = sqlite3.connect(cluster.controller_dir / "controller.db")
    try:
        with sqlite3.connect(backup) as target:
            source.backup(target)  # online: the controller runs on
    finally:
        source.close()
    later = cluster.submit("sh", "-c", "exit 5")
    assert cluster.wait_job(later)["exit_code"] == 5
    cluster.stop("controller")
    for path in cluster.controller_dir.glob("controller.db*"):
        path.unlink()
    shutil.copy2(backup, cluster.controller_dir / "controller.db")
    cluster.start_controller()
    assert cluster.wait_job(first)["state"] == "COMPLETED"
    said = [line for line in cluster.log_text("controller").splitlines()
            if "controller state is older than its id mark: its log ends at fact" in line]
    assert len(said) == 1 and "an online backup restored?" in said[0], said
