"""Options the command line refuses rather than misreads: abbreviations, and ``--ca`` without TLS."""

from __future__ import annotations

import argparse
import logging
import os
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


# ---- bytes that are not UTF-8: refused in one line with status 2, as a --file of them is ----


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


BAD = os.fsdecode(b"caf\xe9")  # Latin-1 bytes, as Python hands them over (surrogate escapes)


@pytest.mark.parametrize("argv, expected", [
    (["submit", "--name", BAD, "--", "true"], "the value of --name is not UTF-8 text: b'caf\\xe9' (byte 3)"),
    (["submit", "--env", f"K={BAD}", "--", "true"], "the value of --env is not UTF-8 text: b'K=caf\\xe9' (byte 5)"),
    (["submit", "--", "grep", "-e", BAD], "word 3 of the command is not UTF-8 text: b'caf\\xe9'"),
    (["submit", "--cwd", f"/tmp/{BAD}", "--", "true"], "the value of --cwd is not UTF-8 text"),
    (["show", BAD], "an argument is not UTF-8 text: b'caf\\xe9'"),
    (["agent", "--name", "a1", "--slots", "1", "--state-dir", f"/tmp/{BAD}"], "the value of --state-dir"),
])
def test_an_argument_that_is_not_utf8_is_refused_in_one_line(argv, expected, capsys, agent_start):
    err = _refused(argv, capsys)  # (an agent would not start: agent_start records it)
    assert err.startswith(f"reckon: {expected}"), err
    assert agent_start == []


