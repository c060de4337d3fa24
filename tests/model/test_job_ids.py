"""Issue #9 gap 1 in the model: job ids continue above the id mark (INV-JOB-ID-UNIQUE)."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import state as S
from reckon.model.controller import Controller
from reckon.model.errors import LocalProtocolError
from reckon.model.id_marks import ID_BLOCK

from tests.model.harness import facts_of, spec

CLUSTER = "c1"


def _new() -> tuple[Controller, list[F.Fact]]:
    ctrl = Controller()
    created = F.ClusterCreated(cluster=CLUSTER)
    S.apply(ctrl.state, created)
    return ctrl, [created]


def _submit(ctrl: Controller, log: list[F.Fact]) -> str:
    facts = facts_of(ctrl.handle(E.SubmitJob(spec=spec(), now=1.0, uid="00000000000000aa")))
    log.extend(facts)
    return next(f.job for f in facts if isinstance(f, F.JobSubmitted))


def _start(log: list[F.Fact], mark: int | None, cluster: str = CLUSTER) -> tuple[Controller, list[E.Command]]:
    ctrl = Controller.from_log(list(log))
    idm = E.IdMark(cluster=cluster, upto=mark) if mark is not None else None
    cmds = ctrl.handle(E.ControllerStarted(now=2.0, grace=0.0, id_mark=idm))
    log.extend(facts_of(cmds))
    return ctrl, cmds


def _warnings(cmds: list[E.Command]) -> list[str]:
    return [c.message for c in cmds if isinstance(c, E.Warn)]


def test_the_first_submit_raises_the_mark_a_block_ahead_before_its_job():
    ctrl, log = _new()
    facts = facts_of(ctrl.handle(E.SubmitJob(spec=spec(), now=1.0)))
    assert facts == [F.IdMarkRaised(upto=ID_BLOCK), facts[1]] and isinstance(facts[1], F.JobSubmitted)
    assert not [f for f in facts_of(ctrl.handle(E.SubmitJob(spec=spec(), now=1.0))) if isinstance(f, F.IdMarkRaised)]


def test_a_restored_older_state_continues_above_the_file_mark_and_says_so_once():
    ctrl, log = _new()
    for _ in range(3):
        _submit(ctrl, log)
    backup = list(log)
    ctrl, cmds = _start(log, mark=ID_BLOCK)  # a plain restart: the rest of the block is skipped, silently
    assert _warnings(cmds) == [] and _submit(ctrl, log) == str(ID_BLOCK + 1)
    file_mark = ctrl.state.id_mark
    ctrl, cmds = _start(backup, mark=file_mark)  # the older copy, the file kept
    assert _warnings(cmds) == [f"controller state is older than its id mark: restored from a backup? "
                               f"job ids continue from {file_mark + 1}"]
    assert _submit(ctrl, backup) == str(file_mark + 1)
    assert S.replay(list(backup)).digest() == ctrl.state.digest()  # the decision is in the log: replay agrees


def test_without_the_file_a_state_that_recorded_a_mark_is_named_and_continues_above_it():
    ctrl, log = _new()
    _submit(ctrl, log)
    ctrl, cmds = _start(log, mark=None)
    [warning] = _warnings(cmds)
    assert warning.startswith("no id mark file") and f"job ids continue from {ID_BLOCK + 1}" in warning
    assert _submit(ctrl, log) == str(ID_BLOCK + 1)


def test_a_state_from_before_the_mark_starts_without_a_warning():
    ctrl, log = _new()
    log.append(F.JobSubmitted(job="1", spec=spec(), submitted_at=1.0))  # a log written before id marks
    ctrl, cmds = _start(log, mark=None)
    assert _warnings(cmds) == [] and _submit(ctrl, log) == "2"


def test_a_mark_of_another_history_is_refused_and_changes_nothing():
    ctrl, log = _new()
    _submit(ctrl, log)
    ctrl = Controller.from_log(list(log))
    before = ctrl.state.digest()
    with pytest.raises(LocalProtocolError, match="belongs to cluster other.*mixes two histories"):
        ctrl.handle(E.ControllerStarted(now=2.0, grace=0.0, id_mark=E.IdMark(cluster="other", upto=9000)))
    assert ctrl.state.digest() == before and not ctrl.started


def test_a_new_history_ignores_the_mark_of_an_old_one():
    ctrl, log = _new()
    ctrl, cmds = _start(log, mark=5000, cluster="old")
    assert _warnings(cmds) == [] and _submit(ctrl, log) == "1"


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        E.IdMark(cluster="c1", upto=-1)
    with pytest.raises(ValueError):
        F.IdMarkRaised(upto=0)
    ctrl, log = _new()
    _submit(ctrl, log)
    with pytest.raises(LocalProtocolError):
        S.apply(ctrl.state, F.IdMarkRaised(upto=ID_BLOCK))  # not above the mark
    assert F.decode(F.encode(F.IdMarkRaised(upto=7))) == F.IdMarkRaised(upto=7)


def test_snapshot_keeps_the_mark_and_older_snapshots_restore_without_one():
    ctrl, log = _new()
    _submit(ctrl, log)
    data = S.snapshot(ctrl.state)
    assert S.restore(data).id_mark == ID_BLOCK
    old = dict(data, v=2)
    del old["id_mark"]
    assert S.restore(old).id_mark == 0


def test_an_array_raises_the_mark_over_all_its_ids_before_its_first_job():
    """Found in review: an array's submit never raised the mark, so after a 1500-job array the
    file still said 1000 and a restored older database could issue ids 1001-1501 again."""
    from reckon.model.arrays import parse_array

    ctrl, log = _new()
    _submit(ctrl, log)
    facts = facts_of(ctrl.handle(E.SubmitArray(spec=spec(), array=parse_array("1-1500"), now=1.0)))
    assert isinstance(facts[0], F.IdMarkRaised) and facts[0].upto >= 1501
    assert all(isinstance(f, F.JobSubmitted) for f in facts[1:]) and len(facts) == 1501
    assert ctrl.state.id_mark >= ctrl.state.next_job - 1


def test_a_store_without_a_mark_file_starts_without_the_missing_file_warning():
    """PostgreSQL keeps no mark file (its backups are restored whole): every takeover warned
    "no id mark file, although the controller state recorded one", and skipped the rest of
    the block (ids jumped by 1000): the log is the one history there, ids continue after it."""
    ctrl, log = _new()
    _submit(ctrl, log)
    ctrl = Controller.from_log(list(log))
    cmds = ctrl.handle(E.ControllerStarted(now=2.0, grace=0.0, mark_file=False))
    assert _warnings(cmds) == [] and _submit(ctrl, log) == "2"
    assert not any(isinstance(f, F.JobIdsReserved) for f in facts_of(cmds))
    with pytest.raises(ValueError, match="comes from a mark file"):
        E.ControllerStarted(now=2.0, grace=0.0, mark_file=False, id_mark=E.IdMark(cluster=CLUSTER, upto=1))
