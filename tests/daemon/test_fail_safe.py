"""The controller fails safe, through the real daemon over a socket (real SQLite, real WebSockets).

* A frame no controller should die of gets an error and the connection closed: a ``Join`` whose
  ``generation`` is the largest the wire allows (the model refuses it before applying anything;
  the next generation would not fit the wire).
* A client's request that fails in the core loop answers that client and stops nothing: drain (or
  resume) and then a ``reckon forget`` of the same agent between the drain and its read-back.
* A model that raised after applying a fact stops the controller with ``ModelCorrupted``, and
  nothing of that batch is committed; the command line says so in one line.
* With ``validate_state`` (``RECKON_VALIDATE_STATE=1``) the state check runs after every handle,
  and a failing one stops the controller the same way.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url

from reckon.daemon import wire
from reckon.daemon.cli import daemons
from reckon.daemon.client import ClientError, call
from reckon.daemon.controller import core, operator
from reckon.daemon.controller.server import ControllerOptions, serve_controller
from reckon.daemon.store.interface import SteppedDown
from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.controller import Controller
from reckon.model.errors import ModelCorrupted
from reckon.model.jobs import JobSpec
from reckon.model.facts import AgentDrained
from reckon.model.state import ControllerState, apply

HANG_GUARD = 60  # seconds: a real clock; never reached by a passing test


def _leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        (group,) = group.exceptions
    return group


def _committed_facts(state_dir) -> int:
    with sqlite3.connect(state_dir / "controller.db") as db:
        return db.execute("select count(*) from fact").fetchone()[0]


async def _join(url: str, name: str, **fields) -> M.Message:
    """One agent connection: a Join, and the controller's first answer."""
    async with open_websocket_url(url + "/agent") as ws:
        join = M.Join(agent=name, slots=1, version=M.PROTOCOL_VERSION, identity=secrets.token_hex(16),
                      instance=secrets.token_hex(8), **fields)
        await ws.send_message(wire.encode(join))
        return wire.decode_frame(await ws.get_message(), to="agent")[0]


async def _serving(nursery: trio.Nursery, tmp_path, **options) -> str:
    port, _ = await nursery.start(serve_controller, ControllerOptions(
        host="127.0.0.1", port=0, state_dir=tmp_path / "controller", rejoin_grace=0, **options))
    return f"ws://127.0.0.1:{port}"


async def test_a_join_at_the_largest_generation_is_refused_and_the_controller_serves_on(tmp_path):
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            url = await _serving(nursery, tmp_path)
            before = (await call(url, None, "status"))["status"]["facts"]
            answer = await _join(url, "n1", generation=M.MAX_GENERATION)
            assert isinstance(answer, M.Error) and "generation" in answer.reason
            status = (await call(url, None, "status"))["status"]  # and it still serves
            assert status["facts"] == before  # nothing of the refused join was recorded
            welcome = await _join(url, "n2", generation=0)  # nor does it refuse a good join
            assert isinstance(welcome, M.Welcome)
            nursery.cancel_scope.cancel()


async def _disconnected(url: str, name: str) -> None:
    while [n["state"] for n in (await call(url, None, "nodes"))["nodes"] if n["name"] == name] != ["DISCONNECTED"]:
        await trio.sleep(0.05)


async def test_a_forget_between_a_drain_and_its_read_back_answers_and_stops_nothing(tmp_path, monkeypatch):
    """The drain's two turns of the core loop, and a forget of the agent run between them."""
    daemon_call = core.ControllerDaemon.call

    async def forget_after_a_drain(self, event=None, call=None):
        result = await daemon_call(self, event=event, call=call)
        if isinstance(event, E.DrainAgent):  # the drain is durable; before its read-back, the forget:
            await daemon_call(self, event=E.ForgetAgent(agent=event.agent, now=event.now))
        return result

    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            url = await _serving(nursery, tmp_path)
            assert isinstance(await _join(url, "n1"), M.Welcome)
            await _disconnected(url, "n1")  # (a connected agent cannot be forgotten)
            monkeypatch.setattr(core.ControllerDaemon, "call", forget_after_a_drain)
            with pytest.raises(ClientError, match="^agent n1 was drained, then forgotten before its state"):
                await call(url, None, "drain", agent="n1")
            monkeypatch.setattr(core.ControllerDaemon, "call", daemon_call)
            assert (await call(url, None, "nodes"))["nodes"] == []  # the controller still serves: n1 is gone
            nursery.cancel_scope.cancel()


