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

PROBE = """
import json, sys
from reckon.daemon.cli.main import main
status = main(["submit", "--controller", "ws://127.0.0.1:1", "--timeout", "5", "--", "true"])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def test_a_client_command_imports_no_trio_no_model_controller_no_server():
    # A whole submit (spec checked, connection attempted: port 1 refuses at once).
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    result = json.loads(out.stdout)
    assert result["status"] == 1 and "unreachable" in out.stderr, out
    heavy = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], heavy


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
