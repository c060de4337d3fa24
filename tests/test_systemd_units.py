"""contrib/systemd: the units start the daemons from the config file, and an agent restart spares its jobs."""

from __future__ import annotations

import shlex
from pathlib import Path

from reckon.daemon.cli.main import main

CONTRIB = Path(__file__).resolve().parents[1] / "contrib" / "systemd"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file: section -> key -> values (a key may repeat); comments and blanks skipped."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path}: {raw!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_agent_unit_kills_only_the_agent_process_on_stop_and_restart():
    # systemd's default KillMode=control-group would kill every running job (their supervisors live in the
    # agent's cgroup) on each `systemctl restart reckon-agent`.
    unit = parse_unit(CONTRIB / "reckon-agent.service")
    assert unit["Service"]["KillMode"] == ["process"]
    text = (CONTRIB / "reckon-agent.service").read_text()
    assert "control-group" in text and "re-adopts" in text  # the comment says why


def test_the_units_start_the_daemons_from_the_config_file():
    for daemon in ("controller", "agent"):
        unit = parse_unit(CONTRIB / f"reckon-{daemon}.service")
        (exec_start,) = unit["Service"]["ExecStart"]
        argv = shlex.split(exec_start)
        assert argv[0].endswith("/reckon") and argv[1] == daemon
        assert argv[argv.index("--config") + 1] == "/etc/reckon/reckon.toml"
        assert unit["Service"]["KillSignal"] == ["SIGTERM"]  # a clean stop
        assert unit["Install"]["WantedBy"] == ["multi-user.target"]
        assert "network-online.target" in unit["Unit"]["After"][0]


def test_the_example_config_is_valid(capsys):
    assert main(["config", "check", str(CONTRIB / "reckon.toml.example")]) == 0
    assert "OK: [controller]" in capsys.readouterr().out
