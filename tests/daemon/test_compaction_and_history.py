"""The fact log after a pruning snapshot: controller.db shrinks (VACUUM on the store's thread),
and a job's history read from the log says when older history was compacted (issue #11)."""

from __future__ import annotations

import os

import trio

from reckon.daemon.store.facts import FactStore
from reckon.model import facts as F
from reckon.model.history import job_history
from reckon.model.jobs import JobSpec
from reckon.model.state import replay, snapshot


def _many_jobs(n: int) -> list[F.Fact]:
    out: list[F.Fact] = [F.AgentRegistered(agent="a1", slots=1 << 20)]
    for j in range(1, n + 1):
        job = str(j)
        # A large spec: the facts take many pages, which the prune frees.
        spec = JobSpec(name=f"job-{j}", command=("sh", "-c", "x" * 2000))
        out += [F.JobSubmitted(job=job, spec=spec, submitted_at=1.0),
                F.JobDispatched(job=job, attempt=1, agent="a1"),
                F.JobFinished(job=job, attempt=1, exit_code=0, signal=None, finished_at=2.0, via="report")]
    return out


def _db_bytes(state_dir) -> int:
    # The main file plus its write-ahead log: what the database occupies on disk.
    return sum(os.path.getsize(p) for p in state_dir.glob("controller.db*"))


async def test_pruning_snapshot_shrinks_the_database_file(tmp_path):
    with trio.fail_after(60):
        facts = _many_jobs(2000)
        async with await FactStore.open(tmp_path) as store:
            await store.append(facts)
            grown = _db_bytes(tmp_path)
            await store.write_snapshot(snapshot(replay(facts)), len(facts))
            shrunk = _db_bytes(tmp_path)
        assert grown > 4_000_000  # 2000 facts of 2 kB
        assert shrunk < grown / 2, (grown, shrunk)  # the snapshot (one row) is what stays


async def test_history_after_a_snapshot_says_it_was_compacted(tmp_path):
    with trio.fail_after(60):
        facts = _many_jobs(3)
        async with await FactStore.open(tmp_path) as store:
            await store.append(facts)
            before = job_history("2", await store.facts_about("2"))
            assert not before.compacted and [a.ended for a in before.attempts.values()] == ["finished"]
            assert before.attempts[1].via == "report"
            await store.write_snapshot(snapshot(replay(facts)), len(facts))
            later = [F.JobSubmitted(job="4", spec=JobSpec(name="j4", command=("true",)), submitted_at=3.0)]
            await store.append(later)
            after = job_history("2", await store.facts_about("2"))
            assert after.compacted and after.attempts == {}
            assert not job_history("4", await store.facts_about("4")).compacted
