"""contrib/systemd: the units start the daemons from the config file, from the path the docs install
reckon to, and an agent restart spares its jobs."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from reckon.daemon.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib" / "systemd"
UNITS = ("reckon-controller.service", "reckon-agent.service")
RECIPES = (ROOT / "README.md", ROOT / "docs" / "operating.md")  # both show the install recipe


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


def shell_lines(path: Path) -> list[str]:
    """The command lines of a doc's ```sh blocks (comments cut off, continuations joined)."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", path.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def install_prefix(path: Path) -> str:
    """Where the doc's install recipe puts reckon: the one `python3 -m venv PREFIX` it shows."""
    prefixes = {shlex.split(line)[3] for line in shell_lines(path) if line.startswith("python3 -m venv ")}
    assert len(prefixes) == 1, f"{path.name}: install recipes: {prefixes}"
    return prefixes.pop()


def test_the_units_start_reckon_from_the_path_the_docs_install_it_to():
    prefixes = {path.name: install_prefix(path) for path in RECIPES}
    assert len(set(prefixes.values())) == 1, prefixes  # the README and the guide name one path
    prefix = prefixes["README.md"]
    for path in RECIPES:
        # pip of that venv installs it, and the recipe's `reckon` on PATH is that venv's too.
        lines = shell_lines(path)
        assert any(line.startswith(f"{prefix}/bin/pip install ") for line in lines), path.name
        assert f"ln -sf {prefix}/bin/reckon /usr/local/bin/reckon" in lines, path.name
    for name in UNITS:
        (exec_start,) = parse_unit(CONTRIB / name)["Service"]["ExecStart"]
        assert shlex.split(exec_start)[0] == f"{prefix}/bin/reckon", name


def test_the_systemd_recipe_makes_the_user_and_installs_the_documentation_the_units_name():
    lines = shell_lines(ROOT / "docs" / "operating.md")
    (useradd,) = [shlex.split(line) for line in lines if line.startswith("useradd ")]
    installed = set()
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "install" and "-t" in argv:
            directory = argv[argv.index("-t") + 1]
            installed |= {str(PurePosixPath(directory) / PurePosixPath(f).name) for f in argv[argv.index("-t") + 2:]}
            assert all((ROOT / f).is_file() for f in argv[argv.index("-t") + 2:]), line
    for name in UNITS:
        unit = parse_unit(CONTRIB / name)
        assert unit["Service"]["User"] == [useradd[-1]] == unit["Service"]["Group"], name
        docs = [d.removeprefix("file://") for d in unit["Unit"]["Documentation"][0].split()]
        assert docs and set(docs) <= installed, (name, docs, installed)


def test_the_example_config_keeps_state_and_logs_in_the_directories_the_units_give_the_daemons():
    # ProtectSystem=strict (the controller) leaves only StateDirectory= and LogsDirectory= writable.
    config = tomllib.loads((CONTRIB / "reckon.toml.example").read_text())
    for name in UNITS:
        service = parse_unit(CONTRIB / name)["Service"]
        table = config[name.removeprefix("reckon-").removesuffix(".service")]
        (state,) = service["StateDirectory"]
        (logs,) = service["LogsDirectory"]
        assert PurePosixPath(table["state-dir"]).parent == PurePosixPath("/var/lib") / state, name
        if "log-file" in table:
            assert PurePosixPath(table["log-file"]).parent == PurePosixPath("/var/log") / logs, name


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_reads_both_units_without_a_complaint(tmp_path):
    # systemd-analyze checks that ExecStart's program exists: point the copies at a stand-in.
    stand_in = tmp_path / "reckon"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    copies = []
    for name in UNITS:
        text = (CONTRIB / name).read_text()
        (exec_start,) = parse_unit(CONTRIB / name)["Service"]["ExecStart"]
        program = shlex.split(exec_start)[0]
        copies.append(tmp_path / name)
        copies[-1].write_text(text.replace(f"ExecStart={program} ", f"ExecStart={stand_in} "))
    run = subprocess.run(["systemd-analyze", "verify", "--man=no", *map(str, copies)],
                         capture_output=True, text=True, timeout=60)
    # It warns (on stderr, exit status 0) about an unknown key or a bad value and ignores it.
    assert run.returncode == 0 and run.stderr == "" and run.stdout == "", run.stderr
