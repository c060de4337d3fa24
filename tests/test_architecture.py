"""The layers hold: every production import points down, the two daemons never import each other,
and no modules import each other in a circle (docs/architecture.md is the map; ``LAYERS`` below
is its one table, and the doc must name every entry of it).

Every module of ``model/``, ``daemon/`` and ``reckon/`` is parsed with ``ast``: an import inside
a function or behind ``if TYPE_CHECKING`` counts (a circle of knowledge is a circle even when
Python tolerates it at run time).  Tests are not production code and are not read.  The checkers
are tested on synthetic graphs too, so a check that silently stopped biting fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# Where each part of the source tree sits, bottom (1) to top (6).  A module belongs to the longest
# entry its path starts with; an import may go to its own layer or below (never up).
LAYERS: dict[str, int] = {
    # 1. the protocol, pure (tests/model/test_purity.py keeps I/O out of it)
    "model/": 1,
    # 2. the shared parts of the I/O shell: wire codec, stores, connections, TLS, logging, metrics
    "daemon/__init__.py": 2,
    "daemon/wire.py": 2,
    "daemon/commands.py": 2,
    "daemon/refusals.py": 2,
    "daemon/runtime.py": 2,
    "daemon/listen.py": 2,
    "daemon/wsconnect.py": 2,
    "daemon/client_common.py": 2,
    "daemon/cborlite.py": 2,
    "daemon/args.py": 2,
    "daemon/durations.py": 2,
    "daemon/store/": 2,
    "daemon/ops/": 2,
    "daemon/auth/": 2,
    # 3. the two daemons, which meet only on the wire (DAEMONS)
    "daemon/controller/": 3,
    "daemon/agent/": 3,
    # 4. clients: the trio and blocking clients, `import reckon`, the command line's commands
    "reckon/": 4,
    "daemon/client.py": 4,
    "daemon/cli/": 4,
    "daemon/blocking/": 4,
    "daemon/slurm/": 4,
    "daemon/http/": 4,
    # 5. tools: benchmarks, chaos runs, the demo, doc generators, local process clusters
    "daemon/procs.py": 5,
    "daemon/cli/demo.py": 5,
    "daemon/bench/": 5,
    "daemon/chaos/": 5,
    "daemon/tools/": 5,
    # 6. the `reckon` command's entry: builds every subcommand's parser and runs the one asked for
    "daemon/cli/__main__.py": 6,
    "daemon/cli/main.py": 6,
    "daemon/cli/daemons.py": 6,
}
DAEMONS = ("daemon/controller/", "daemon/agent/")  # layer 3's two parts: neither imports the other
PACKAGES = {"model": "reckon.model", "daemon": "reckon.daemon", "reckon": "reckon"}


def layer_of(path: str, layers: dict[str, int] = LAYERS) -> tuple[str, int] | None:
    """(the table's entry, its layer) for a source path relative to the checkout, or None."""
    entries = [e for e in layers if path == e or (e.endswith("/") and path.startswith(e))]
    if not entries:
        return None
    entry = max(entries, key=len)
    return entry, layers[entry]


def module_name(path: str) -> str:
    """The installed module name of a source path: ``daemon/store/facts.py`` -> ``reckon.daemon.store.facts``."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGES[parts[0]], *parts[1:]])


def production_sources() -> dict[str, str]:
    """module name -> its path relative to the checkout, for every production module."""
    out = {}
    for top in PACKAGES:
        for file in (ROOT / top).rglob("*.py"):
            rel = file.relative_to(ROOT).as_posix()
            out[module_name(rel)] = rel
    return out


def imported_names(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``source`` imports, relative imports made absolute;
    ``from a import b`` yields both ``a`` and ``a.b`` (b may be a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            out.append((node.lineno, origin))
            out += [(node.lineno, f"{origin}.{alias.name}") for alias in node.names if alias.name != "*"]
    return out


def import_graph(sources: dict[str, str], read=lambda path: (ROOT / path).read_text()) -> dict[str, dict[str, int]]:
    """module -> {module of the project it imports: the first line that does}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in sources.items():
        edges: dict[str, int] = {}
        for line, name in imported_names(read(path), module, path.endswith("__init__.py")):
            while name and name not in sources:
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.setdefault(name, line)
        graph[module] = edges
    return graph


def wrong_way_imports(graph: dict[str, dict[str, int]], sources: dict[str, str],
                      layers: dict[str, int] = LAYERS, daemons: tuple[str, ...] = DAEMONS) -> list[str]:
    """Every import up the layers or between the two daemons, as one line each."""
    found = []
    for module, edges in sorted(graph.items()):
        here, mine = layer_of(sources[module], layers)  # type: ignore[misc]
        for target, line in sorted(edges.items()):
            there, theirs = layer_of(sources[target], layers)  # type: ignore[misc]
            where = f"{sources[module]}:{line}: imports {target}"
            if theirs > mine:
                found.append(f"{where}: up from layer {mine} ({here}) to layer {theirs} ({there})")
            elif here in daemons and there in daemons and here != there:
                found.append(f"{where}: one daemon ({here}) imports the other ({there})")
    return found


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# ---- the tree as it is ------------------------------------------------------------------------

SOURCES = production_sources()


def test_the_modules_are_found() -> None:
    assert {"reckon.model.controller", "reckon.daemon.controller.core", "reckon.daemon.agent.daemon",
            "reckon.daemon.cli.main", "reckon.daemon.store.facts", "reckon"} <= set(SOURCES)


def test_every_module_has_a_layer() -> None:
    assert [path for path in SOURCES.values() if layer_of(path) is None] == []


def test_every_table_entry_is_a_part_of_the_tree() -> None:
    """A stale entry (a module moved away) would hide where its successor belongs."""
    assert [e for e in LAYERS if not (ROOT / e).exists()] == []


def test_the_doc_names_every_entry_of_the_table() -> None:
    text = DOC.read_text()
    assert [e for e in LAYERS if f"`{e}`" not in text] == []


def test_no_import_goes_up_the_layers_or_between_the_daemons() -> None:
    assert wrong_way_imports(import_graph(SOURCES), SOURCES) == []


def test_no_import_circle() -> None:
    assert circles(import_graph(SOURCES)) == []


# ---- the checkers bite --------------------------------------------------------------------------

TOY_LAYERS = {"model/": 1, "daemon/wire.py": 2, "daemon/controller/": 3, "daemon/agent/": 3, "daemon/cli/": 4}
TOY_DAEMONS = ("daemon/controller/", "daemon/agent/")


def _toy(files: dict[str, str]) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    sources = {module_name(path): path for path in files}
    return import_graph(sources, read=files.__getitem__), sources


@pytest.mark.parametrize("source", [
    "from reckon.daemon.cli import main",
    "import reckon.daemon.cli.main",
    "from ..cli import main",
    "def later():\n    from reckon.daemon.cli.main import x",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reckon.daemon.cli.main import x",
])
def test_an_upward_import_is_found(source: str) -> None:
    graph, sources = _toy({"daemon/controller/core.py": source, "daemon/cli/main.py": "",
                           "daemon/cli/__init__.py": "", "daemon/controller/__init__.py": ""})
    found = wrong_way_imports(graph, sources, TOY_LAYERS, TOY_DAEMONS)
    assert found and found[0].startswith("daemon/controller/core.py:") and "up from layer 3" in found[-1]


def test_an_import_between_the_daemons_is_found() -> None:
    graph, sources = _toy({"daemon/agent/x.py": "from reckon.daemon.controller.lifecycle import outcome_text",
                           "daemon/controller/lifecycle.py": ""})
    assert wrong_way_imports(graph, sources, TOY_LAYERS, TOY_DAEMONS) == [
        "daemon/agent/x.py:1: imports reckon.daemon.controller.lifecycle: one daemon (daemon/agent/) "
        "imports the other (daemon/controller/)"]


def test_downward_and_sideways_imports_pass() -> None:
    graph, sources = _toy({"daemon/cli/main.py": "from reckon.daemon.controller import core\nfrom . import jobs",
                           "daemon/cli/jobs.py": "from reckon.daemon import wire\nimport reckon.model.facts",
                           "daemon/controller/core.py": "from .work import W\nfrom reckon.model.facts import F",
                           "daemon/controller/work.py": "", "daemon/wire.py": "from reckon.model import facts",
                           "model/facts.py": "x = 'from reckon.daemon.cli import main'"})
    assert wrong_way_imports(graph, sources, TOY_LAYERS, TOY_DAEMONS) == []
    assert circles(graph) == []


def test_a_circle_is_found_however_long() -> None:
    graph, _ = _toy({"model/a.py": "from reckon.model import b", "model/b.py": "from . import c",
                     "model/c.py": "def f():\n    from reckon.model.a import x", "model/d.py": "from . import a"})
    assert circles(graph) == [["reckon.model.a", "reckon.model.b", "reckon.model.c"]]


def test_a_module_outside_the_table_has_no_layer() -> None:
    assert layer_of("daemon/newthing.py") is None
    assert layer_of("daemon/cli/main.py") == ("daemon/cli/main.py", 6)
    assert layer_of("daemon/cli/jobs.py") == ("daemon/cli/", 4)


def private_imports(sources: dict[str, str], read=lambda path: (ROOT / path).read_text()) -> list[str]:
    """``from module import _name`` of another module of the project: a reach into its private members
    (a name another module needs is part of its interface and says so by having no underscore)."""
    found = []
    for module, path in sources.items():
        for node in ast.walk(ast.parse(read(path))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("reckon")):
                found += [f"{path}:{node.lineno}: {alias.name} from {node.module or '.'}"
                          for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(SOURCES) == []


def test_a_private_import_is_found() -> None:
    files = {"reckon.daemon.a": "daemon/a.py", "reckon.daemon.b": "daemon/b.py"}
    text = {"daemon/a.py": "from reckon.daemon.b import Public, _hidden\n", "daemon/b.py": "from . import _x\n"}
    assert private_imports(files, read=text.__getitem__) == [
        "daemon/a.py:1: _hidden from reckon.daemon.b", "daemon/b.py:1: _x from ."]
