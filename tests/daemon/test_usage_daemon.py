"""Issue #22 through the controller's daemon: an attempt lost with its agent is charged fair share's
CPU-seconds up to the loss, from the fact as stored (JobRequeued v2 ``requeued_at``), so the
controller rebuilt from its store has the live usage."""

from __future__ import annotations

import secrets

import pytest
import trio

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.jobs import JobSpec, JobState
from reckon.model.permissions import Caller
from tests.daemon.trio_harness import TrioWall, controller, patch_controller, until
from tests.model.usage_check import usage_from_log

GUARD = 1_000  # fake seconds; a passing test is far below it
ALICE = Caller(uid=1000, gid=1000, user="alice")
SPEC = JobSpec(name="j", command=("true",), slots=2)


async def test_an_attempt_lost_with_its_agent_is_charged_and_the_store_replays_it(tmp_path, autojump_clock,
                                                                                   monkeypatch):
    wall = TrioWall()  # the daemon's wall clock moves with trio's fake one
    patch_controller(monkeypatch, "time", wall)
    lost_after = 60.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=10_000, lost_after=lost_after) as ctl:
            peer, _ = await ctl.join("n1", slots=2)
            await peer.expect(M.Welcome)
            commands = await ctl.daemon.call(event=E.SubmitJob(spec=SPEC, now=wall.time(), caller=ALICE,
                                                               uid=secrets.token_hex(8)))
            [job] = [f.job for c in commands if isinstance(c, E.Append) for f in c.facts
                     if isinstance(f, F.JobSubmitted)]
            dispatch = await peer.expect(M.Dispatch)
            started = wall.time()
            await peer.send(M.Started(job=job, attempt=dispatch.attempt, started_at=started, uid=dispatch.uid))
            await until(lambda: ctl.job(job).started_at is not None)  # the connection's reader hands it on
            assert ctl.job(job).started_at == started
            await peer.aclose()
            while ctl.node("n1") != "LOST":
                await trio.sleep(0.5)
            assert ctl.job(job).state is JobState.PENDING
            [requeued] = [f for f in await ctl.store.durable() if isinstance(f, F.JobRequeued)]
            assert requeued.reason == "agent lost" and requeued.requeued_at - started == pytest.approx(lost_after, abs=2.0)
            live = ctl.daemon.model.state.usage
            at = requeued.requeued_at
            assert live.at("alice", at) == pytest.approx(2 * (requeued.requeued_at - started), rel=1e-3)
            durable = await ctl.store.durable()
            assert Controller.from_log(durable).state.usage.key() == live.key()
            assert usage_from_log(durable, at) == pytest.approx({"alice": live.at("alice", at)}, rel=1e-9)
            ctl.nursery.cancel_scope.cancel()
