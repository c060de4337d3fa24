"""The agent daemon (daemon/agent/daemon.py) under trio's mock clock.

``run_agent`` itself runs, with its real AgentStore (SQLite under tmp_path)
and its real connection loop.  What is replaced: the network
(``open_websocket_url`` connects over memory streams, to a scripted controller
or to a real ``ControllerDaemon``), the runner (``ManualRunner``: the test says
when a job ends) and the ``time`` module (wall time moving with the fake clock,
since the agent model schedules heartbeats and retries in wall time).  See
trio_harness.py.
"""

from __future__ import annotations

import cbor2
import pytest
import trio

from reckon.daemon.agent import daemon as agent_daemon
from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import SessionState
from reckon.model.jobs import JobState
from tests.daemon.trio_harness import (
    SPEC, TOKEN, FakeNet, HeldAgentStore, ManualRunner, TrioWall, agent_disk, controller, patch_controller, until,
)

GUARD = 1_000  # fake seconds
FINISHED_AT = 1_650_000_000.25


def options(state_dir, **model) -> AgentOptions:
    return AgentOptions(name="n1", slots=2, state_dir=state_dir, controller="ws://controller.test", token=TOKEN,
                        executor="null", reconnect_initial=0.1, reconnect_max=2.0,
                        model={"heartbeat_interval": 2.0, "retry_initial": 1.0, "retry_max": 4.0, **model})


def install(monkeypatch, net: FakeNet) -> TrioWall:
    wall = TrioWall()
    monkeypatch.setattr(agent_daemon, "open_websocket_url", net.open_websocket_url)
    monkeypatch.setattr(agent_daemon, "AgentStore", HeldAgentStore)
    monkeypatch.setattr(agent_daemon, "NullRunner", ManualRunner)
    monkeypatch.setattr(agent_daemon, "time", wall)
    return wall


async def start_agent(nursery: trio.Nursery, opts: AgentOptions):
    """run_agent in a cancel scope of its own: (daemon, scope, stopped event)."""
    scope = trio.CancelScope()
    stopped = trio.Event()

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            with scope:
                await run_agent(opts, task_status=task_status)
        finally:
            stopped.set()

    daemon = await nursery.start(run)
    return daemon, scope, stopped


def check_backoff(gaps: list[float], initial: float, cap: float) -> None:
    """Gap i (between failed attempts i and i+1, the first after a disconnect being 0) is
    ``min(initial * 2**(i+1), cap)`` scaled by a jitter in [0.5, 1]."""
    assert gaps, "no reconnect attempts"
    for i, gap in enumerate(gaps):
        nominal = min(initial * 2 ** (i + 1), cap)
        assert 0.5 * nominal - 1e-9 <= gap <= nominal + 1e-9, (i, gap, nominal)
    capped = [g for i, g in enumerate(gaps) if initial * 2 ** (i + 1) >= cap]
    assert len(capped) >= 5 and max(capped) <= cap
    assert len({round(g, 9) for g in capped}) > 1  # jittered, not in lockstep


# ---- 7. reconnect, hold back, deliver after reconnect, delete after the ack ----------------------------------


