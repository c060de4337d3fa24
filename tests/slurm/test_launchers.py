"""`reckon slurm-commands DIR`: the launchers it writes run their command, never overwrite a
file they did not write, and fall back to the ordinary start when the installation moved."""

from __future__ import annotations

import os
import subprocess
import sys

from reckon.daemon.slurm import launchers
from tests.e2e.conftest import reckon_argv


def _run(path, *args, **env):
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "RECKON_CONTROLLER": "ws://127.0.0.1:1",
                               "RECKON_SLURM_CONNECT_WAIT": "0", **env})


def test_the_command_writes_seven_launchers_and_prints_the_path_line(tmp_path):
    target = tmp_path / "bin dir"  # a blank in the directory is no problem (the #! line names python)
    out = subprocess.run(reckon_argv() + ["slurm-commands", str(target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    assert sorted(os.listdir(target)) == sorted(launchers.COMMANDS)
    assert f"export PATH='{target}':\"$PATH\"" in out.stdout
    for name in launchers.COMMANDS:
        path = target / name
        assert os.access(path, os.X_OK) and launchers.ours(str(path))
    sbatch = _run(target / "sbatch", "--version")
    assert (sbatch.returncode, sbatch.stdout) == (0, "slurm 22.05.0 (reckon)\n"), sbatch
    refused = _run(target / "sbatch", "--wrap", "true")  # port 1: the controller is unreachable, in one line
    assert refused.returncode == 1 and refused.stderr.startswith(
        "sbatch: error: Batch job submission failed: controller unreachable"), refused
    bad = _run(target / "scancel", "--nope")
    assert bad.returncode == 1 and bad.stderr == ("scancel: unrecognized option '--nope'\n"
                                                    "Try \"scancel --help\" for more information\n"), bad
    # Run again: its own launchers are rewritten.
    assert subprocess.run(reckon_argv() + ["slurm-commands", str(target)], capture_output=True,
                          timeout=60).returncode == 0


def test_a_file_it_did_not_write_is_left_alone(tmp_path):
    (tmp_path / "squeue").write_text("#!/bin/sh\necho mine\n")
    out = subprocess.run(reckon_argv() + ["slurm-commands", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr == (f"reckon: {tmp_path / 'squeue'}: not written by reckon slurm-commands; left alone "
                          "(move it away, or choose another directory)\n")
    assert sorted(os.listdir(tmp_path)) == ["squeue"]  # all or nothing
    assert (tmp_path / "squeue").read_text() == "#!/bin/sh\necho mine\n"


def test_a_moved_installation_falls_back_to_the_ordinary_start(tmp_path):
    paths, init, locations = launchers.install_layout()
    text = launchers.launcher_text("sbatch", sys.executable, (paths, "/nonexistent/reckon/__init__.py", locations))
    path = tmp_path / "sbatch"
    path.write_text(text)
    path.chmod(0o755)
    out = _run(path, "--version")
    assert (out.returncode, out.stdout) == (0, "slurm 22.05.0 (reckon)\n"), out


def test_a_long_interpreter_path_gets_a_shell_launcher(tmp_path):
    text = launchers.launcher_text("sbatch", "/x" * 80 + "/python3")
    assert text.startswith("#!/bin/sh\n" + launchers.MARKER + "\nexec '")
    # The shell form runs too (forced here by a blank in the interpreter's path).
    link = tmp_path / "py thon"
    link.symlink_to(sys.executable)
    shell = tmp_path / "sbatch-sh"
    shell.write_text(launchers.launcher_text("sbatch", str(link)))
    shell.chmod(0o755)
    assert shell.read_text().startswith("#!/bin/sh\n")
    out = _run(shell, "--version")
    assert (out.returncode, out.stdout) == (0, "slurm 22.05.0 (reckon)\n"), out
    out = _run(shell, "--nope")
    assert out.stderr.startswith("sbatch: unrecognized option '--nope'"), out
