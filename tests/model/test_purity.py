"""``model/`` stays pure: no I/O library, no clock, no randomness, nothing from ``daemon``.

The check parses every module with ``ast`` (so an import hidden in a function
or behind ``if TYPE_CHECKING`` counts too) and is itself tested on synthetic
sources, so a checker that silently stopped biting would fail here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from reckon import model
MODEL_DIR = Path(model.__file__).resolve().parent

# The modules the design names, plus a few more that can only mean I/O, threads or randomness.
BANNED = frozenset({
    "trio", "trio_websocket", "cbor2", "sqlite3", "socket", "time", "random", "asyncio", "daemon",
    "secrets", "uuid", "datetime", "subprocess", "threading", "selectors",
})


def _root(name: str) -> str:
    if name.startswith("reckon."):  # the installed name: reckon.daemon is the shell
        name = name[len("reckon."):]
    return name.split(".", 1)[0]


def impure_imports(source: str, filename: str = "<source>") -> list[str]:
    """Every banned import in ``source``, as ``"file:line: what"`` strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names = [node.module]
            elif node.level >= 2:
                # Climbing out of the model package reaches the project root: ``from ..daemon import x``.
                names = [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in ("__import__", "import_module"):
                names = [node.args[0].value]
        for name in names:
            if _root(name) in BANNED:
                found.append(f"{filename}:{node.lineno}: {name}")
    return found


def _model_files() -> list[Path]:
    return sorted(MODEL_DIR.glob("*.py"))


def test_model_modules_are_found() -> None:
    names = {p.name for p in _model_files()}
    assert {"controller.py", "agent.py", "state.py", "facts.py", "messages.py", "events.py", "resync.py",
            "scheduler.py", "jobs.py"} <= names


@pytest.mark.parametrize("path", _model_files(), ids=lambda p: p.name)
def test_model_module_imports_nothing_impure(path: Path) -> None:
    assert impure_imports(path.read_text(), str(path)) == []


def test_importing_the_model_loads_no_impure_module() -> None:
    """Transitively too: a fresh interpreter imports every model module and reports what got loaded."""
    modules = ", ".join(f"reckon.model.{p.stem}" for p in _model_files() if p.stem != "__init__")
    code = (
        "import sys; base = set(sys.modules); "
        f"import {modules}; "
        f"print(sorted(m for m in set(sys.modules) - base if m.split('.')[0] in {sorted(BANNED)!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("source", [
    "import time",
    "import time as clock",
    "from time import monotonic",
    "import os, random",
    "import trio",
    "from trio import open_nursery",
    "import trio_websocket",
    "from cbor2 import dumps",
    "import sqlite3",
    "import socket",
    "import asyncio.events",
    "import daemon",
    "import reckon.daemon.wire",
    "from reckon.daemon.wire import encode",
    "from ..daemon import wire",
    "from .. import daemon",
    "def later():\n    import time\n    return time.time()",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trio",
    "try:\n    import cbor2\nexcept ImportError:\n    pass",
    "clock = __import__('time')",
    "import importlib\nrng = importlib.import_module('random')",
    "import secrets",
])
def test_checker_flags_impure_source(source: str) -> None:
    assert impure_imports(source) != []


def test_checker_reports_file_and_line() -> None:
    assert impure_imports("import enum\n\nimport time\n", "model/x.py") == ["model/x.py:3: time"]


@pytest.mark.parametrize("source", [
    "import enum\nimport hashlib\nfrom dataclasses import dataclass",
    "from . import facts as F\nfrom .jobs import JobState\nfrom ._check import check_int",
    "import timeit_helpers_that_do_not_exist as t",  # a name that merely starts with a banned one
    "from .time_utils import x",  # a sibling module named like one
    "x = 'import time'",
])
def test_checker_accepts_pure_source(source: str) -> None:
    assert impure_imports(source) == []
