"""Two agent daemons with one name, and other permanent refusals (issue #9, bug 1), under the mock clock.

The real ``run_agent`` (twice, with state directories of their own) against a
real ``ControllerDaemon`` over memory streams (trio_harness.FakeNet): the
second agent is refused for good, the first keeps its connection and its
jobs, the fact log does not grow, and each side logs the refusal once (plus
at most a reminder), not once per attempt, while the refused agent keeps
trying at its slow refusal pace.

Invariant: INV-NAME-HANDOVER (docs/invariants.md).
"""

from __future__ import annotations

import logging

import pytest
import trio

from reckon.daemon.agent.daemon import REFUSAL_RETRY_FIRST, run_agent
from reckon.daemon.store.statelock import WrongStateDir
from reckon.model.jobs import JobState
from tests.daemon.test_agent_daemon import install, options, start_agent
from reckon.model import facts as F
from reckon.model import messages as M
from tests.daemon.trio_harness import SPEC, FakeNet, ManualRunner, TestFactStore, controller, until

GUARD = 3_000  # fake seconds
WINDOW = 590.0  # fake seconds watched: under the controller's reminder interval (600 s)
HELD = "agent name n1 is held by another agent"


def lines(caplog, logger: str, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and text in r.getMessage()]


async def test_a_second_agent_with_the_same_name_is_refused_and_disturbs_nothing(
        tmp_path, autojump_clock, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="reckon")
    with trio.fail_after(GUARD):
        async with controller(tmp_path / "controller") as rig, trio.open_nursery() as nursery:
            net = FakeNet(nursery, server=rig.daemon)
            install(monkeypatch, net)
            net.up = True
            first, _, _ = await start_agent(nursery, options(tmp_path / "first"))
            await first.joined.wait()
            jobs = [await rig.submit(), await rig.submit()]
            runner: ManualRunner = first.runner
            await until(lambda: all(rig.job(j).started_at is not None for j in jobs))
            facts = len(await rig.store.durable())
            holder_conn = rig.daemon.model.sessions["n1"].conn
            attempts_before = len(net.attempts)

            second, second_scope, second_stopped = await start_agent(nursery, options(tmp_path / "second"))
            assert second.model.config.identity != first.model.config.identity
            await until(lambda: lines(caplog, "reckon.agent", HELD))
            t0 = trio.current_time()
            await trio.sleep(WINDOW)

            # The holder is undisturbed: the same connection, its jobs placed and running.
            assert rig.daemon.model.sessions["n1"].conn == holder_conn
            assert first.model.session.value == "operating"
            assert sorted(runner.running) == [(j, 1) for j in jobs]
            assert all(rig.job(j).state is JobState.RUNNING and rig.job(j).attempt == 1 for j in jobs)
            assert len(await rig.store.durable()) == facts, "a refused join wrote facts"
            assert second.runner._started == set()  # the duplicate never ran anything

            # The duplicate keeps trying, at the refusal pace: not once a second.
            assert not second_stopped.is_set()
            tries = [t for t in net.attempts[attempts_before:] if t >= t0]
            assert 3 <= len(tries) <= 2 * WINDOW / (REFUSAL_RETRY_FIRST * 2) + 5, len(tries)
            gaps = [b - a for a, b in zip(tries, tries[1:])]
            assert max(gaps) <= 60.0 + 1e-6 and sorted(gaps)[len(gaps) // 2] >= 15.0, gaps

            # Logged once on each side (the agent adds one reminder after 300 s), not per attempt.
            controller_lines = lines(caplog, "reckon.controller", HELD)
            assert controller_lines == [f"refused agent n1 from ?: {HELD}"], controller_lines
            agent_lines = lines(caplog, "reckon.agent", HELD)
            assert len(agent_lines) == 2 and agent_lines[1].startswith("still refused"), agent_lines
            chatty = [r.getMessage() for r in caplog.records
                      if r.name.startswith("reckon") and r.levelno >= logging.INFO and r.created >= 0]
            assert len(chatty) < 40, chatty  # the whole run, both daemons, every level from INFO

            # The holder's jobs finish once, on the holder.
            for job in jobs:
                runner.finish(job, 1, exit_code=0, finished_at=1_650_000_000.0)
            await until(lambda: all(rig.job(j).state is JobState.COMPLETED for j in jobs))
            assert all(rig.job(j).attempt == 1 and rig.job(j).ran_on == "n1" for j in jobs)
            second_scope.cancel()
            nursery.cancel_scope.cancel()


async def test_a_bad_token_is_retried_at_the_refusal_pace_and_logged_once(
        tmp_path, autojump_clock, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="reckon")
    with trio.fail_after(GUARD):
        async with controller(tmp_path / "controller") as rig, trio.open_nursery() as nursery:
            net = FakeNet(nursery, server=rig.daemon)
            install(monkeypatch, net)
            net.up = True
            opts = options(tmp_path / "rogue")
            rogue, _, stopped = await start_agent(nursery, type(opts)(**{
                **{f: getattr(opts, f) for f in opts.__dataclass_fields__}, "token": "wrong"}))
            await trio.sleep(WINDOW)
            assert not stopped.is_set() and "n1" not in rig.daemon.model.state.agents
            assert 3 <= len(net.attempts) <= 30, len(net.attempts)
            assert len(lines(caplog, "reckon.agent", "refused us (401): bad token")) == 2  # the first, a reminder
            assert len(lines(caplog, "reckon.controller", "bad token")) == 1
            nursery.cancel_scope.cancel()


async def test_a_state_directory_starts_only_under_its_first_name(tmp_path, autojump_clock, monkeypatch):
    net = None
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            agent, scope, stopped = await start_agent(nursery, options(tmp_path / "agent"))
            identity = agent.model.config.identity
            scope.cancel()
            await stopped.wait()
            opts = options(tmp_path / "agent")
            renamed = type(opts)(**{**{f: getattr(opts, f) for f in opts.__dataclass_fields__}, "name": "n2"})
            with pytest.raises(WrongStateDir, match="belongs to agent 'n1', not 'n2'"):
                await run_agent(renamed)
            again, scope, _ = await start_agent(nursery, options(tmp_path / "agent"))
            assert again.model.config.identity == identity  # durable: the same agent after a restart
            nursery.cancel_scope.cancel()


async def test_another_controller_history_is_refused_at_the_refusal_pace(tmp_path, autojump_clock, monkeypatch, caplog):
    """The agent's own refusal (it still runs a job of another history) is not retried like an outage."""
    caplog.set_level(logging.INFO, logger="reckon")
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)  # a scripted controller
            install(monkeypatch, net)
            net.up = True
            agent, _, stopped = await start_agent(nursery, options(tmp_path / "agent"))
            ctl = await net.accepted.receive()
            await ctl.receive()  # the join
            await ctl.send(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, cluster="c1"))
            await ctl.send(M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC))
            await until(lambda: ("1", 1) in agent.runner.running)
            await net.cut()

            async def new_history() -> None:  # every later connection: a controller started afresh
                async for peer in net.accepted:
                    await peer.receive()
                    await peer.send(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, cluster="c2"))

            nursery.start_soon(new_history)
            t0 = trio.current_time()
            await until(lambda: lines(caplog, "reckon.agent", "refusing to mix them"))
            await trio.sleep(WINDOW)
            tries = [t for t in net.attempts if t >= t0]
            assert 3 <= len(tries) <= 30, len(tries)
            assert not stopped.is_set() and ("1", 1) in agent.runner.running  # the old job is kept, not lost
            assert len(lines(caplog, "reckon.agent", "refusing to mix them")) == 2  # the first, one reminder
            assert lines(caplog, "reckon.agent", "connected to") == ["connected to ws://controller.test"] * 2
            nursery.cancel_scope.cancel()


