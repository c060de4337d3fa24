"""``LocalRecords``: the agent's record table keeps its held digest and expiry heap current."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reckon.model import messages as M
from reckon.model.records import LocalJob, LocalRecords, LocalStatus


def running(job: str, attempt: int = 1) -> LocalJob:
    return LocalJob(job=job, attempt=attempt, spec=None)


def finished(job: str, at: float, acked: bool, attempt: int = 1) -> LocalJob:
    return replace(running(job, attempt), status=LocalStatus.FINISHED, exit_code=0, finished_at=at, acked=acked)


def recount(records: LocalRecords) -> tuple[int, int]:
    held = [key for key, r in records.items() if r.held]
    return len(held), M.running_digest(held)


def kept(records: LocalRecords) -> tuple[int, int]:
    return records.held_count, records.held_digest


def test_held_digest_follows_every_kind_of_change():
    records = LocalRecords([running("1"), running("2"), finished("3", 5.0, acked=True)])
    assert kept(records) == recount(records) == (2, M.running_digest([("1", 1), ("2", 1)]))
    records[("1", 1)] = finished("1", 6.0, acked=False)  # still held: the outcome is not acked
    assert kept(records) == recount(records) and records.held_count == 2
    records[("1", 1)] = finished("1", 6.0, acked=True)  # acked: no longer held
    assert kept(records) == recount(records) == (1, M.running_digest([("2", 1)]))
    records[("4", 2)] = replace(running("4", 2), status=LocalStatus.INDETERMINATE)  # never held
    assert kept(records) == recount(records) and records.held_count == 1
    del records[("2", 1)]  # a held record leaves
    assert kept(records) == recount(records) == (0, 0)
    records.update({("5", 1): running("5")})
    assert records.pop(("5", 1)).job == "5"
    records.clear()
    assert kept(records) == (0, 0) and len(records) == 0


def test_a_record_under_another_key_is_refused_and_changes_nothing():
    records = LocalRecords([running("1")])
    with pytest.raises(KeyError):
        records[("2", 1)] = running("1")
    assert list(records) == [("1", 1)] and kept(records) == recount(records)


def test_expired_lists_old_acked_records_once_oldest_first():
    records = LocalRecords([finished("1", 30.0, acked=True), finished("2", 10.0, acked=True),
                            finished("3", 20.0, acked=False), running("4")])
    records[("2", 1)] = finished("2", 10.0, acked=True)  # stored twice: listed once
    assert records.expired(25.0) == [("2", 1)]  # "3" is not acked, "1" is too recent
    assert records.expired(25.0) == []  # already handed out
    records[("3", 1)] = finished("3", 20.0, acked=True)
    del records[("1", 1)]  # gone before it expired: its heap entry is stale
    assert records.expired(100.0) == [("3", 1)]


def test_a_record_that_changed_after_it_was_queued_is_judged_as_it_is_now():
    records = LocalRecords([finished("1", 10.0, acked=True)])
    records[("1", 1)] = finished("1", 50.0, acked=True)  # e.g. a corrected finish time
    assert records.expired(20.0) == []
    assert records.expired(60.0) == [("1", 1)]
