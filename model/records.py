"""The agent's durable job records, kept in a table that keeps its own indexes.

Heartbeats carry a digest of the set of attempts the agent holds, and ticks
let go of acknowledged records once they are old.  Both used to scan every
record on every tick: at tens of thousands of jobs on one agent that scan was
nearly all of the agent's CPU, and a busy agent fell silent.  ``LocalRecords``
keeps the held set's count and digest up to date on every change, and the
expiry candidates in a heap, so a tick costs what changed, not what exists.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import ItemsView, Iterable, Iterator, KeysView, MutableMapping, ValuesView
from dataclasses import dataclass

from . import messages as M
from .jobs import JobSpec
from .resources import Owner, Usage

Key = tuple[str, int]


class LocalStatus(enum.Enum):
    RUNNING = "running"  # the supervised process is (as far as we know) alive
    FINISHED = "finished"  # the supervisor recorded its end: exit code / signal and time
    INDETERMINATE = "indeterminate"  # after a restart we cannot tell: reported as unrecognized, then let go


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalJob:
    """The agent's durable record of one attempt it was given."""

    job: str
    attempt: int
    spec: JobSpec | None
    status: LocalStatus = LocalStatus.RUNNING
    started_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    # FINISHED: when the job ended.  INDETERMINATE: when the agent gave up on
    # knowing (the clock of its expiry; it is never reported as an outcome).
    finished_at: float | None = None
    acked: bool = False  # the controller acknowledged the completion report
    uid: str | None = None  # the submission the dispatch was for (None: a version 1-2 controller sent none)
    timed_out: bool = False  # FINISHED: the supervisor stopped the process at the job's time limit
    owner: Owner | None = None  # whom the attempt runs as (Dispatch.owner; None: the agent's own user)
    # Issue #20: the GPU indices the dispatch gave it (kept durably: they are reported while it
    # runs, so a controller that lost the dispatch adopts it with the same GPUs); FINISHED: what
    # it used, and whether it was killed for its memory.
    gpus: tuple[int, ...] = ()
    usage: Usage | None = None
    oom: bool = False
    not_run: str | None = None  # FINISHED: the supervisor refused to start it, and why

    @property
    def key(self) -> tuple[str, int]:
        return (self.job, self.attempt)

    @property
    def held(self) -> bool:
        """Part of the set the controller should place here (heartbeat digest).

        An indeterminate attempt is not: the agent cannot vouch for it, so the
        digest disagrees with the controller's placement, an anti-entropy round
        asks about it, and it is reported unrecognized (Req 3.3, 4.6) instead of
        sitting RUNNING forever behind matching heartbeats.
        """
        if self.status is LocalStatus.INDETERMINATE:
            return False
        return self.status is not LocalStatus.FINISHED or not self.acked

    @property
    def expirable(self) -> bool:
        """Let go of once it is older than the recent window: finished and
        acknowledged, or indeterminate (it holds no process and no outcome, so
        after the window an unknown attempt is answered the same way: unrecognized)."""
        return (self.status is LocalStatus.FINISHED and self.acked) or self.status is LocalStatus.INDETERMINATE

    def report(self) -> M.Finished:
        assert self.status is LocalStatus.FINISHED and self.finished_at is not None
        return M.Finished(job=self.job, attempt=self.attempt, exit_code=self.exit_code, signal=self.signal,
                          finished_at=self.finished_at, started_at=self.started_at, uid=self.uid,
                          timed_out=self.timed_out, usage=self.usage, oom=self.oom, not_run=self.not_run)


class LocalRecords(MutableMapping[Key, LocalJob]):
    """(job, attempt) -> LocalJob, with the held set's count and digest kept current.

    Every change goes through ``__setitem__`` / ``__delitem__`` (``pop``,
    ``clear`` and ``update`` come from ``MutableMapping`` and use them), so the
    indexes cannot drift from the records however the table is changed.
    """

    __slots__ = ("_records", "held_count", "held_digest", "_expiry")

    def __init__(self, records: Iterable[LocalJob] = ()) -> None:
        self._records: dict[Key, LocalJob] = {}
        self.held_count = 0  # how many records are held (see LocalJob.held)
        self.held_digest = 0  # messages.running_digest() of the held keys
        # (finished_at, key) of expirable records, oldest first.  Entries go
        # stale when a record changes or leaves; expired() checks each one.
        self._expiry: list[tuple[float, Key]] = []
        for record in records:
            self[record.key] = record

    def __getitem__(self, key: Key) -> LocalJob:
        return self._records[key]

    def get(self, key: Key, default: LocalJob | None = None) -> LocalJob | None:  # type: ignore[override]
        return self._records.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __iter__(self) -> Iterator[Key]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def keys(self) -> KeysView[Key]:
        return self._records.keys()

    def values(self) -> ValuesView[LocalJob]:
        return self._records.values()

    def items(self) -> ItemsView[Key, LocalJob]:
        return self._records.items()

    def __setitem__(self, key: Key, record: LocalJob) -> None:
        if key != record.key:
            raise KeyError(f"record {record.key} stored under {key}")
        old = self._records.get(key)
        if old is not None and old.held:
            self._toggle(key, -1)
        self._records[key] = record
        if record.held:
            self._toggle(key, +1)
        if record.expirable:
            heapq.heappush(self._expiry, (record.finished_at or 0.0, key))

    def __delitem__(self, key: Key) -> None:
        old = self._records.pop(key)
        if old.held:
            self._toggle(key, -1)

    def _toggle(self, key: Key, sign: int) -> None:
        self.held_count += sign
        self.held_digest ^= M.pair_hash(*key)

    def expired(self, horizon: float) -> list[Key]:
        """Keys of expirable records that finished (or were given up on) before ``horizon``."""
        due: dict[Key, None] = {}  # ordered, and a key met twice is listed once
        while self._expiry and self._expiry[0][0] < horizon:
            _, key = heapq.heappop(self._expiry)
            record = self._records.get(key)
            if record is not None and record.expirable and (record.finished_at or 0.0) < horizon:
                due[key] = None
        return list(due)
