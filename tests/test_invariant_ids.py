"""docs/invariants.md and the tests name the same invariant IDs.

Fails when an ID defined in the doc (a ``### INV-...`` heading) is named by no
test file, when a test names an ``INV-...`` ID the doc does not define, when
the doc mentions an undefined ID, or when a non-liveness ID has no
``ReckonMachine.inv_<id>`` invariant method (``INV-SIM-*`` IDs are properties
of the real daemons: tests/sim checks them, and must name each).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "invariants.md"
ID = re.compile(r"\bINV-[A-Z0-9]+(?:-[A-Z0-9]+)*")
HEADING = re.compile(r"^### (INV-[A-Z0-9]+(?:-[A-Z0-9]+)*)\s*$", re.M)


def doc_ids() -> list[str]:
    return HEADING.findall(DOC.read_text())


def _test_files() -> dict[Path, set[str]]:
    here = Path(__file__).resolve()
    return {path: set(ID.findall(path.read_text()))
            for path in sorted((ROOT / "tests").rglob("*.py")) if path.resolve() != here}


def test_doc_ids_are_well_formed_and_unique():
    ids = doc_ids()
    assert ids, "docs/invariants.md defines no invariant"
    assert len(ids) == len(set(ids)), f"IDs defined twice: {sorted({i for i in ids if ids.count(i) > 1})}"
    mentioned = set(ID.findall(DOC.read_text()))
    assert mentioned <= set(ids), f"the doc mentions undefined IDs {sorted(mentioned - set(ids))}"


def test_every_documented_invariant_is_checked_by_a_test():
    used = set().union(*_test_files().values())
    unused = sorted(set(doc_ids()) - used)
    assert not unused, f"documented but named by no test: {unused}"


def test_tests_name_only_documented_invariants():
    known = set(doc_ids())
    unknown = {str(path.relative_to(ROOT)): sorted(ids - known) for path, ids in _test_files().items() if ids - known}
    assert not unknown, f"tests name IDs missing from docs/invariants.md: {unknown}"


def test_each_simulation_invariant_is_named_by_the_simulation():
    sim = set().union(*(ids for path, ids in _test_files().items() if "sim" in path.relative_to(ROOT).parts))
    missing = sorted(i for i in doc_ids() if i.startswith("INV-SIM-") and i not in sim)
    assert not missing, f"INV-SIM-* IDs no file of tests/sim names: {missing}"


def test_each_safety_invariant_has_its_method():
    source = (ROOT / "tests" / "model" / "test_stateful.py").read_text()
    leadership = (ROOT / "tests" / "model" / "test_leadership_stateful.py").read_text()
    for inv_id in doc_ids():
        if inv_id.startswith("INV-LIVENESS-"):
            continue  # checked in teardown, not after each step
        if inv_id.startswith("INV-SIM-"):
            continue  # a property of the real daemons: checked by the simulation (tests/sim), not the model
        method = "inv_" + inv_id[len("INV-"):].lower().replace("-", "_")
        pattern = rf"@invariant\(\)\n    def {method}\(self\):\n        \"\"\"{re.escape(inv_id)}:"
        if inv_id.startswith("INV-HA-"):  # leadership: its own machine (tests/model/test_leadership_stateful.py)
            found = re.search(pattern, leadership) is not None
            assert found, f"{inv_id} has no `@invariant() def {method}` in LeadershipMachine"
            continue
        found = re.search(pattern, source) is not None
        assert found, f"{inv_id} has no `@invariant() def {method}` whose docstring starts with its ID"
