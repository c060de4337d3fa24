"""Helpers the fact-store, agent-store and PostgreSQL tests share."""

from __future__ import annotations

import functools

import trio

from reckon.model import facts as F
from reckon.model.jobs import JobSpec


def hang_guard(fn):
    """Fail a test that hangs instead of blocking the run."""

    @functools.wraps(fn)
    async def guarded(*args, **kwargs):
        with trio.fail_after(60):
            return await fn(*args, **kwargs)

    return guarded


def submits(first: int, n: int) -> list[F.Fact]:
    spec = JobSpec(name="s", command=("true",))
    return [F.JobSubmitted(job=str(i), spec=spec, submitted_at=float(i)) for i in range(first, first + n)]
