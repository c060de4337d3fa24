"""The command line's entry point stays light (issue #10), and every option says what it does."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from reckon.daemon.cli.main import AGENT_NAME, MAX_SLOTS, build_parser
from reckon.model.jobs import MAX_SLOTS as MODEL_MAX_SLOTS

HEAVY = ("trio", "trio_websocket", "wsproto", "h11", "reckon.model.controller", "reckon.model.messages", "reckon.daemon.controller",
         "reckon.daemon.agent", "reckon.daemon.client", "reckon.daemon.store")

# What the short-lived commands must not import (issue #21: a command's cost is its interpreter's
# start and its imports).  Held as a list of modules, not a time: a time is the machine's.
# `reckon submit` pays argparse, which brings re, enum and functools; the shared client path below
# it (the blocking client, the connection settings, the spec's wire dict, the client's CBOR) does
# not, and the Slurm-style commands build on that path alone.
SLOW = ("reckon.model", "dataclasses", "inspect", "typing", "json", "socket", "selectors", "urllib", "ipaddress",
        "cbor2", "datetime", "ssl", "hashlib", "base64", "pathlib", "shutil", "subprocess", "importlib.metadata",
        "encodings.idna", "unicodedata", "ctypes", "decimal")
SHARED_PATH_ALSO = ("re", "enum", "argparse", "functools", "collections", "gettext", "locale", "warnings")

# Each probe prints the modules it imported (those already loaded when it started, by site or an
# editable install's finder, are not its own).
PROBE = """
import json as _j, sys
_before = set(sys.modules)
from reckon.daemon.cli.main import main
status = main(["submit", "--controller", "ws://127.0.0.1:1", "--timeout", "5", "--mem", "1G", "--gres", "lic:1",
               "--time", "10m", "--", "true"])
print(_j.dumps({"status": status, "modules": sorted(sys.modules), "new": sorted(set(sys.modules) - _before)}))
"""

SHARED_PROBE = """
import sys
_before = set(sys.modules)
from reckon.daemon.blocking.client import SyncClient, call
from reckon.daemon.blocking.spec import job_spec
from reckon.daemon.client_common import ClientError, resolve_auth, resolve_controller
spec = job_spec(["true"], cwd="/tmp", mem="1G", gres=["lic:1"], time_limit=60.0, after=["1"])
try:
    call(resolve_controller("ws://127.0.0.1:1"), resolve_auth(None, None, None), "submit", spec=spec, timeout=5)
except ClientError as exc:
    status = str(exc)
new = sorted(set(sys.modules) - _before)
import json
print(json.dumps({"status": status, "new": new}))
"""


def _imports(probe: str) -> dict:
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    return {**json.loads(out.stdout), "stderr": out.stderr}


def _matching(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_a_client_command_imports_no_trio_no_model_controller_no_server():
    # A whole submit (spec checked, connection attempted: port 1 refuses at once).
    result = _imports(PROBE)
    assert result["status"] == 1 and "unreachable" in result["stderr"], result
    assert _matching(result["modules"], HEAVY) == []
    assert _matching(result["new"], SLOW) == []


def test_the_shared_client_path_imports_next_to_nothing():
    # What sbatch, squeue, sacct and import reckon build on: a spec, the settings, one call.
    result = _imports(SHARED_PROBE)
    assert "unreachable" in result["status"], result
    assert _matching(result["new"], HEAVY + SLOW + SHARED_PATH_ALSO) == []


def test_import_reckon_is_light():
    result = _imports("import sys, json\n_b = set(sys.modules)\nimport reckon\nreckon.Client\nreckon.Job\n"
                      "reckon.ReckonError\nprint(json.dumps({'new': sorted(set(sys.modules) - _b)}))")
    assert _matching(result["new"], HEAVY + SLOW + SHARED_PATH_ALSO) == []


def _actions(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_option_has_help():
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, a in _actions(build_parser(), "reckon")
               if not a.help]
    assert missing == []


def test_the_cli_limits_match_the_model():
    assert MAX_SLOTS == MODEL_MAX_SLOTS
    from reckon.daemon.cli.main import MAX_PAGE_ENTRIES
    from reckon.model.messages import MAX_PAGE_ENTRIES as MODEL_MAX_PAGE

    assert MAX_PAGE_ENTRIES == MODEL_MAX_PAGE
    assert AGENT_NAME.fullmatch("node-1.example_com") and not AGENT_NAME.fullmatch("-x")
    assert AGENT_NAME.fullmatch("n" * 100) and not AGENT_NAME.fullmatch("n" * 101)


def test_nodes_since_shows_the_date_for_a_state_older_than_today():
    import time

    from reckon.daemon.cli.jobs import _since

    now = time.mktime((2026, 11, 30, 12, 0, 0, 0, 0, -1))
    assert _since(now - 3600, now) == "11:00:00"
    assert _since(now - 3 * 86400, now) == "2026-11-27 12:00"
    assert _since(None, now) == "-"
