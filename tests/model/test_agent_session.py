"""The controller's view of an agent (model/session.py): a machine with one table, like the job,
round and leadership machines; a missing transition raises and changes nothing, and the
controller moves every session only through it.  Also the structure around the handlers
(issue #19): no handler module imports the controller."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path

import pytest

from reckon.model import controller as C
from reckon.model.agent import SessionState
from reckon.model.controller import ControllerConfig
from reckon.model.errors import LocalProtocolError, ModelCorrupted
from reckon.model.jobs import JobState
from reckon.model.nodes import NodeState
from reckon.model.resync import ResyncRound
from reckon.model.session import AGENT_SESSION_TRANSITIONS, AgentSession, AgentSessionEvent, AgentSessionState

from tests.model.harness import Harness

S = AgentSessionState
MODEL = Path(C.__file__).resolve().parent


def _in(state: AgentSessionState) -> AgentSession:
    """A session in ``state`` with the fields that state implies."""
    session = AgentSession(name="a1", state=state)
    if state in (S.CONNECTED, S.RECONCILING):
        session.conn = 7
    if state is S.RECONCILING:
        session.round = ResyncRound(agent="a1", token=b"t" * 16, queried={}, deadline=1.0)
    assert session.consistency() is None
    return session


_MOVES = {
    AgentSessionEvent.JOIN: lambda s: s.join(8, 5.0),
    AgentSessionEvent.ARM_ROUND: lambda s: s.arm(ResyncRound(agent="a1", token=b"u" * 16, queried={}, deadline=2.0)),
    AgentSessionEvent.END_ROUND: lambda s: s.end_round(),
    AgentSessionEvent.DROP: lambda s: s.drop(),
    AgentSessionEvent.LOSE: lambda s: s.lose(),
}
ALL_PAIRS = list(itertools.product(AgentSessionState, AgentSessionEvent))


@pytest.mark.parametrize("state,event", [p for p in ALL_PAIRS if p not in AGENT_SESSION_TRANSITIONS],
                         ids=lambda x: x.value)
def test_a_missing_transition_raises_and_changes_nothing(state, event) -> None:
    session = _in(state)
    before = dataclasses.replace(session)
    with pytest.raises(LocalProtocolError, match=f"session event {event.value} not allowed when {state.value}"):
        _MOVES[event](session)
    assert session == before


@pytest.mark.parametrize("state,event", list(AGENT_SESSION_TRANSITIONS), ids=lambda x: x.value)
def test_every_transition_lands_where_the_table_says_with_its_fields(state, event) -> None:
    session = _in(state)
    _MOVES[event](session)
    assert session.state is AGENT_SESSION_TRANSITIONS[(state, event)]
    assert session.consistency() is None


def test_the_consistency_check_sees_a_state_its_fields_contradict() -> None:
    assert "connected with connection None" in (AgentSession(name="a1", state=S.CONNECTED).consistency() or "")
    assert "reconciling with round None" in (AgentSession(name="a1", state=S.RECONCILING, conn=3).consistency() or "")
    assert AgentSession(name="a1", conn=3).consistency() is not None  # DISCONNECTED with a connection


def test_the_controller_moves_a_session_through_every_state() -> None:
    h = Harness(controller_config=ControllerConfig(lost_after=10.0))
    h.connect("a1")
    h.deliver_to_controller("a1")  # the Join: nothing placed there, no round
    session = h.controller.sessions["a1"]
    assert session.state is S.CONNECTED and h.controller.node_state("a1") is NodeState.IDLE
    h.pump()
    [job] = h.submit()
    h.dispatch(job, "a1")
    h.pump()
    h.disconnect("a1")
    assert session.state is S.DISCONNECTED and h.controller.node_state("a1") is NodeState.DISCONNECTED
    h.connect("a1")
    h.deliver_to_controller("a1")  # a job placed there: the join arms a round
    assert session.state is S.RECONCILING and h.controller.node_state("a1") is NodeState.RECONCILING
    h.pump()
    assert session.state is S.CONNECTED and h.controller.node_state("a1") is NodeState.MIXED
    h.disconnect("a1")
    h.now += 11.0
    h.tick_controller()
    assert session.state is S.LOST and h.controller.node_state("a1") is NodeState.LOST
    assert h.job(job).state is JobState.PENDING  # lost: requeued
    h.join("a1")
    assert session.state is S.CONNECTED and session.consistency() is None


# ---- structure ----------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """Every model module ``path`` imports (TYPE_CHECKING blocks included), by its name in model/."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names.update([node.module] if node.module else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reckon.model"):
            names.add(node.module.removeprefix("reckon.model").lstrip("."))
            names.update(alias.name for alias in node.names if node.module == "reckon.model")
        elif isinstance(node, ast.Import):
            names.update(a.name.removeprefix("reckon.model.") for a in node.names if a.name.startswith("reckon.model."))
    return names


