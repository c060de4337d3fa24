"""Realistic controller history for the restart benchmark.

Drives the real model (joins, submits, dispatches, starts, finishes) and
writes its facts with the production fact store and snapshot policy, exactly
as a controller that had lived through that history would have left them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.facts import JobSubmitted
from reckon.model.jobs import JobSpec
from reckon.model.state import snapshot

from reckon.daemon.commands import facts_of
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.store.facts import FactStore

BATCH_JOBS = 2_500


async def write_history(state_dir: Path, facts: int) -> dict[str, Any]:
    options = ControllerOptions()
    controller = Controller()
    spec = JobSpec(name="history", command=("true",))
    store = await FactStore.open(state_dir)
    try:
        join = M.Join(agent="agent-1", slots=BATCH_JOBS, version=M.PROTOCOL_VERSION)
        pending = facts_of(controller.handle(E.AgentJoined(conn=1, join=join, token=bytes(16), now=1.0)))
        written, jobs, now = 0, 0, 2.0
        while written + len(pending) < facts:
            batch: list[str] = []
            for _ in range(BATCH_JOBS):
                pending += facts_of(controller.handle(E.SubmitJob(spec=spec, now=now)))
                batch.append(controller.state.next_job_id())
            for job in [str(int(j) - 1) for j in batch]:
                pending += facts_of(controller.handle(E.DispatchProposed(job=job, agent="agent-1", now=now)))
                for msg in (M.Started(job=job, attempt=1, started_at=now),
                            M.Finished(job=job, attempt=1, exit_code=0, signal=None, finished_at=now + 0.5)):
                    pending += facts_of(controller.handle(E.MessageFromAgent(conn=1, message=msg, now=now)))
            take = pending[: facts - written]
            pending = pending[len(take):]
            await store.append(take)
            written += len(take)
            jobs += sum(isinstance(f, JobSubmitted) for f in take)
            now += 1.0
            if not pending and store.facts_since_snapshot >= options.snapshot_every:
                await store.write_snapshot(snapshot(controller.state), store.last_seq)
        return {"jobs": jobs, "facts_written": written, "facts_after_snapshot": store.facts_since_snapshot}
    finally:
        await store.aclose()
