"""An agent state directory belongs to the machine it was made on (issue #9: a copied directory or a cloned VM).

The store records the machine with the identity; a start on another machine
is refused (``CopiedStateDir``) and changes nothing; ``--moved-from`` (the
recorded machine, nothing else) records the new machine after a real move; a
directory from before machine checks is upgraded; a machine with no id runs
unchecked, with one warning.  The copy case on real daemons is in
tests/sim/test_sim.py and tests/e2e/test_copied_state_dir.py.

Invariant: INV-SIM-RUN-AT-MOST-ONCE (docs/invariants.md: the machine check is one of its guards).
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.daemon.store.agent import AgentStore
from reckon.daemon.store.machine import (CopiedStateDir, MachineId, MachineOutcome, check_moved_from, decide,
                                  read_machine_id)
from reckon.model import events as E
from tests.daemon.store_helpers import hang_guard
from tests.daemon.test_agentstore import records
from tests.daemon.test_agent_daemon import install, options, start_agent
from tests.daemon.trio_harness import FakeNet

M1 = "1" * 32
M2 = "2" * 32
M3 = "3" * 32


def machine(value: str | None) -> MachineId:
    return MachineId(value=value, source="/etc/machine-id" if value else "/etc/machine-id: missing")


def disk(state_dir: Path) -> tuple[list[tuple], list[tuple]]:
    """(meta rows, job rows) as another connection reads them: what a refusal must leave alone."""
    conn = sqlite3.connect(state_dir / "agent.db")
    try:
        return (sorted(conn.execute("SELECT key, value FROM meta")),
                sorted(conn.execute("SELECT job, attempt, status FROM local_job")))
    finally:
        conn.close()


# ---- reading this machine's id --------------------------------------------------------------


def test_the_first_usable_machine_id_file_counts(tmp_path):
    etc, dbus = tmp_path / "machine-id", tmp_path / "dbus-machine-id"
    dbus.write_text(f"{M2}\n")
    assert read_machine_id((etc, dbus)) == MachineId(value=M2, source=str(dbus))  # /etc's missing: the fallback
    etc.write_text(f"  {M1}\n")
    assert read_machine_id((etc, dbus)) == MachineId(value=M1, source=str(etc))  # stripped


@pytest.mark.parametrize("content, reason", [
    ("", "empty"),
    ("\n", "empty"),
    ("uninitialized\n", "not initialized yet"),  # systemd's first boot before the id is committed
    ("two words\n", "not a machine id"),
])
def test_an_unusable_machine_id_file_is_no_id_and_says_why(tmp_path, content, reason):
    path = tmp_path / "machine-id"
    path.write_text(content)
    found = read_machine_id((path, tmp_path / "absent"))
    assert found.value is None
    assert found.source == f"{path}: {reason}" + ("" if reason != "not a machine id" else
                                                  " (1 to 128 printable characters without spaces (systemd's are "
                                                  "32 hex digits))") + f"; {tmp_path / 'absent'}: missing"


def test_an_unreadable_machine_id_file_is_no_id(tmp_path):
    (tmp_path / "machine-id").mkdir()  # unreadable as a file, even for root
    found = read_machine_id((tmp_path / "machine-id",))
    assert found.value is None and found.source == f"{tmp_path / 'machine-id'}: Is a directory"


def test_moved_from_must_look_like_a_machine_id():
    assert check_moved_from(M1) == M1
    for bad in ("", "a b", "x" * 129):
        with pytest.raises(ValueError, match="is not a machine id: 1 to 128 printable characters"):
            check_moved_from(bad)


# ---- the decision (pure) -----------------------------------------------------------------------


def test_the_decision_table():
    d = Path("/var/lib/reckon/agent")

    def outcome(recorded, has_identity, current, moved_from=None):
        claim = decide(state_dir=d, recorded=recorded, has_identity=has_identity, machine=machine(current),
                       moved_from=moved_from)
        return claim.outcome, claim.record

    assert outcome(None, False, M1) == (MachineOutcome.RECORDED, M1)
    assert outcome(None, True, M1) == (MachineOutcome.UPGRADED, M1)
    assert outcome(M1, True, M1) == (MachineOutcome.SAME, None)
    assert outcome(M1, True, M1, moved_from=M3) == (MachineOutcome.SAME, None)  # a leftover flag: warned, harmless
    assert outcome(M1, True, M2, moved_from=M1) == (MachineOutcome.MOVED, M2)
    assert outcome(M1, True, None) == (MachineOutcome.UNCHECKED, None)
    assert outcome(None, False, None) == (MachineOutcome.UNCHECKED, None)
    with pytest.raises(CopiedStateDir) as info:
        outcome(M1, True, M2)
    assert str(info.value) == (
        f"state directory {d} belongs to machine {M1}, this is machine {M2}: it is a copy of another agent's "
        f"state directory (a copied directory or a cloned VM); a copy runs the original's jobs again. Start this "
        f"agent with an empty --state-dir and its own --name; if the directory was moved here and machine {M1} is "
        f"gone for good, start once with --moved-from {M1}")
    with pytest.raises(CopiedStateDir, match=f"^--moved-from {M3} does not match: state directory {d} belongs to "
                                             f"machine {M1}, this is machine {M2}; nothing was changed$"):
        outcome(M1, True, M2, moved_from=M3)


# ---- the store -----------------------------------------------------------------------------------


@hang_guard
async def test_the_machine_is_recorded_with_the_identity_and_a_copy_elsewhere_is_refused_changing_nothing(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    async with await AgentStore.open(original) as store:
        claim = await store.claim_machine(machine(M1))
        assert (claim.outcome, claim.log_line(original)) == (MachineOutcome.RECORDED, None)  # a quiet first start
        identity = await store.claim_identity("n1")
        await store.apply([E.StoreRecord(record=r) for r in records()])
    async with await AgentStore.open(original) as store:
        assert (await store.claim_machine(machine(M1))).outcome is MachineOutcome.SAME
        assert await store.claim_identity("n1") == identity
    shutil.copytree(original, copy)
    before = disk(copy)
    assert ("machine", M1) in before[0]
    async with await AgentStore.open(copy) as store:
        with pytest.raises(CopiedStateDir, match=f"^state directory {copy} belongs to machine {M1}, this is "
                                                 f"machine {M2}: it is a copy"):
            await store.claim_machine(machine(M2))
    assert disk(copy) == before  # nothing changed


@hang_guard
async def test_a_directory_from_before_machine_checks_records_this_machine_at_its_next_start(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        identity = await store.claim_identity("n1")  # as an agent of the previous release left it
        await store.apply([E.StoreRecord(record=records()[0])])
    assert "machine" not in dict(disk(tmp_path)[0])
    async with await AgentStore.open(tmp_path) as store:
        claim = await store.claim_machine(machine(M1))
        assert claim.outcome is MachineOutcome.UPGRADED
        assert claim.log_line(tmp_path) == ("info", f"state directory {tmp_path} had no machine recorded (made "
                                                    f"before machine checks): recorded this machine {M1}")
        assert await store.claim_identity("n1") == identity
    assert dict(disk(tmp_path)[0])["machine"] == M1
    async with await AgentStore.open(tmp_path) as store:
        with pytest.raises(CopiedStateDir):  # from now on it is checked
            await store.claim_machine(machine(M2))


@hang_guard
async def test_moved_from_the_recorded_machine_records_this_one_and_a_wrong_one_changes_nothing(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        await store.claim_machine(machine(M1))
        await store.claim_identity("n1")
    before = disk(tmp_path)
    async with await AgentStore.open(tmp_path) as store:
        with pytest.raises(CopiedStateDir, match=f"^--moved-from {M3} does not match"):
            await store.claim_machine(machine(M2), moved_from=M3)
        with pytest.raises(CopiedStateDir, match=f"^--moved-from {M2} does not match"):
            await store.claim_machine(machine(M2), moved_from=M2)  # this machine's id is not the old one's
    assert disk(tmp_path) == before
    async with await AgentStore.open(tmp_path) as store:
        claim = await store.claim_machine(machine(M2), moved_from=M1)
        assert claim.outcome is MachineOutcome.MOVED
        level, line = claim.log_line(tmp_path)
        assert level == "warning" and line.startswith(f"state directory {tmp_path} moved from machine {M1} to this "
                                                      f"machine {M2} (--moved-from): recorded")
    assert dict(disk(tmp_path)[0])["machine"] == M2
    async with await AgentStore.open(tmp_path) as store:
        # The flag left in a unit file: harmless here (warned), and it silences no later check.
        claim = await store.claim_machine(machine(M2), moved_from=M1)
        assert claim.outcome is MachineOutcome.SAME
        assert claim.log_line(tmp_path) == ("warning", f"--moved-from {M1} changed nothing: {tmp_path} belongs to "
                                                       f"this machine {M2}; remove --moved-from")
        with pytest.raises(CopiedStateDir, match=f"^--moved-from {M1} does not match: state directory {tmp_path} "
                                                 f"belongs to machine {M2}, this is machine {M3}"):
            await store.claim_machine(machine(M3), moved_from=M1)
        with pytest.raises(CopiedStateDir):  # back on the old machine: that is a copy now
            await store.claim_machine(machine(M1))


@hang_guard
async def test_with_no_machine_id_nothing_is_checked_or_recorded_and_a_warning_says_so(tmp_path):
    async with await AgentStore.open(tmp_path) as store:
        claim = await store.claim_machine(machine(None))
        assert claim.outcome is MachineOutcome.UNCHECKED
        assert claim.log_line(tmp_path) == ("warning", f"no machine id (/etc/machine-id: missing): the check that "
                                                       f"{tmp_path} is not a copy of another machine's agent state "
                                                       f"directory is off")
        await store.claim_identity("n1")
    assert "machine" not in dict(disk(tmp_path)[0])
    async with await AgentStore.open(tmp_path) as store:
        assert (await store.claim_machine(machine(M1))).outcome is MachineOutcome.UPGRADED  # once it has one
    async with await AgentStore.open(tmp_path) as store:
        assert (await store.claim_machine(machine(None))).outcome is MachineOutcome.UNCHECKED  # kept, not erased
    assert dict(disk(tmp_path)[0])["machine"] == M1


# ---- the agent daemon ------------------------------------------------------------------------------


def on_machine(opts: AgentOptions, machine_file: Path, **more) -> AgentOptions:
    fields = {f: getattr(opts, f) for f in opts.__dataclass_fields__}
    return AgentOptions(**{**fields, "machine_id_files": (machine_file,), **more})


async def test_the_agent_refuses_to_start_on_a_copy_of_another_machines_state_directory(
        tmp_path, autojump_clock, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="reckon")
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    m1.write_text(f"{M1}\n")
    m2.write_text(f"{M2}\n")
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            install(monkeypatch, FakeNet(nursery))
            agent, scope, stopped = await start_agent(nursery, on_machine(options(tmp_path / "a"), m1))
            identity = agent.model.config.identity
            scope.cancel()
            await stopped.wait()
            shutil.copytree(tmp_path / "a", tmp_path / "copy")
            before = disk(tmp_path / "copy")
            with pytest.raises(CopiedStateDir, match=f"belongs to machine {M1}, this is machine {M2}"):
                await run_agent(on_machine(options(tmp_path / "copy"), m2))
            assert disk(tmp_path / "copy") == before
            moved, scope, stopped = await start_agent(nursery, on_machine(options(tmp_path / "copy"), m2,
                                                                          moved_from=M1))
            assert moved.model.config.identity == identity  # the same agent, moved
            scope.cancel()
            await stopped.wait()
            assert [r.getMessage() for r in caplog.records if "--moved-from" in r.getMessage()] == [
                f"state directory {tmp_path / 'copy'} moved from machine {M1} to this machine {M2} (--moved-from): "
                f"recorded; jobs it ran there are reported lost. Remove --moved-from now: it is no longer needed"]
            nursery.cancel_scope.cancel()


async def test_an_agent_on_a_machine_without_an_id_starts_and_warns_once(tmp_path, autojump_clock, monkeypatch,
                                                                          caplog):
    caplog.set_level(logging.INFO, logger="reckon")
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            install(monkeypatch, FakeNet(nursery))
            agent, _, _ = await start_agent(nursery, on_machine(options(tmp_path / "a"), tmp_path / "none"))
            await trio.sleep(300)
            warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                        and "machine id" in r.getMessage()]
            assert warnings == [f"no machine id ({tmp_path / 'none'}: missing): the check that {tmp_path / 'a'} is "
                                f"not a copy of another machine's agent state directory is off"]
            nursery.cancel_scope.cancel()


def test_agent_options_refuse_a_bad_moved_from(tmp_path):
    with pytest.raises(ValueError, match="is not a machine id"):
        on_machine(options(tmp_path), tmp_path / "m", moved_from="not one")


# ---- join generations (an older copy on the same machine: model/names.py) ----------------------------


@hang_guard
async def test_the_join_generation_is_durable_and_a_corrupt_one_is_a_store_error(tmp_path):
    from reckon.daemon.store.sqlite_thread import StoreError

    async with await AgentStore.open(tmp_path) as store:
        assert await store.load_generation() == 0  # none yet (a new directory, or one from before)
        await store.apply([E.StoreGeneration(generation=3)])
        await store.apply([E.StoreGeneration(generation=4)])
    async with await AgentStore.open(tmp_path) as store:
        assert await store.load_generation() == 4
        await store.db.run(lambda conn: conn.execute("UPDATE meta SET value = 'x' WHERE key = 'generation'"))
        with pytest.raises(StoreError, match="meta 'generation' is not a number: 'x'"):
            await store.load_generation()
