"""`reckon bench resync-stages`: one resync round in-process, each stage timed.

The `resync` benchmark times a real round between real processes; this one
runs the same code (the models, the wire codec, the fact encoding) in one
process without sockets, SQLite or the event loop, so the cost of each stage
of the round's critical path can be read off per job:

  controller builds the query -> query encoded / decoded -> agent answers ->
  report encoded / decoded -> controller applies it -> facts encoded for the log

The daemons' interpreter settings (``runtime.tune`` / ``settle``) are applied
first, as the daemons do.
"""

from __future__ import annotations

import time
from typing import Any

import cbor2

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobSpec
from reckon.model.records import LocalJob, LocalStatus
from reckon.model.state import ControllerState, apply

from reckon.daemon import runtime, wire
from reckon.daemon.commands import facts_of

STAGES = (
    "controller builds the query", "query encoded", "query decoded", "agent answers",
    "report encoded", "report decoded", "controller applies the report", "facts encoded for the log",
)


def _world(jobs: int) -> tuple[Controller, Agent]:
    """N jobs placed on agent a1, all finished there while it was cut off."""
    spec = JobSpec(name="bench", command=("true",))
    state = ControllerState()
    apply(state, F.ClusterCreated(cluster="bench"))
    apply(state, F.AgentRegistered(agent="a1", slots=jobs))
    for i in range(1, jobs + 1):
        apply(state, F.JobSubmitted(job=str(i), spec=spec, submitted_at=1.0))
        apply(state, F.JobDispatched(job=str(i), attempt=1, agent="a1"))
    records = [LocalJob(job=str(i), attempt=1, spec=spec, status=LocalStatus.FINISHED, started_at=3.0,
                        exit_code=i % 3, finished_at=4.0 + i * 1e-6) for i in range(1, jobs + 1)]
    agent = Agent(AgentConfig(name="a1", slots=jobs), records=records, outbox=[r.report() for r in records],
                  cluster="bench")
    return Controller(ControllerConfig(), state), agent


def run_round(jobs: int) -> dict[str, float]:
    """Seconds per stage of one round over ``jobs`` jobs (one fact per job must come out)."""
    runtime.tune()
    controller, agent = _world(jobs)
    runtime.settle()
    now = 10.0
    timings: dict[str, float] = {}

    def timed(stage: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        result = fn()
        timings[stage] = time.perf_counter() - t0
        return result

    agent.handle(E.Connected(now=now))
    join = M.Join(agent="a1", slots=jobs, version=M.PROTOCOL_VERSION, running=0)
    commands = timed(STAGES[0], lambda: controller.handle(
        E.AgentJoined(conn=1, join=join, token=b"t" * M.TOKEN_BYTES, now=now)))
    queries = [c.message for c in commands if isinstance(c, E.Send)]
    blobs = timed(STAGES[1], lambda: [wire.encode(m) for m in queries])
    queries = timed(STAGES[2], lambda: [wire.decode(b, to="agent") for b in blobs])
    answered = timed(STAGES[3], lambda: [c for m in queries
                                         for c in agent.handle(E.MessageFromController(message=m, now=now))])
    pages = [c.message for c in answered if isinstance(c, E.Send) and isinstance(c.message, M.ResyncReport)]
    blobs = timed(STAGES[4], lambda: [wire.encode(m) for m in pages])
    pages = timed(STAGES[5], lambda: [wire.decode(b, to="controller") for b in blobs])
    applied = timed(STAGES[6], lambda: [c for m in pages
                                        for c in controller.handle(E.MessageFromAgent(conn=1, message=m, now=now))])
    facts = facts_of(applied)
    timed(STAGES[7], lambda: [cbor2.dumps(F.encode(f)) for f in facts])
    if len(facts) != jobs:
        raise RuntimeError(f"the round recorded {len(facts)} facts for {jobs} finished jobs")
    return timings
