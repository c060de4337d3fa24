"""`reckon slurm-commands DIR`: small executables ``sbatch srun scancel squeue sacct sinfo scontrol``
in DIR, each running this interpreter on its module's ``main()`` (``reckon.daemon.slurm.<name>``).

Nothing goes on anyone's PATH unasked: the user adds DIR (the command prints the line), so a real
Slurm is never shadowed by accident.  A file in DIR that this command did not write (no marker
line) is never overwritten: it is named and left alone, and the command fails.

Each launcher is a Python script with this interpreter in its ``#!`` line and ``-I -S``
(isolated: no ``$PYTHON*`` variables, no user site, neither DIR nor the current directory on
``sys.path``, so a file in either cannot stand in for a module; and no ``site``: the launcher
sets this installation's import path itself, see ``launcher_text``), the fastest start there is
short of a frozen binary: no shell, one exec.  A ``#!`` line longer than the kernel takes
(127 bytes before Linux 5.1) or with a blank in the path gets a ``/bin/sh`` launcher instead.
"""

from __future__ import annotations

import os
import sys

COMMANDS = ("sbatch", "srun", "scancel", "squeue", "sacct", "sinfo", "scontrol")
MARKER = "# reckon-slurm-launcher: written by `reckon slurm-commands`, which rewrites it"
MAX_SHEBANG = 127


class LauncherError(Exception):
    """One line: why DIR cannot take the launchers (nothing was written)."""


def install_layout() -> tuple[list[str], str, list[str]]:
    """(sys.path entries, reckon's ``__init__.py``, reckon's package directories) of this installation,
    for a launcher that skips ``site``: ``site`` and an editable install's import hook are
    most of a bare interpreter's start (25 of 38 ms here), and a command pays them each time."""
    import reckon
    import reckon.daemon
    import reckon.model

    locations = list(reckon.__path__)
    for sub in (reckon.daemon, reckon.model):  # an editable install maps these elsewhere
        parent = os.path.dirname(list(sub.__path__)[0])
        if parent not in locations:
            locations.append(parent)
    # Not the running script's own directory (sys.path[0]: `reckon`'s bin/, which -I leaves out too).
    script_dir = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    paths = [p for i, p in enumerate(sys.path) if p and os.path.isabs(p) and os.path.isdir(p)
             and not (i == 0 and p == script_dir)]
    return paths, os.path.abspath(reckon.__file__ or ""), locations


def launcher_text(command: str, python: str = sys.executable,
                  layout: tuple[list[str], str, list[str]] | None = None) -> str:
    """The launcher of ``command``: runs ``reckon.daemon.slurm.<command>.main()``, exits with its status.

    It starts the interpreter with ``-IS`` and sets up the import path this installation has
    (``install_layout``) by itself: about half of an sbatch's CPU with `make install`'s editable
    install (27 ms, against 52 with ``site``; docs/slurm.md).
    If the installation has moved or changed (an import fails), it falls back to ``site``: the
    ordinary start, slower and still correct."""
    paths, init, locations = layout or install_layout()
    code = (f"import sys\n"
            f"sys.path += [p for p in {paths!r} if p not in sys.path]\n"
            f"try:\n"
            f"    import _frozen_importlib as _b, _frozen_importlib_external as _e\n"
            f"    _s = _e.spec_from_file_location('reckon', {init!r}, submodule_search_locations={locations!r})\n"
            f"    _m = sys.modules['reckon'] = _b.module_from_spec(_s)\n"
            f"    _s.loader.exec_module(_m)\n"
            f"    from reckon.daemon.slurm.{command} import main\n"
            f"except (ImportError, OSError, AttributeError):  # reckon was moved or reinstalled: start as usual\n"
            f"    for _n in [n for n in sys.modules if n == 'reckon' or n.startswith('reckon.')]:\n"
            f"        del sys.modules[_n]\n"
            f"    import site\n"
            f"    site.main()\n"
            f"    from reckon.daemon.slurm.{command} import main\n"
            f"sys.exit(main())\n")
    shebang = f"#!{python} -IS"  # one word: the kernel passes the rest of the line as one argument
    if len(shebang) <= MAX_SHEBANG and " " not in python and "\t" not in python:
        return f"{shebang}\n{MARKER}\n{code}"
    quoted = "'" + python.replace("'", "'\\''") + "'"
    # python -c gives sys.argv[0] = "-c": the launcher's own path ("$0") takes its place.
    script = code.replace("import sys\n", "import sys\nsys.argv[0:2] = sys.argv[1:2]\n", 1).replace("'", "'\\''")
    return f"#!/bin/sh\n{MARKER}\nexec {quoted} -IS -c '{script}' \"$0\" \"$@\"\n"


def ours(path: str) -> bool:
    """Whether ``path`` is a launcher this command wrote (its marker on the second line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith("#!") and f.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def write_launchers(directory: str, python: str = sys.executable) -> list[str]:
    """Write (or rewrite) every launcher in ``directory`` (made if missing); their paths.

    All or none: a file in the way that is not ours (or a directory) fails the whole command
    before anything is written.
    """
    directory = os.path.abspath(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise LauncherError(f"cannot make {directory}: {exc.strerror or exc}") from None
    paths = [os.path.join(directory, name) for name in COMMANDS]
    foreign = [p for p in paths if os.path.lexists(p) and not (os.path.isfile(p) and not os.path.islink(p)
                                                                and ours(p))]
    if foreign:
        raise LauncherError(f"{', '.join(foreign)}: not written by reckon slurm-commands; left alone "
                            "(move it away, or choose another directory)")
    layout = install_layout()
    for path, name in zip(paths, COMMANDS):
        temporary = f"{path}.tmp{os.getpid()}"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(launcher_text(name, python, layout))
            os.chmod(temporary, 0o755)
            os.replace(temporary, path)  # atomic: a running sbatch never sees half a launcher
        except OSError as exc:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise LauncherError(f"cannot write {path}: {exc.strerror or exc}") from None
    return paths


def path_line(directory: str) -> str:
    """The shell line that puts the launchers first on PATH."""
    quoted = "'" + os.path.abspath(directory).replace("'", "'\\''") + "'"
    return f'export PATH={quoted}:"$PATH"'


def run(directory: str) -> int:
    """``reckon slurm-commands DIR``: write the launchers, print what to add to PATH."""
    try:
        paths = write_launchers(directory)
    except LauncherError as exc:
        sys.stderr.write(f"reckon: {exc}\n")
        return 1
    sys.stdout.write(f"wrote {' '.join(os.path.basename(p) for p in paths)} in {os.path.abspath(directory)}\n"
                     f"to use them (they shadow a real Slurm's commands), add to your shell:\n"
                     f"{path_line(directory)}\n")
    return 0