async def test_a_client_read_that_fails_answers_that_client_only(tmp_path, monkeypatch):
    def broken(daemon, job_id):
        raise StopIteration  # what the drain's old read-back raised on a forgotten agent

    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            url = await _serving(nursery, tmp_path)
            monkeypatch.setattr(operator, "job_with_reason", broken)
            with pytest.raises(ClientError, match="the controller could not answer: StopIteration"):
                await call(url, None, "show", job="1")
            assert (await call(url, None, "status"))["status"]["pid"]
            nursery.cancel_scope.cancel()


async def _stopped(tmp_path, break_it, op: str, options: dict | None = None, **fields) -> BaseException:
    """Serve, join agent n1, ``break_it()``, then ask ``op``: the controller must stop with
    ``ModelCorrupted`` (returned) and have committed nothing after the join."""
    with trio.fail_after(HANG_GUARD):
        with pytest.raises(BaseExceptionGroup) as stopped:
            async with trio.open_nursery() as nursery:
                url = await _serving(nursery, tmp_path, **(options or {}))
                assert isinstance(await _join(url, "n1"), M.Welcome)
                before = _committed_facts(tmp_path / "controller")
                break_it()
                await call(url, None, op, **fields)
                nursery.cancel_scope.cancel()  # (it answered: no stop, and pytest.raises says so)
    corrupted = _leaf(stopped.value.split(ModelCorrupted)[0])
    assert isinstance(corrupted, ModelCorrupted)
    assert _committed_facts(tmp_path / "controller") == before  # nothing of the failed batch reached the log
    return corrupted


async def test_a_client_closure_that_applied_a_fact_then_raised_stops_the_controller(tmp_path, monkeypatch):
    def applies_then_breaks(daemon, job_id):
        apply(daemon.model.state, AgentDrained(agent="n1"))
        raise KeyError(job_id)

    corrupted = await _stopped(tmp_path, lambda: monkeypatch.setattr(operator, "job_with_reason", applies_then_breaks),
                               "show", job="1")
    assert str(corrupted) == "a client request raised KeyError('1') after the model applied 1 fact(s)"


async def test_a_model_that_raised_after_applying_a_fact_stops_the_controller_committing_nothing(
        tmp_path, monkeypatch):
    real_handle = Controller.handle

    def handle(self, event):
        commands = real_handle(self, event)
        if isinstance(event, E.DrainAgent):
            raise ModelCorrupted("DrainAgent: ValueError('broken after its fact') after applying AgentDrained")
        return commands

    corrupted = await _stopped(tmp_path, lambda: monkeypatch.setattr(Controller, "handle", handle),
                               "drain", agent="n1")
    line = daemons.model_corrupted_text(corrupted)
    assert "\n" not in line and line.startswith("controller stopped: DrainAgent")


async def test_a_bare_exception_from_the_model_is_a_model_corrupted_stop_too(tmp_path, monkeypatch):
    """Before the model wraps its own failures: the daemon cannot tell what a raising handler changed."""
    real_handle = Controller.handle

    def handle(self, event):
        if isinstance(event, E.DrainAgent):
            raise ValueError("a bug in a handler")
        return real_handle(self, event)

    corrupted = await _stopped(tmp_path, lambda: monkeypatch.setattr(Controller, "handle", handle),
                               "drain", agent="n1")
    assert str(corrupted) == "the model failed on DrainAgent: ValueError('a bug in a handler')"


async def test_validate_state_runs_after_every_handle_and_stops_on_a_failed_check(tmp_path, monkeypatch):
    checked: list[int] = []

    def validate_state(self):
        checked.append(self.facts_applied)
        if any(a.drained for a in self.agents.values()):
            raise AssertionError("an index disagrees with the records")

    def joined() -> None:
        assert len(checked) >= 2  # at the start, and after the join

    monkeypatch.setattr(ControllerState, "validate_state", validate_state)
    corrupted = await _stopped(tmp_path, joined, "drain", options={"validate_state": True}, agent="n1")
    assert str(corrupted) == "the state check failed after DrainAgent: an index disagrees with the records"


