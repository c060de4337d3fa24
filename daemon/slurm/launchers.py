"""`reckon slurm-commands DIR`: small executables ``sbatch srun scancel squeue sacct sinfo scontrol``
in DIR, each running this interpreter on its module's ``main()`` (``reckon.daemon.slurm.<name>``).

Nothing goes on anyone's PATH unasked: the user adds DIR (the command prints the line), so a real
Slurm is never shadowed by accident.  A file in DIR that this command did not write (no marker
line) is never overwritten: it is named and left alone, and the command fails.

Each launcher is a Python script with this interpreter in its ``#!`` line and ``-I`` (isolated:
no ``$PYTHON*`` variables, no user site, and neither DIR nor the current directory on
``sys.path``, so a file in either cannot stand in for a module), the fastest start there is
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


def launcher_text(command: str, python: str = sys.executable) -> str:
    """The launcher of ``command``: runs ``reckon.daemon.slurm.<command>.main()``, exits with its status."""
    code = f"import sys; from reckon.daemon.slurm.{command} import main; sys.exit(main())"
    shebang = f"#!{python} -I"
    if len(shebang) <= MAX_SHEBANG and " " not in python and "\t" not in python:
        return f"{shebang}\n{MARKER}\n{code.replace('; ', chr(10))}\n"
    quoted = "'" + python.replace("'", "'\\''") + "'"
    return f'#!/bin/sh\n{MARKER}\nexec {quoted} -I -c "{code}" "$@"\n'


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
    for path, name in zip(paths, COMMANDS):
        temporary = f"{path}.tmp{os.getpid()}"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(launcher_text(name, python))
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
