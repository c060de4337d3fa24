"""Options the command line refuses rather than misreads: abbreviations, and ``--ca`` without TLS."""

from __future__ import annotations

import argparse
import logging
import types

import pytest

from reckon.daemon.cli import daemons
from reckon.daemon.cli.main import build_parser, main, parse


def _parsers(parser: argparse.ArgumentParser, path: str = "reckon"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_an_abbreviated_option_is_an_error_not_the_longer_option(capsys):
    """``--slot`` used to be taken as ``--slots`` (argparse's prefix matching)."""
    with pytest.raises(SystemExit) as exit_:
        parse(["submit", "--slot", "2", "--", "true"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --slot" in capsys.readouterr().err
    assert parse(["submit", "--slots", "2", "--", "true"]).slots == 2


def test_no_parser_allows_abbreviations():
    allowing = [path for path, parser in _parsers(build_parser()) if parser.allow_abbrev]
    assert allowing == []


@pytest.fixture
def agent_start(monkeypatch):
    """``reckon agent`` up to the point where it would start: the start is recorded, not run."""
    started: list = []
    monkeypatch.setattr(daemons, "trio", types.SimpleNamespace(run=lambda *args: started.append(args) or 0))
    monkeypatch.delenv("RECKON_CA", raising=False)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the daemon command sets up logging: undone after
    try:
        yield started
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_agent_ca_with_a_ws_controller_is_refused_in_one_line(tmp_path, capsys, agent_start):
    ca = tmp_path / "ca.pem"
    ca.write_text("not used\n")
    argv = ["agent", "--name", "x", "--slots", "1", "--state-dir", str(tmp_path / "agent"), "--log-format", "text"]
    status = main([*argv, "--controller", "ws://127.0.0.1:1", "--ca", str(ca)])
    err = capsys.readouterr().err
    assert (status, agent_start) == (2, []), err
    assert err.count("\n") == 1 and "--ca is for a wss:// controller" in err and "ws://127.0.0.1:1" in err, err
    # Without --ca the same agent starts; so does one given $RECKON_CA (ambient, not an option it was handed).
    assert main([*argv, "--controller", "ws://127.0.0.1:1"]) == 0 and len(agent_start) == 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECKON_CA", str(ca))
        assert main([*argv, "--controller", "ws://127.0.0.1:1"]) == 0 and len(agent_start) == 2


def test_client_ca_with_a_ws_controller_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RECKON_CA", raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_text("not used\n")
    assert main(["jobs", "--controller", "ws://127.0.0.1:1", "--ca", str(ca)]) == 2
    assert "--ca is for a wss:// controller" in capsys.readouterr().err