async def test_without_validate_state_the_check_does_not_run(tmp_path, monkeypatch):
    checked: list[int] = []
    monkeypatch.setattr(ControllerState, "validate_state", lambda self: checked.append(1))
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            url = await _serving(nursery, tmp_path)
            assert isinstance(await _join(url, "n1"), M.Welcome)
            nursery.cancel_scope.cancel()
    assert checked == []


def test_the_controller_command_reads_validate_state_from_the_environment(monkeypatch):
    seen = []

    async def serve(options, *, task_status):
        seen.append(options.validate_state)
        raise ModelCorrupted("stop here")

    monkeypatch.setattr("reckon.daemon.controller.server.serve_controller", serve)
    monkeypatch.setenv("RECKON_VALIDATE_STATE", "1")
    from reckon.daemon.cli.main import parse

    with pytest.raises(ClientError, match="^controller stopped: stop here; nothing of it was committed"):
        daemons.run_daemon_command(parse(["controller", "--state-dir", "/nonexistent-reckon-test"]))
    monkeypatch.delenv("RECKON_VALIDATE_STATE")
    with pytest.raises(ClientError):
        daemons.run_daemon_command(parse(["controller", "--state-dir", "/nonexistent-reckon-test"]))
    assert seen == [True, False]


async def test_chaos_starts_its_controllers_with_the_state_check(tmp_path):
    """The real process's environment: `reckon chaos` controllers run with RECKON_VALIDATE_STATE=1, agents not."""
    from reckon.daemon.chaos.run import ChaosConfig, ChaosRun
    from reckon.daemon.chaos.schedule import make_plan

    plan = make_plan(seed=1, duration=1, agents=["a1"], jobs=1, fault_every=10, max_outage=1)
    run = ChaosRun(ChaosConfig(plan=plan, agents=("a1",), slots=1, duration=1, settle_timeout=1, quiet=True),
                   tmp_path)
    cluster = run.cluster
    try:
        with trio.fail_after(HANG_GUARD):
            await cluster.start_controller()
            await cluster.start_agent("a1", 1)
        environ = {key: Path(f"/proc/{cluster.pid(key)}/environ").read_bytes() for key in ("controller", "a1")}
    finally:
        cluster.stop_all()
    assert b"RECKON_VALIDATE_STATE=1\0" in environ["controller"]
    assert b"RECKON_VALIDATE_STATE" not in environ["a1"]


async def _leading(url: str) -> None:
    while True:
        try:
            await call(url, None, "status")
            return
        except ClientError:  # not the leader yet
            await trio.sleep(0.05)


async def _pg_facts(dsn: str) -> int:
    """On a thread: the controller's own database session must not wait for the event loop."""
    import psycopg

    def count() -> int:
        with psycopg.connect(dsn) as db:
            return db.execute("select count(*) from fact").fetchone()[0]

    return await trio.to_thread.run_sync(count)


async def test_on_postgresql_a_model_failure_stops_the_leader_as_model_corrupted(pg_dsn, tmp_path, monkeypatch):
    """The HA path stops the same way: ModelCorrupted, not a failed commit or a step-down."""
    real_handle = Controller.handle

    def handle(self, event):
        commands = real_handle(self, event)
        if isinstance(event, E.SubmitJob):
            raise ModelCorrupted("SubmitJob: ValueError('broken after its fact')")
        return commands

    with trio.fail_after(HANG_GUARD):
        with pytest.raises(BaseExceptionGroup) as stopped:
            async with trio.open_nursery() as nursery:
                url = await _serving(nursery, tmp_path, store=pg_dsn, lease=1.0)
                await _leading(url)
                before = await _pg_facts(pg_dsn)
                monkeypatch.setattr(Controller, "handle", handle)
                await call(url, None, "submit", spec=JobSpec(name="j", command=("true",)).to_dict())
                nursery.cancel_scope.cancel()
    corrupted = _leaf(stopped.value.split(ModelCorrupted)[0])
    assert str(corrupted) == "SubmitJob: ValueError('broken after its fact')"
    assert stopped.value.split(SteppedDown)[0] is None  # (a failed commit would step down)
    assert await _pg_facts(pg_dsn) == before