async def test_agent_reconnects_holds_back_and_delivers(tmp_path, autojump_clock, monkeypatch):
    state = tmp_path / "agent"
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            wall = install(monkeypatch, net)
            net.up = True
            agent, _, _ = await start_agent(nursery, options(state))
            runner: ManualRunner = agent.runner

            # First session: join, plain welcome, a dispatch; the job starts.
            ctl = await net.accepted.receive()
            assert (b"authorization", f"Bearer {TOKEN}".encode()) in net.headers[0]
            join = await ctl.receive()
            assert (join.agent, join.slots, join.running) == ("n1", 2, 0)
            await ctl.send(M.Welcome(seq=1, version=1, token=None))
            assert (await ctl.receive()) == M.Heartbeat(running=0, digest=0, seen_seq=1)
            await ctl.send(M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC))
            started = await ctl.expect(M.Started)
            assert (started.job, started.attempt) == ("1", 1)

            # The controller's host dies.  The job ends while nobody listens: the
            # completion is on disk, in the outbox, before anything else.
            net.up = False
            await net.cut()
            assert (await ctl.wait_closed()) == []
            t_cut = trio.current_time()
            await until(lambda: agent.model.session.value == "disconnected")
            finished_at = round(wall.time(), 3)  # recent: kept (acked) for recent_window after the ack
            runner.finish("1", 1, exit_code=3, finished_at=finished_at)
            await until(lambda: agent_disk(state)[0] != [])
            outbox, records = agent_disk(state)
            assert outbox == [("1", 1, 3, None, finished_at)]
            assert records == [("1", 1, "finished", 3, finished_at, 0)]

            # Reconnect attempts over 30 fake seconds: jittered exponential backoff, capped at 2 s.
            await trio.sleep(30)
            attempts = [t for t in net.attempts if t > t_cut]
            assert len(net.attempts) - len(attempts) == 1  # the first, successful connect
            assert 0 < attempts[0] - t_cut <= 0.1 + 1e-9
            check_backoff([b - a for a, b in zip(attempts, attempts[1:])], initial=0.1, cap=2.0)
            assert 15 <= len(attempts) <= 35  # ~1.5 s apart once capped, not a busy loop

            # The controller is back and arms a round.  Until the report is out, the agent
            # sends nothing: no completion, no heartbeat, although both are long due.
            net.up = True
            ctl = await net.accepted.receive()
            join = await ctl.receive()
            assert (join.agent, join.running) == ("n1", 0)
            token = b"T" * M.TOKEN_BYTES
            await ctl.send(M.Welcome(seq=1, version=1, token=token, query_pages=1))
            assert await ctl.arrivals_within(20) == []
            await ctl.send(M.ResyncQuery(seq=2, token=token, page=0, pages=1, jobs=(("1", 1),)))
            report = await ctl.receive()  # first thing out: the report
            assert report == M.ResyncReport(token=token, page=0, pages=1, entries=(M.ReportEntry(
                job="1", attempt=1, status=M.EntryStatus.FINISHED, exit_code=3,
                started_at=1_600_000_000.0, finished_at=finished_at),))
            done_reporting = trio.current_time()
            # The report carried the completion, and the round's ResyncDone would
            # acknowledge it; this controller never sends one, so the outbox sends
            # it again after a full retry interval (retry_max, 4 s), not at once.
            first = await ctl.expect(M.Finished)
            assert first == M.Finished(job="1", attempt=1, exit_code=3, signal=None, finished_at=finished_at,
                                       started_at=1_600_000_000.0)
            assert trio.current_time() - done_reporting == 4.0

            # Not acked: retried (at the cap now: 4 s, jitter up to 25%), and still on disk.
            t0 = trio.current_time()
            assert (await ctl.expect(M.Finished)) == first
            assert 4.0 - 1e-6 <= trio.current_time() - t0 <= 5.0 + 1e-6
            assert agent_disk(state)[0] == [("1", 1, 3, None, finished_at)]

            # The ack removes it from the durable outbox (seen by a heartbeat that has seen the ack).
            await ctl.send(M.Ack(seq=3, job="1", attempt=1, outcome=M.AckOutcome.APPLIED))
            while True:
                msg = await ctl.receive()
                if isinstance(msg, M.Heartbeat) and msg.seen_seq >= 3:
                    break
                assert isinstance(msg, (M.Heartbeat, M.Finished))  # a retry may cross the ack
            assert msg.running == 0
            outbox, records = agent_disk(state)
            assert outbox == []
            assert records == [("1", 1, "finished", 3, finished_at, 1)]
            later = await ctl.arrivals_within(20)
            assert later and all(isinstance(m, M.Heartbeat) for m in later)  # no more retries
            assert ctl.frames_with_several == 0  # this controller said version 1: one message a frame
            nursery.cancel_scope.cancel()


# ---- 8. restart durability --------------------------------------------------------------------------------------


