"""Output path patterns (``--output`` / ``--error``), like ``sbatch -o``.

Apart from model/output.py because the job spec validates its patterns and
model/output.py needs the job records.
"""

from __future__ import annotations

import posixpath

# The one table of pattern escapes: the letter after '%' -> what it stands for.
PATTERN_ESCAPES: dict[str, str] = {
    "j": "job",  # the job id
    "a": "attempt",  # the attempt number
    "%": "percent",  # a literal '%'
}


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
                raise ValueError(f"{name} {pattern!r}: unknown pattern %{letter} (known: %j job id, "
                                 f"%a attempt, %% a percent sign)")
            i += 2
        else:
            i += 1


def expand_pattern(pattern: str, *, job: str, attempt: int) -> str:
    """The path a pattern names for (job, attempt)."""
    check_pattern("pattern", pattern)
    values = {"j": job, "a": str(attempt), "%": "%"}
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


def output_path(pattern: str, *, job: str, attempt: int, cwd: str | None, base_dir: str | None) -> str:
    """Where a pattern puts (job, attempt)'s output: relative paths are relative to the job's cwd
    (the agent's own working directory ``base_dir`` when the job has none; left relative if None)."""
    path = expand_pattern(pattern, job=job, attempt=attempt)
    start = cwd if cwd is not None else base_dir
    if posixpath.isabs(path) or start is None:
        return path
    return posixpath.normpath(posixpath.join(start, path))