NEW_NAME = "agent name n1 is new to this controller"


async def test_a_new_agent_during_a_starts_hold_waits_for_it_and_logs_it_once(
        tmp_path, autojump_clock, monkeypatch, caplog):
    """After a start with a PENDING job the controller holds names it does not know (a restored copy
    may predate an agent's first join, model/names.py): a fresh agent is refused for now, retries at
    the outage pace without a log line per attempt, and joins when the grace ends."""
    caplog.set_level(logging.INFO, logger="reckon")
    with trio.fail_after(GUARD):
        store = await TestFactStore.open(tmp_path / "controller")
        await store.append([F.ClusterCreated(cluster="c0ffee00c0ffee00")])  # as serve names a new history
        await store.aclose()
        async with controller(tmp_path / "controller") as rig:
            job = await rig.submit()  # no agent: it stays PENDING
        async with controller(tmp_path / "controller") as rig, trio.open_nursery() as nursery:
            assert rig.daemon.model.start_gate is not None
            net = FakeNet(nursery, server=rig.daemon)
            install(monkeypatch, net)
            net.up = True
            agent, _, _ = await start_agent(nursery, options(tmp_path / "fresh"))
            await agent.joined.wait()
            assert rig.daemon.model.start_gate is None  # it joined only once the hold was over
            assert len(net.attempts) >= 5  # it kept trying at the outage pace meanwhile
            assert len(lines(caplog, "reckon.agent", NEW_NAME)) == 1
            assert len(lines(caplog, "reckon.controller", NEW_NAME)) == 1
            assert len(lines(caplog, "reckon.agent", "connected to")) <= 1
            await until(lambda: rig.job(job).state is JobState.RUNNING)
            nursery.cancel_scope.cancel()