async def test_completion_survives_an_agent_restart(tmp_path, autojump_clock, monkeypatch):
    state = tmp_path / "agent"
    with trio.fail_after(GUARD):
        async with controller(tmp_path / "controller", heartbeat_timeout=10, round_timeout=30) as ctl:
            net = FakeNet(ctl.nursery, server=ctl.daemon)
            wall = install(monkeypatch, net)
            patch_controller(monkeypatch, "time", wall)  # one wall clock for both sides
            net.up = True
            agent, scope, stopped = await start_agent(ctl.nursery, options(state))
            await agent.joined.wait()
            job = await ctl.submit()
            runner: ManualRunner = agent.runner
            await until(lambda: (job, 1) in runner.running and ctl.job(job).started_at is not None)
            assert ctl.job(job).state is JobState.RUNNING and ctl.job(job).agent == "n1"

            # The controller becomes unreachable; the job ends; the agent is stopped.
            net.up = False
            await net.cut()
            await until(lambda: agent.model.session.value == "disconnected" and ctl.node("n1") == "DISCONNECTED")
            runner.finish(job, 1, exit_code=7, finished_at=FINISHED_AT)
            await until(lambda: agent_disk(state)[0] != [])
            scope.cancel()
            await stopped.wait()
            assert agent_disk(state)[0] == [(job, 1, 7, None, FINISHED_AT)]

            # While it is down (a minute of fake time), nothing is invented for the job.
            await trio.sleep(60)
            assert ctl.job(job).state is JobState.RUNNING
            assert not any(isinstance(f, F.JobFinished) for f in await ctl.store.durable())

            # A new agent process on the same state dir, the controller still unreachable ...
            agent2, _, _ = await start_agent(ctl.nursery, options(state))
            assert agent2 is not agent and agent2.model.outbox  # the outbox came back from disk
            await trio.sleep(5)
            assert agent_disk(state)[0] == [(job, 1, 7, None, FINISHED_AT)]
            # ... then reachable: the completion is delivered and only then leaves the outbox.
            net.up = True
            await until(lambda: ctl.job(job).state is JobState.FAILED)
            record = ctl.job(job)
            assert (record.exit_code, record.signal, record.finished_at) == (7, None, FINISHED_AT)
            assert record.started_at == 1_600_000_000.0 and record.attempt == 1
            await until(lambda: agent_disk(state)[0] == [])
            finished = [f for f in await ctl.store.durable() if isinstance(f, F.JobFinished)]
            assert len(finished) == 1 and (finished[0].job, finished[0].exit_code) == (job, 7)
            # The rejoin round carried it, and that round's ResyncDone acknowledged it
            # (after the commit): the outbox never had to send it on its own.
            entries = [entry for e in ctl.events if isinstance(e, E.MessageFromAgent)
                       and isinstance(e.message, M.ResyncReport) for entry in e.message.entries]
            assert [(x.job, x.exit_code, x.finished_at) for x in entries] == [(job, 7, FINISHED_AT)]
            assert not any(isinstance(e, E.MessageFromAgent) and isinstance(e.message, M.Finished)
                           for e in ctl.events)
            await until(lambda: ctl.node("n1") == "IDLE")
            assert agent2.model.session.value == "operating"
            ctl.nursery.cancel_scope.cancel()


# ---- the ticker hands a busy core one Tick at a time -----------------------------------------------------------


class AlwaysDueModel:
    """A stand-in model with work due at once for its first ``due_ticks`` Ticks, counting them."""

    def __init__(self, due_ticks: int) -> None:
        self.due_ticks = due_ticks
        self.ticks = 0
        self.session = SessionState.OPERATING

    def next_wakeup(self) -> float | None:
        return 0.0 if self.ticks < self.due_ticks else None

    def handle(self, event) -> list:
        self.ticks += isinstance(event, E.Tick)
        return []


async def test_a_busy_core_is_handed_one_tick_at_a_time(tmp_path, autojump_clock):
    """While a Tick waits behind other work the model's wake-up stays in the past; the ticker
    must not feed another on every pass (at 30k jobs that flood took 93% of an agent's CPU)."""
    model = AlwaysDueModel(due_ticks=3)
    daemon = agent_daemon.AgentDaemon(options(tmp_path), store=None, runner=None, agent=model)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.ticker)
        await trio.sleep(30)  # the core is busy elsewhere: nobody takes events
        assert daemon._events_send.statistics().current_buffer_used == 1
        nursery.start_soon(daemon.core_loop, nursery)  # the core comes back
        with trio.fail_after(GUARD):
            await until(lambda: model.ticks >= 3)  # each handled Tick lets the next one in
        before = model.ticks
        await trio.sleep(30)  # nothing due now: a Tick a second (record expiry), no more
        assert 29 <= model.ticks - before <= 31
        nursery.cancel_scope.cancel()


