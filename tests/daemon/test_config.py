"""The daemons' TOML config file (daemon/cli/config.py): its schema is the argparse definitions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from reckon.daemon.cli import config as daemon_config
from reckon.daemon.cli.main import daemon_parsers, parse, build_parser, main

GOOD = """
    [controller]
    listen = "0.0.0.0:7420"
    state-dir = "/var/lib/reckon/controller"
    lost-after = 600
    round-timeout = 12.5
    tls-cert = "/etc/reckon/tls/controller.pem"
    tls-key = "/etc/reckon/tls/controller.key"

    [agent]
    name = "node1"
    slots = 16
    state-dir = "/var/lib/reckon/agent"
    controller = "wss://controller.example:7420"
    ca = "/etc/reckon/tls/ca.pem"
    output-mode = "0640"
    executor = "process"
    verbose = true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reckon.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_every_daemon_option_is_a_key_and_every_key_an_option():
    # The file's schema is read from the parsers: each long option of a daemon is a key of its table.
    for name, parser in daemon_parsers(build_parser()).items():
        keys = daemon_config.option_keys(parser)
        flags = {s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--")}
        assert set(keys) == flags - {"help", "config"}, name
    assert {"tls-cert", "tls-key", "log-file", "lost-after"} <= set(daemon_config.option_keys(
        daemon_parsers(build_parser())["controller"]))
    assert {"output-mode", "ca", "log-file", "slots"} <= set(daemon_config.option_keys(
        daemon_parsers(build_parser())["agent"]))


def test_a_good_file_checks_ok(tmp_path, capsys):
    assert main(["config", "check", str(write(tmp_path, GOOD))]) == 0
    assert "OK: [controller] (6 key(s)), [agent] (8 key(s))" in capsys.readouterr().out


@pytest.mark.parametrize("text,message", [
    ("[agent]\nslotz = 4\n", "agent.slotz: unknown key"),
    ("[agents]\nslots = 4\n", "agents: unknown table"),
    ("[agent]\nslots = \"four\"\n", "agent.slots: wrong type: expected an integer, got str"),
    ("[agent]\nslots = 4.5\n", "agent.slots: wrong type: expected an integer, got float"),
    ("[agent]\nkill-grace = true\n",
     "agent.kill-grace: wrong type: expected a duration (a number of seconds, or a string such as \"10m\"), got bool"),
    ("[agent]\nverbose = 1\n", "agent.verbose: wrong type: expected a boolean, got int"),
    ("[agent]\nstate-dir = 7\n", "agent.state-dir: wrong type: expected a string, got int"),
    ("[controller]\nlisten = \"nope\"\n", "controller.listen: bad value 'nope': expected HOST:PORT"),
    ("[controller]\nround-timeout = -1\n", "controller.round-timeout: bad value -1: must be positive"),
    ("[agent]\nexecutor = \"docker\"\n", "agent.executor: bad value 'docker': expected one of process, null, hold"),
    ("[agent]\noutput-mode = \"0777\"\n", "agent.output-mode: bad value '0777'"),
    ("agent = 3\n", "agent: wrong type: expected a table"),
    ("[agent\n", "not valid TOML"),
])
def test_each_kind_of_error_names_the_key_with_exit_status_2(tmp_path, capsys, text, message):
    path = write(tmp_path, text)
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"reckon: {path}: ")
    assert message in err


def test_a_missing_file_is_exit_status_2(tmp_path, capsys):
    assert main(["config", "check", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read config file" in capsys.readouterr().err


def test_the_file_sets_options_and_flags_override_it(tmp_path):
    path = write(tmp_path, GOOD)
    args = parse(["agent", "--config", str(path)])  # --name, --slots, --state-dir come from the file
    assert (args.name, args.slots, args.state_dir, args.output_mode) == ("node1", 16, Path("/var/lib/reckon/agent"),
                                                                          0o640)
    assert args.controller == "wss://controller.example:7420" and args.verbose is True
    assert args.kill_grace == 10.0  # not in the file: the flag's default
    args = parse(["agent", "--config", str(path), "--slots", "4", "--name", "node2", "--output-mode", "0600"])
    assert (args.name, args.slots, args.output_mode) == ("node2", 4, 0o600)
    args = parse(["controller", "--state-dir", "/elsewhere", "--config", str(path)])
    assert args.state_dir == Path("/elsewhere") and args.listen == ("0.0.0.0", 7420) and args.lost_after == 600.0


def test_a_daemon_started_with_a_bad_file_says_why_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, "[agent]\nslots = \"many\"\n")
    with pytest.raises(SystemExit) as stopped:
        main(["agent", "--config", str(path), "--name", "n", "--state-dir", str(tmp_path / "s")])
    assert stopped.value.code == 2
    assert "agent.slots: wrong type" in capsys.readouterr().err


def test_without_the_file_required_options_are_still_required(capsys):
    with pytest.raises(SystemExit):
        parse(["agent", "--slots", "2"])
    assert "--name" in capsys.readouterr().err


@pytest.mark.parametrize("text, named", [
    ("[controller]\npage-size = 0\n", "controller.page-size"),
    ("[controller]\nsnapshot-every = -5\n", "controller.snapshot-every"),
    ("[controller]\nrejoin-grace = -3\n", "controller.rejoin-grace"),
    ("[agent]\nkill-grace = -1\n", "agent.kill-grace"),
    ("[agent]\nrecent-window = -1\n", "agent.recent-window"),
    ("[agent]\nretry-max = 0.5\n", "agent.retry-max"),
])
def test_out_of_range_values_are_refused_by_name(tmp_path, capsys, text, named):
    """Values the daemons would fail on later (a traceback, or a silent clamp) are refused here."""
    path = tmp_path / "reckon.toml"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 2
    assert named in capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "reckon.toml"
    path.write_bytes(b"[agent]\nname = \"\xff\xfe\"\n")
    assert main(["config", "check", str(path)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ('[agent]\ncontroller = "https://controller.example:7420"\n',
     "agent.controller: bad value 'https://controller.example:7420': the controller URL must start with ws:// or "
     "wss://, got https://"),
    ('[agent]\ncontroller = "ws://a:7420,controller.example"\n', "agent.controller: bad value"),
    ('[controller]\nlisten = "0.0.0.0:7420"\n', "controller: no state-dir (nor store): the controller needs one"),
])
def test_check_refuses_what_the_daemon_would_refuse_at_its_start(tmp_path, capsys, text, message):
    path = write(tmp_path, text)
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"reckon: {path}: {message}"), err


def test_check_passes_a_controller_on_postgresql_and_agents_with_several_urls(tmp_path, capsys):
    path = write(tmp_path, '[controller]\nstore = "postgresql://reckon@db/reckon"\n'
                           '[agent]\ncontroller = "wss://a:7420,wss://b:7420"\n')
    assert main(["config", "check", str(path)]) == 0, capsys.readouterr().err
    assert "OK" in capsys.readouterr().out
