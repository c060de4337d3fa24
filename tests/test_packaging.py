"""What the distribution installs: one import name, ``reckon``, and every package folder in it.

``model/`` and ``daemon/`` install as ``reckon.model`` and ``reckon.daemon`` (pyproject.toml's
package-dir): nothing top-level called ``model`` or ``daemon``, so reckon shares an environment with
the PyPI distribution python-daemon (import name ``daemon``), which the test extras install."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("reckon", "model", "daemon")


def _package_folders() -> set[str]:
    """Every package folder of the checkout, by its installed name."""
    names = set()
    for top in FOLDERS:
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            names.add(".".join(rel if top == "reckon" else ("reckon", *rel)))
    return names


def test_the_wheel_installs_only_reckon_with_every_package(tmp_path):
    # From a copy: setuptools builds in the source tree (build/, *.egg-info), and the checkout stays clean.
    source = tmp_path / "source"
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "-w", str(tmp_path), str(source)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("reckond-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"reckon"}
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == _package_folders()
    assert "reckon/daemon/agent/launcher.py" in names and "reckon/model/controller.py" in names
    assert "reckon/py.typed" in names  # import reckon's type hints reach its users' checkers (PEP 561)
    assert "reckon/__init__.pyi" in names  # the types of the names __init__.py loads on first use


def test_pyproject_names_every_package_folder():
    """setuptools would still ship an unnamed folder as data, with a warning: the list is the contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _package_folders()
    assert config["package-dir"] == {"reckon": "reckon", "reckon.model": "model", "reckon.daemon": "daemon"}


def test_reckon_and_python_daemon_are_both_importable(tmp_path):
    """From a directory outside the checkout, as an installed user would import them."""
    code = ("import daemon, reckon, reckon.daemon, reckon.model; "
            "print(daemon.DaemonContext.__module__, reckon.daemon.__file__, reckon.model.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[0] == "daemon.daemon"  # python-daemon's
    assert Path(out[1]) == ROOT / "daemon" / "__init__.py"
    assert Path(out[2]) == ROOT / "model" / "__init__.py"


def test_the_console_script_and_module_entry_run(tmp_path):
    for argv in ([str(Path(sys.executable).parent / "reckon"), "--version"],
                 [sys.executable, "-m", "reckon.daemon.cli", "--version"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        assert out.startswith("reckon ")
