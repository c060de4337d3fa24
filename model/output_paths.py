"""Output path patterns (``--output`` / ``--error``), like ``sbatch -o``.

Apart from model/output.py because the job spec validates its patterns and
model/output.py needs the job records.
"""

from __future__ import annotations

import posixpath
from typing import Any

# The one table of pattern escapes: the letter after '%' -> what it stands for.
PATTERN_ESCAPES: dict[str, str] = {
    "j": "job",  # the job id
    "a": "attempt",  # the attempt number
    "%": "percent",  # a literal '%'
    # Version 7 (Slurm's): note reckon's %a is the attempt, Slurm's %a is reckon's %I.
    "A": "array",  # the array's id (the job id for a job not in an array)
    "I": "index",  # the index in its array (4294967294 for a job not in an array, as Slurm)
    "x": "name",  # the job's name
    "u": "user",  # the user it runs as (the agent's user in token mode)
    "N": "host",  # the agent's short host name
}
NO_ARRAY_INDEX = "4294967294"  # what Slurm prints as %a of a job not in an array (NO_VAL - 1)
_KNOWN = "%j job id, %a attempt, %A array id, %I array index, %x name, %u user, %N host, %% a percent sign"


def check_pattern(name: str, pattern: str) -> None:
    """Refuse a pattern with an escape not in PATTERN_ESCAPES (say which), or an empty one."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{name} must be a non-empty path pattern")
    if "\0" in pattern:
        raise ValueError(f"{name} must not contain a NUL byte")
    i = 0
    while i < len(pattern):
        if pattern[i] == "%":
            letter = pattern[i + 1] if i + 1 < len(pattern) else ""
            if letter not in PATTERN_ESCAPES:
                raise ValueError(f"{name} {pattern!r}: unknown pattern %{letter} (known: {_KNOWN})")
            i += 2
        else:
            i += 1


def expand_pattern(pattern: str, *, job: str, attempt: int, array: str | None = None,
                   index: int | None = None, name: str = "", user: str = "", host: str = "") -> str:
    """The path a pattern names for (job, attempt) and the job's array, name, user and host."""
    check_pattern("pattern", pattern)
    values = {"j": job, "a": str(attempt), "%": "%", "A": array if array is not None else job,
              "I": str(index) if index is not None else NO_ARRAY_INDEX, "x": name, "u": user, "N": host}
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "%":
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def output_path(pattern: str, *, job: str, attempt: int, cwd: str | None, base_dir: str | None,
                **names: Any) -> str:
    """Where a pattern puts (job, attempt)'s output: relative paths are relative to the job's cwd
    (the agent's own working directory ``base_dir`` when the job has none; left relative if None).
    ``names``: expand_pattern's array, index, name, user, host."""
    path = expand_pattern(pattern, job=job, attempt=attempt, **names)
    start = cwd if cwd is not None else base_dir
    if posixpath.isabs(path) or start is None:
        return path
    return posixpath.normpath(posixpath.join(start, path))