# ---- a frame with an invalid message: the rest of it is not acted on ------------------------------------------


async def test_the_rest_of_a_refused_frame_is_not_acted_on(tmp_path, autojump_clock, monkeypatch):
    """A controller frame whose first message is out of place (a query before Welcome)
    makes the agent hang up; a Dispatch later in the same frame must not start a job."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            net.up = True
            agent, _, _ = await start_agent(nursery, options(tmp_path / "agent"))
            runner: ManualRunner = agent.runner
            ctl = await net.accepted.receive()
            await ctl.receive()  # the Join
            token = b"T" * M.TOKEN_BYTES
            query = M.ResyncQuery(seq=1, token=token, page=0, pages=1, jobs=())
            dispatch = M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC)
            await ctl.send_raw(cbor2.dumps([M.to_wire(query), M.to_wire(dispatch)]))
            await ctl.wait_closed()
            await until(lambda: agent.model.session.value in ("disconnected", "joining"))
            await trio.sleep(5)
            assert runner.running == {} and ("1", 1) not in agent.model.records
            nursery.cancel_scope.cancel()


async def test_an_older_controller_refusing_the_join_is_named_in_the_log(tmp_path, autojump_clock, monkeypatch, caplog):
    """An older controller refuses a field it does not know (the agent's log
    layout) in its own words; the agent's log says what to do about it."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            net.up = True
            await start_agent(nursery, options(tmp_path / "agent"))
            ctl = await net.accepted.receive()
            join = await ctl.receive()
            assert join.log_layout == "flat"
            # What a controller before Join.log_layout answers, word for word.
            await ctl.send(M.Error(seq=0, reason="malformed message: join message has unknown fields ['log_layout']",
                                   fatal=True))
            await until(lambda: "upgrade the controller first" in caplog.text)
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("code", "refused"), [(M.RefusalCode.NAME_HELD, True),
                                               (M.RefusalCode.NAME_HELD_FOR_NOW, False)])
async def test_the_refusal_pace_follows_the_models_policy_for_the_code(tmp_path, autojump_clock, monkeypatch, caplog,
                                                                     code, refused):
    """The code decides (model.agent.refusal_retry), not the words: a permanent code puts the agent on
    its slow refusal pace, a code that lifts by itself on its outage pace, whatever the reason says."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            net.up = True
            agent, _, _ = await start_agent(nursery, options(tmp_path / "agent"))
            ctl = await net.accepted.receive()
            await ctl.receive()  # the Join
            await ctl.send(M.refusal(M.PROTOCOL_VERSION, code, "join message has unknown fields ['x']"))
            await until(lambda: agent.refusals.active("controller") or agent.failed_handshakes.active("held"))
            assert agent.refusals.active("controller") is refused
            assert agent.failed_handshakes.active("held") is not refused
            assert "upgrade the controller first" not in caplog.text
            nursery.cancel_scope.cancel()


async def test_a_handshake_timeout_without_a_message_is_named_in_the_log(tmp_path, autojump_clock, monkeypatch,
                                                                       caplog):
    """trio-websocket's ConnectionTimeout has no message: the line names it by type, once (found by the
    review of issue #9: the simulation's agents logged "cannot join ws://a1.sim: " with nothing after it)."""
    from contextlib import asynccontextmanager

    from trio_websocket import ConnectionTimeout

    attempts = []

    @asynccontextmanager
    async def times_out(url, **kwargs):
        attempts.append(url)
        raise ConnectionTimeout
        yield  # pragma: no cover

    monkeypatch.setattr(agent_daemon, "open_websocket_url", times_out)
    monkeypatch.setattr(agent_daemon, "AgentStore", HeldAgentStore)
    monkeypatch.setattr(agent_daemon, "time", TrioWall())
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            await start_agent(nursery, options(tmp_path / "agent"))
            await until(lambda: len(attempts) >= 5)
            nursery.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records if "cannot join" in r.getMessage()]
    assert said == ["cannot join ws://controller.test: ConnectionTimeout"]


