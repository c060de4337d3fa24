"""Issue #9 gap 1 in the real daemon: job ids are never issued again after an
older copy of ``controller.db`` is restored, because the id mark file next to
it is kept (INV-JOB-ID-UNIQUE).  A real SQLite file copied back, real restarts.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import trio

from reckon.daemon.controller.server import ControllerOptions, serve_controller
from reckon.daemon.store.idmark import ID_MARK_FILE
from reckon.daemon.store.statelock import WrongStateDir
from reckon.model.id_marks import ID_BLOCK
from tests.daemon.trio_harness import controller


def _copy_db(src: Path, dst: Path) -> None:
    """What an operator backs up and restores: controller.db* (database, WAL, shared memory)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in dst.glob("controller.db*"):
        path.unlink()
    for path in src.glob("controller.db*"):
        shutil.copy2(path, dst / path.name)


async def _submit(state_dir: Path, n: int) -> list[str]:
    async with controller(state_dir) as rig:
        return [await rig.submit() for _ in range(n)]


def _warnings(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


async def test_ids_are_not_issued_again_after_an_older_database_is_restored(tmp_path, autojump_clock, caplog):
    state, backup = tmp_path / "controller", tmp_path / "backup"
    first = await _submit(state, 3)
    assert first == ["1", "2", "3"]
    assert json.loads((state / ID_MARK_FILE).read_text())["upto"] == ID_BLOCK
    _copy_db(state, backup)  # the operator's backup, taken here

    second = await _submit(state, 2)  # a restart skips the rest of the block: the copy may be older
    assert second == [str(ID_BLOCK + 1), str(ID_BLOCK + 2)]

    _copy_db(backup, state)  # restore the older controller.db; the id mark file stays
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reckon.controller"):
        third = await _submit(state, 2)
    issued = first + second + third
    assert len(set(issued)) == len(issued), f"ids issued again: {issued}"
    assert third == [str(2 * ID_BLOCK + 1), str(2 * ID_BLOCK + 2)]
    said = _warnings(caplog, "controller state is older than its id mark")
    assert said == [f"controller state is older than its id mark: restored from a backup? "
                    f"job ids continue from {2 * ID_BLOCK + 1}"]


async def test_a_restore_within_one_block_is_covered_too(tmp_path, autojump_clock):
    """The backup and the ids issued after it share one block: the mark file says nothing new,
    but a start always continues above the mark."""
    state, backup = tmp_path / "controller", tmp_path / "backup"
    first = await _submit(state, 1)
    _copy_db(state, backup)
    async with controller(state) as rig:  # ids after the backup, still in a block the copy's mark covers?
        later = [await rig.submit()]
    _copy_db(backup, state)
    again = await _submit(state, 1)
    assert len({*first, *later, *again}) == 3, (first, later, again)


async def test_a_missing_id_mark_file_is_named_and_ids_continue_above_the_databases_mark(
        tmp_path, autojump_clock, caplog):
    state = tmp_path / "controller"
    first = await _submit(state, 2)
    (state / ID_MARK_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="reckon.controller"):
        again = await _submit(state, 1)
    assert again == [str(ID_BLOCK + 1)] and not set(first) & set(again)
    assert len(_warnings(caplog, "no id mark file")) == 1


async def test_an_id_mark_file_of_another_history_stops_the_start_and_changes_nothing(tmp_path):
    # The real clock: serve_controller's own store waits on its database thread.
    state = tmp_path / "controller"
    await _submit(state, 1)
    (state / ID_MARK_FILE).write_text(json.dumps({"cluster": "0ther", "upto": 5000}))
    before = sorted((p.name, p.stat().st_size) for p in state.glob("controller.db*"))
    with pytest.raises(BaseException) as info:
        with trio.fail_after(60):  # hang guard: without the check it would serve
            await serve_controller(ControllerOptions(state_dir=state, port=0))
    exc = info.value
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    assert isinstance(exc, WrongStateDir), repr(info.value)
    assert "belongs to cluster 0ther" in str(exc) and "mixes two histories" in str(exc)
    assert json.loads((state / ID_MARK_FILE).read_text())["upto"] == 5000  # left as it was
    assert sorted((p.name, p.stat().st_size) for p in state.glob("controller.db*")) == before


async def test_a_new_history_ignores_the_mark_of_an_old_one(tmp_path, autojump_clock):
    """Starting afresh (controller.db removed, the mark file left behind): ids start at 1 again,
    in a new history that agents never mix with the old one."""
    state = tmp_path / "controller"
    await _submit(state, 1)
    for path in state.glob("controller.db*"):
        path.unlink()
    (state / ID_MARK_FILE).write_text(json.dumps({"cluster": "01d", "upto": 1000}))  # the old history's
    assert await _submit(state, 1) == ["1"]


async def test_an_online_backup_restored_is_recognised_by_where_its_log_ends(tmp_path, autojump_clock, caplog):
    """A copy of controller.db* taken while the controller runs, its ids in the current block: the
    mark's ids equal the copy's, so only where the log ends tells it from the file.  The mark file
    records that with each commit (before the batch's effects), and the copy's log ends before it."""
    state, backup = tmp_path / "controller", tmp_path / "backup"
    async with controller(state) as rig:
        await rig.submit()
        _copy_db(state, backup)  # online: the controller runs on
        copied_upto = json.loads((state / ID_MARK_FILE).read_text())["facts"]
        await rig.submit()  # the same block of ids: the mark's ids do not move
        mark = json.loads((state / ID_MARK_FILE).read_text())
        assert mark["facts"] == rig.daemon.store.last_seq > copied_upto
    _copy_db(backup, state)  # restored with no start in between (a start would raise the mark)
    with caplog.at_level(logging.INFO, logger="reckon.controller"):
        caplog.clear()
        async with controller(state) as rig:
            assert rig.daemon.model.start_gate is not None
    said = _warnings(caplog, "older than its id mark")
    assert len(said) == 1 and f"its log ends at fact {copied_upto}, but the controller had recorded facts up to" \
        in said[0], said
    assert any("holding dispatch: for" in r.getMessage() and "(the state is older than its id mark)" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


async def test_a_plain_restart_is_not_taken_for_a_restored_copy(tmp_path, autojump_clock, caplog):
    """The mark file's log position is written with every commit: a stop and start agree with it."""
    state = tmp_path / "controller"
    await _submit(state, 2)
    with caplog.at_level(logging.WARNING, logger="reckon.controller"):
        caplog.clear()
        async with controller(state) as rig:
            assert json.loads((state / ID_MARK_FILE).read_text())["facts"] == rig.daemon.store.last_seq
    assert _warnings(caplog, "older than its id mark") == []


async def test_a_restart_during_a_restored_copys_hold_holds_for_the_whole_grace_again(tmp_path, autojump_clock, caplog):
    """The first start on a restored copy raises the mark and grows the log, so the copy no longer
    looks older: a restart before its whole-grace hold ended (an operator raising --rejoin-grace, a
    crash) would hold only until the agents the copy knows are back, and a job that ran on another
    agent since the copy was taken would run again (tests/sim: the regression tests named
    ..._restart_during_the_hold_...).  The file says ``hold`` while it lasts, and no more after."""
    state, backup = tmp_path / "controller", tmp_path / "backup"
    async with controller(state) as rig:
        await rig.submit()
        _copy_db(state, backup)
        await rig.submit()
    _copy_db(backup, state)
    async with controller(state) as rig:
        assert rig.daemon.model.start_gate is not None and rig.daemon.model.start_gate.restored
        assert json.loads((state / ID_MARK_FILE).read_text()).get("hold") is True
    with caplog.at_level(logging.WARNING, logger="reckon.controller"):
        caplog.clear()
        async with controller(state) as rig:
            gate = rig.daemon.model.start_gate
            assert gate is not None and gate.restored and not gate.known
            assert _warnings(caplog, "the previous start held dispatch for a restored copy") != []
            await trio.sleep(gate.grace + 5)  # the grace ends: a batch with no facts clears the file's hold
            assert rig.daemon.model.start_gate is None
            assert "hold" not in json.loads((state / ID_MARK_FILE).read_text())
    async with controller(state) as rig:
        assert rig.daemon.model.start_gate is None or not rig.daemon.model.start_gate.restored


def test_an_id_mark_that_cannot_be_written_is_one_named_error(tmp_path):
    """A full disk (here: the temporary file's name taken by a directory) stops the controller with one
    line the CLI prints, not a traceback; the old mark stays."""
    from reckon.daemon.store.idmark import read_id_mark, write_id_mark
    from reckon.daemon.store.sqlite_thread import StoreError
    from reckon.model.events import IdMark

    write_id_mark(tmp_path, IdMark(cluster="c1", upto=1000, facts=3))
    (tmp_path / (ID_MARK_FILE + ".tmp")).mkdir()
    with pytest.raises(StoreError, match=r"id-mark: cannot write the id mark file: Is a directory \(a full disk\?\)"):
        write_id_mark(tmp_path, IdMark(cluster="c1", upto=1000, facts=4))
    assert read_id_mark(tmp_path) == IdMark(cluster="c1", upto=1000, facts=3)