def test_a_current_directory_that_is_not_utf8_is_refused_unless_cwd_is_absolute(tmp_path, monkeypatch, capsys):
    here = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(here)
    monkeypatch.chdir(here)
    for argv in (["submit", "--", "true"], ["submit", "--cwd", "relative", "--", "true"]):
        assert main([*argv, "--controller", "ws://127.0.0.1:1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("reckon: the current directory is not UTF-8 text: ") and "caf\\xe9" in err, err
    # An absolute --cwd does not need it: the submit goes on (to a controller that is not there: status 1).
    assert main(["submit", "--cwd", "/tmp", "--controller", "ws://127.0.0.1:1", "--timeout", "2", "--", "true"]) == 1
    assert "unreachable" in capsys.readouterr().err


def test_a_command_file_that_is_not_utf8_is_refused_the_same_way(tmp_path, capsys):
    commands = tmp_path / "jobs.txt"
    commands.write_bytes(b"echo caf\xe9\n")
    assert main(["submit", "--file", str(commands), "--controller", "ws://127.0.0.1:1"]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


# ---- one duration parser for every option that takes seconds ----


def test_every_option_of_seconds_takes_a_duration_as_submit_time_does():
    """An option whose help speaks of seconds parses them with daemon/durations.py (``10m`` works)."""
    import re

    from reckon.daemon.cli.main import _retry_cap
    from reckon.daemon.durations import duration, duration_or_zero

    timed = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            text = f"{action.help or ''} {action.metavar or ''}"
            if re.search(r"\bseconds?\b|SECONDS", text) and "per second" not in text:
                timed.append((path, action.option_strings[0]))
                if action.option_strings != ["--time"]:  # submit --time: batch.parse_duration, the same parser
                    assert action.type in (duration, duration_or_zero, _retry_cap), (path, action.option_strings)
    assert ("reckon controller", "--lost-after") in timed and ("reckon agent", "--kill-grace") in timed
    assert len(timed) > 20, timed


@pytest.mark.parametrize("argv, dest", [
    (["controller", "--lost-after", "10m"], "lost_after"),
    (["controller", "--rejoin-grace", "1m"], "rejoin_grace"),
    (["agent", "--name", "a", "--slots", "1", "--state-dir", "s", "--kill-grace", "1m"], "kill_grace"),
    (["jobs", "--timeout", "1m"], "timeout"),
    (["chaos", "--duration", "1m"], "duration"),
])
def test_a_duration_flag_takes_10m_and_seconds(argv, dest):
    assert getattr(parse(argv), dest) == 60.0 * (10 if "10m" in argv else 1)
    assert getattr(parse([*argv[:-1], "90"]), dest) == 90.0
    assert getattr(parse([*argv[:-1], "1h30m"]), dest) == 5400.0


@pytest.mark.parametrize("value, message", [("ten", "expected a duration such as 90s, 10m"),
                                            ("0", "must be positive, got 0"), ("-5s", "expected a duration"),
                                            ("nan", "expected a duration"), ("inf", "must be under")])
def test_a_bad_duration_is_one_line_naming_the_flag(value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(["controller", f"--lost-after={value}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --lost-after: " in err and message in err, err


def test_a_config_file_takes_a_duration_as_a_number_or_a_string(tmp_path):
    from reckon.daemon.cli import config as daemon_config
    from reckon.daemon.cli.main import daemon_parsers

    path = tmp_path / "reckon.toml"
    path.write_text('[controller]\nstate-dir = "/x"\nlost-after = "10m"\nround-timeout = 12.5\n')
    found = daemon_config.check(path, daemon_parsers(build_parser()))
    assert (found["controller"]["lost_after"], found["controller"]["round_timeout"]) == (600.0, 12.5)


# ---- resources beyond slots (issue #20) ----


@pytest.mark.parametrize("argv, expected", [
    (["--mem", "lots"], "reckon: invalid --mem: bad size 'lots': a number with an optional K, M, G or T suffix"),
    (["--mem", "0"], "reckon: invalid --mem: bad size '0': it must be more than 0"),
    (["--gres", "lic:x"], "reckon: invalid --gres: bad generic resource 'lic:x': NAME or NAME:COUNT"),
    (["--gres", "gpu:1"], "reckon: invalid --gres: bad generic resource name 'gpu'"),
    (["--gpus", "-1"], "reckon: invalid job: gpus must be"),
])
def test_a_bad_resource_is_one_line_and_status_2(argv, expected, capsys):
    assert main(["submit", *argv, "--controller", "ws://127.0.0.1:1", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, expected", [
    (["--gpus", "0,0"], "reckon: agent: argument --gpus: GPU 0 is named twice in '0,0'"),
    (["--gpus", "0,00"], "reckon: agent: argument --gpus: GPU 0 is named twice in '0,00'"),
    (["--gpus", "a"], "reckon: agent: argument --gpus: expected GPU indices such as 0,1 (or none), got 'a'"),
    (["--gres", "license:2,license:3"], "reckon: agent: argument --gres: license is named twice in "
                                        "'license:2,license:3' (give its count once)"),
])
def test_an_agent_declaring_a_gpu_or_a_gres_twice_is_one_line_and_status_2(argv, expected, capsys, tmp_path):
    state = tmp_path / "agent"
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["agent", "--name", "x", "--state-dir", str(state), "--controller", "ws://127.0.0.1:1", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not state.exists()  # refused before anything starts


def test_cpus_mem_gpus_gres_make_the_spec_and_slots_is_the_older_name(tmp_path):
    import argparse

    from reckon.daemon.cli.jobs import job_spec
    from reckon.daemon.cli.main import build_parser

    def spec(*options: str) -> dict:
        args = build_parser().parse_args(["submit", *options, "--", "true"])
        assert isinstance(args, argparse.Namespace)
        return job_spec(["true"], args, str(tmp_path))

    asked = spec("--cpus", "2", "--mem", "1.5G", "--gpus", "1", "--gres", "lic:2", "--gres", "fpga")
    assert (asked["slots"], asked["mem"], asked["gpus"], asked["gres"]) == (2, 3 << 29, 1, [["fpga", 1], ["lic", 2]])
    assert spec("--slots", "3")["slots"] == 3
    assert {"mem", "gpus", "gres"}.isdisjoint(spec())  # left out at their defaults, as an older CLI sent it


def test_nodes_show_every_dimension_and_what_cannot_be_enforced():
    from reckon.daemon.cli.jobs import format_nodes

    node = {"name": "gpu1", "state": "MIXED", "slots": 8, "used": 3, "since": None, "mem": 16 << 30,
            "mem_used": 4 << 30, "gpus": [0, 1], "gpus_used": [0], "gres": [["lic", 2]], "gres_used": [["lic", 1]],
            "enforcer": "none", "unenforced": ["cpus", "mem"]}
    old = {"name": "old", "state": "IDLE", "slots": 4, "used": 0, "since": None}  # a version 5 agent
    lines = format_nodes([node, old]).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "CPUS", "MEM", "GPUS", "GRES", "ENFORCER", "SINCE"]
    assert lines[1].split()[:7] == ["gpu1", "MIXED", "3/8", "4G/16G", "1/2", "lic:1/2", "none"]
    assert lines[2].split()[:7] == ["old", "IDLE", "0/4", "-", "-", "-", "-"]
    assert lines[3] == "gpu1: cannot enforce: cpus, mem"