# ---- issue #9 bug 6: a short job's start time is kept whichever of start and exit is read first ------------------


class ExitBeforeStartRunner(ManualRunner):
    """Every job ends at once, and its exit is delivered before the launch is answered
    (a short job: the launcher's answer and the supervisor's status race)."""

    START = 1_600_000_100.0

    async def start(self, job: str, attempt: int, spec, *, owner=None, gpus=()) -> float:
        self._started.add((job, attempt))
        self._send_exit.send_nowait(agent_daemon.ExitStatus(
            job=job, attempt=attempt, exit_code=0, signal=None, started_at=self.START, finished_at=self.START + 0.01))
        await trio.sleep(5)  # the answer comes late: the exit is acked by then
        return self.START


async def test_a_short_job_keeps_its_start_time(tmp_path, autojump_clock, monkeypatch):
    with trio.fail_after(GUARD):
        async with controller(tmp_path / "controller") as ctl:
            net = FakeNet(ctl.nursery, server=ctl.daemon)
            wall = install(monkeypatch, net)
            monkeypatch.setattr(agent_daemon, "NullRunner", ExitBeforeStartRunner)
            patch_controller(monkeypatch, "time", wall)
            net.up = True
            agent, _, _ = await start_agent(ctl.nursery, options(tmp_path / "agent"))
            await agent.joined.wait()
            job = await ctl.submit()
            await until(lambda: ctl.job(job).state is JobState.COMPLETED)
            await trio.sleep(10)  # the late launch answer has arrived and been handled
            assert ctl.job(job).started_at == ExitBeforeStartRunner.START
            ctl.nursery.cancel_scope.cancel()


# ---- issue #9 bug 5: an agent with more records than its event queue holds starts again ------------------------


async def test_an_agent_with_more_records_than_its_event_queue_starts(tmp_path, autojump_clock, monkeypatch):
    """Adoption used to put one event per record into the core's queue before the
    core ran: with more records than the queue holds (100,000) the agent never
    started.  The queue is made small here; the path is the same."""
    from reckon.model.agent import LocalJob, LocalStatus

    monkeypatch.setattr(agent_daemon, "EVENT_QUEUE", 5)
    state = tmp_path / "agent"
    count = 23
    store = await HeldAgentStore.open(state)
    await store.apply([E.StoreRecord(record=LocalJob(job=str(i), attempt=1, spec=SPEC)) for i in range(1, count + 1)])
    await store.aclose()
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            agent, scope, stopped = await start_agent(nursery, options(state))
            # ManualRunner (a NullRunner) calls every earlier attempt lost: each is indeterminate now.
            assert len(agent.model.records) == count
            assert {r.status for r in agent.model.records.values()} == {LocalStatus.INDETERMINATE}
            assert {row[2] for row in agent_disk(state)[1]} == {"indeterminate"}
            scope.cancel()
            await stopped.wait()


# ---- issue #9 8a: a controller host that vanishes is noticed within a bounded time -------------------------------


async def test_a_vanished_controller_is_noticed_and_the_agent_reconnects(tmp_path, autojump_clock, monkeypatch):
    """No FIN, no RST, no byte: only the agent's pings (unanswered) can tell.  It
    drops the connection within ping_interval + pong_timeout and connects again;
    while the controller answers, pings keep the session up however quiet it is."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            net.up = True
            opts = options(tmp_path / "agent")
            agent, scope, stopped = await start_agent(nursery, opts)
            peer = await net.accepted.receive()
            await peer.expect(M.Join)
            await peer.send(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, cluster="c1"))
            await agent.joined.wait()
            await trio.sleep(60)  # quiet, but alive: pings are answered
            assert agent.model.session is SessionState.OPERATING and len(net.attempts) == 1

            net.blackhole = True
            vanished = trio.current_time()
            await until(lambda: agent.model.session is SessionState.DISCONNECTED, timeout=300)
            assert trio.current_time() - vanished <= opts.ping_interval + opts.pong_timeout + 0.1
            await until(lambda: len(net.attempts) >= 2, timeout=60)  # and it tries again
            scope.cancel()
            await stopped.wait()
            nursery.cancel_scope.cancel()
