"""Partitions in the controller's config file and on ``reckon partition set``'s command line.

In the file, one table per partition (slurm.conf's PartitionName lines)::

    [partitions.batch]
    nodes = ["node[01-10]", "big*"]     # agent names, Slurm hostlists (zero-padded ranges), globs, or "ALL"
    default = true                       # jobs without --partition go here (one partition at most)
    max_time = "1d"                      # durations: seconds or "90s", "10m", "2h", "1h30m", "1d"
    default_time = "1h"                  # a job giving no --time gets this (else max_time, as in Slurm)
    max_cpus_per_job = 64
    max_mem_per_job = "256G"             # a size (K, M, G, T), or an integer of megabytes
    max_gpus_per_job = 4
    allow_groups = ["physics", "chem"]   # Unix groups whose members may submit here (empty: everyone)
    priority_tier = 2                    # Slurm's PriorityTier
    state = "up"                         # up, down (queues, starts nothing), drain (starts, queues nothing), inactive

On the command line the same keys as ``key=value`` words (``nodes=node[01-04],gpu1``,
``allow_groups=a,b``, ``state=down``; an empty value, ``max_time=``, clears a limit).

The file's partitions are recorded at the controller's start when they differ from the ones it
recorded last (model/partitions.py): an unchanged file keeps an operator's run-time changes.  A
file without a ``[partitions]`` table leaves the partitions to the log; an empty ``[partitions]``
table means none.  Every error is one line naming the file, the table and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reckon.daemon.durations import parse_seconds
from reckon.model.partitions import KEYS, STATES, Partition, check_set, split_nodes
from reckon.model.resources import parse_size

_INTS = {"max_cpus_per_job": 1, "max_gpus_per_job": 0, "priority_tier": 0}
_UNLIMITED = frozenset({"unlimited", "infinite", ""})  # Slurm's words for no limit


def _names(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(split_nodes(value)) if key == "nodes" else tuple(g.strip() for g in value.split(",") if g.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if key == "nodes":
            return tuple(p for v in value for p in split_nodes(v))
        return tuple(value)
    raise ValueError("expected a list of strings (or one comma-separated string)")


def convert(key: str, value: Any) -> Any:
    """A key's value as the model's record holds it, from TOML's value or the command line's text."""
    if key not in KEYS:
        raise KeyError(key)
    if key in ("nodes", "allow_groups"):
        return _names(value, key)
    if key == "default":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("yes", "true", "no", "false"):
            return value.lower() in ("yes", "true")
        raise ValueError("expected true or false")
    if key in ("max_time", "default_time"):
        if isinstance(value, str) and value.strip().lower() in _UNLIMITED:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError('expected a duration (a number of seconds, or a string such as "10m")')
        return parse_seconds(str(value))
    if key == "max_mem_per_job":
        if isinstance(value, str) and value.strip().lower() in _UNLIMITED:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return parse_size(f"{value}M")
        if isinstance(value, str):
            return parse_size(value)
        raise ValueError('expected a size such as "64G" (or an integer of megabytes)')
    if key == "state":
        if not isinstance(value, str) or value.upper() not in STATES:
            raise ValueError(f"expected one of {', '.join(s.lower() for s in STATES)}")
        return value.upper()
    # max_cpus_per_job, max_gpus_per_job, priority_tier
    if isinstance(value, str):
        if key != "priority_tier" and value.strip().lower() in _UNLIMITED:
            return None
        try:
            value = int(value)
        except ValueError:
            raise ValueError("expected an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected an integer")
    if value < _INTS[key]:
        raise ValueError(f"must be {_INTS[key]} or more")
    return value


def from_table(name: str, table: Any, where: str) -> Partition:
    """One ``[partitions.NAME]`` table as a record; ``ValueError`` naming ``where.KEY``."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: wrong type: expected a table, got {type(table).__name__}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise ValueError(f"{where}.{key}: unknown key (the keys of a partition are: {', '.join(KEYS)})")
        try:
            values[key] = convert(key, value)
        except ValueError as exc:
            raise ValueError(f"{where}.{key}: bad value {value!r}: {exc}") from None
    try:
        return Partition(name=name, **values)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def read_partitions(path: Path, data: dict[str, Any]) -> tuple[Partition, ...] | None:
    """The file's partitions sorted by name; None when it has no ``[partitions]`` table.
    ``ValueError`` in one line naming the file, the table and the key."""
    if "partitions" not in data:
        return None
    tables = data["partitions"]
    if not isinstance(tables, dict):
        raise ValueError(f"{path}: partitions: wrong type: expected a table of [partitions.NAME] tables")
    found = tuple(from_table(name, tables[name], f"{path}: partitions.{name}") for name in sorted(tables))
    try:
        check_set(found)
    except ValueError as exc:
        raise ValueError(f"{path}: partitions: {exc}") from None
    return found


def parse_assignments(words: list[str]) -> list[tuple[str, Any]]:
    """``reckon partition set``'s ``key=value`` words as (key, value) pairs; ``ValueError`` naming one."""
    out: list[tuple[str, Any]] = []
    for word in words:
        key, eq, text = word.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq:
            raise ValueError(f"{word!r}: expected key=value (keys: {', '.join(KEYS)})")
        if key not in KEYS:
            raise ValueError(f"{word!r}: unknown key {key!r} (keys: {', '.join(KEYS)})")
        try:
            value = convert(key, text)
        except ValueError as exc:
            raise ValueError(f"{key}: bad value {text!r}: {exc}") from None
        out.append((key, list(value) if isinstance(value, tuple) else value))
    return out