def test_no_model_module_but_the_controller_imports_a_handler_or_the_controller() -> None:
    handler_modules = {f.__module__.rsplit(".", 1)[1] for f in (*C.HANDLERS.values(), *C.POST_HANDLE)}
    handler_modules.discard("controller")  # its own hooks
    assert {"connections", "reports", "job_ops", "batches", "nodes", "startup"} <= handler_modules
    for path in sorted(MODEL.glob("*.py")):
        if path.stem == "controller":
            continue
        assert "controller" not in _imports(path), f"model/{path.name} imports the controller"
        assert not _imports(path) & handler_modules, f"model/{path.name} imports a handler module"


def test_the_structure_check_bites(tmp_path) -> None:
    """The same check on a handler that types against the Controller, as the handlers did, and on
    one that calls another handler module (what they share lives below them: agent_links, id_marks)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .controller import Controller\n")
    assert "controller" in _imports(bad)
    bad.write_text("from reckon.model import controller\n")
    assert "controller" in _imports(bad)
    bad.write_text("from . import connections\nfrom .startup import mark_for_submit\n")
    assert {"connections", "startup"} <= _imports(bad)


def test_no_node_or_session_state_is_compared_as_a_string() -> None:
    """The states are Enums: neither the model nor the daemons that hold it compare a value with a
    state's text (clients reading ``reckon nodes --json`` compare the printed text).  The agent's
    session too: its daemon compared ``model.session.value`` with ``"operating"``."""
    controller_texts = {s.value for s in NodeState} | {s.value for s in AgentSessionState}
    agent_texts = {s.value for s in SessionState}
    root = MODEL.parent
    found = []
    for paths, texts in (
            ([*MODEL.glob("*.py"), *(root / "daemon" / "controller").rglob("*.py")], controller_texts | agent_texts),
            ((root / "daemon" / "agent").rglob("*.py"), agent_texts)):
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    for side in (node.left, *node.comparators):
                        consts = side.elts if isinstance(side, (ast.Tuple, ast.Set, ast.List)) else [side]
                        found += [f"{path.relative_to(root)}:{node.lineno}" for c in consts
                                  if isinstance(c, ast.Constant) and c.value in texts]
    assert found == []


def test_node_states_keep_the_names_the_cli_shows() -> None:
    assert [s.value for s in NodeState] == ["LOST", "DISCONNECTED", "RECONCILING", "DRAINING", "DRAINED", "IDLE",
                                            "MIXED", "BUSY"]


# ---- Controller.validate_state: the volatile view agrees with itself -------------------------------


def _joined() -> Harness:
    h = Harness()
    h.join("a1")
    h.controller.validate_state()  # a real run: nothing to report
    return h


def test_validate_state_sees_a_session_whose_fields_contradict_its_state() -> None:
    h = _joined()
    h.controller.sessions["a1"].conn = None
    with pytest.raises(ModelCorrupted, match="a1: connected with connection None"):
        h.controller.validate_state()


def test_validate_state_sees_a_connection_index_that_disagrees_with_the_sessions() -> None:
    h = _joined()
    conn = h.controller.sessions["a1"].conn
    h.controller.conns[conn + 100] = "a1"
    with pytest.raises(ModelCorrupted, match=f"connection {conn + 100} indexed for a1"):
        h.controller.validate_state()
    del h.controller.conns[conn + 100]
    del h.controller.conns[conn]
    with pytest.raises(ModelCorrupted, match=f"connection {conn} is indexed as None"):
        h.controller.validate_state()
