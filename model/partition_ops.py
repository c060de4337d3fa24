"""The operator's partition changes at run time (``reckon partition set`` / ``remove``): events and
their handlers, each one fact (model/partitions.py) or a refusal that changes nothing.

``SetPartition`` carries only the keys the operator gives, with plain typed values (the client
parsed durations and sizes: daemon/cli/partitions.py); the handler lays them over the partition's
current record (a new partition starts from the defaults) and the record validates itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ._check import check_str, check_time
from .errors import LocalProtocolError
from .partitions import KEYS, Partition, PartitionRemoved, PartitionSet
from .permissions import Caller, require
from .transaction import Transaction


def _check_caller(caller: Any) -> None:
    if caller is not None and not isinstance(caller, Caller):
        raise ValueError("caller must be a Caller or None")


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPartition:
    """Create partition ``name`` or change the given keys of it (operators only)."""

    name: str
    changes: tuple[tuple[str, Any], ...]  # (key, value), keys of partitions.KEYS, each once
    now: float
    caller: Caller | None = None

    def __post_init__(self) -> None:
        _check_caller(self.caller)
        check_str("name", self.name, max_len=64)
        check_time("now", self.now)
        if not isinstance(self.changes, tuple) or not all(isinstance(c, tuple) and len(c) == 2 for c in self.changes):
            raise ValueError("changes must be (key, value) pairs")
        keys = [key for key, _ in self.changes]
        unknown = [key for key in keys if key not in KEYS]
        if unknown:
            raise ValueError(f"unknown partition key {unknown[0]!r} (keys: {', '.join(KEYS)})")
        if len(set(keys)) != len(keys):
            raise ValueError("a partition key is given twice")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovePartition:
    """Remove partition ``name`` (operators only)."""

    name: str
    now: float
    caller: Caller | None = None

    def __post_init__(self) -> None:
        _check_caller(self.caller)
        check_str("name", self.name, max_len=64)
        check_time("now", self.now)


def _tuples(key: str, value: Any) -> Any:
    return tuple(value) if key in ("nodes", "allow_groups") and isinstance(value, list) else value


def on_set_partition(tx: Transaction, ev: SetPartition) -> None:
    require(ev.caller, "partition", None)
    current = tx.state.partitions.get(ev.name)
    try:
        new = replace(current if current is not None else Partition(name=ev.name),
                      **{key: _tuples(key, value) for key, value in ev.changes})
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"partition {ev.name}: {exc}") from None
    if new != current:  # the same values again: nothing to record
        tx.apply(PartitionSet(partition=new))


def on_remove_partition(tx: Transaction, ev: RemovePartition) -> None:
    require(ev.caller, "partition", None)
    if ev.name not in tx.state.partitions:
        raise LocalProtocolError(f"unknown partition {ev.name!r}")
    tx.apply(PartitionRemoved(name=ev.name))
