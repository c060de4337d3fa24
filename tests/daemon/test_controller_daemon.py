"""The controller daemon (daemon/controller/server.py) under trio's mock clock.

The real ``ControllerDaemon``: its core loop, its connection handler and its
group commit into a real SQLite fact log, with connections over in-memory
streams (see trio_harness.py for why: the autojump clock must only jump when
the daemon is waiting on a trio timer).  Every test takes no wall time for its
timers and runs under a hang guard (in fake seconds, so a hang fails at once).
"""

from __future__ import annotations

import cbor2
import pytest
import trio
import trio.testing

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.jobs import JobState
from tests.daemon.trio_harness import SPEC, TrioWall, controller, live_tasks, patch_controller

GUARD = 1_000  # fake seconds; a passing test is far below it


def finished(job: str, attempt: int = 1, exit_code: int = 0, finished_at: float = 1_700_000_000.5) -> M.Finished:
    return M.Finished(job=job, attempt=attempt, exit_code=exit_code, signal=None, finished_at=finished_at)


# ---- 1. commit before effect ------------------------------------------------------------------------


async def test_effects_wait_for_the_commit(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            agent, _ = await ctl.join("n1")
            assert (await agent.receive()) == M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None)
            client, _ = await ctl.connect("/client")

            # A submit is decided (job dispatched in the model) but its commit is held.
            gate = ctl.store.hold()
            await client.send({"op": "submit", "spec": SPEC.to_dict()})
            await gate.entered.wait()
            assert [type(f) for f in gate.facts] == [F.JobSubmitted, F.JobDispatched]
            assert ctl.job("1").state is JobState.RUNNING  # decided ...
            assert not any(isinstance(f, (F.JobSubmitted, F.JobDispatched)) for f in await ctl.store.durable())
            assert await agent.arrivals_within(30) == []  # ... but no Dispatch
            assert client.pending() == []  # and no client reply

            gate.release()
            dispatch = await agent.receive()
            # The effect arrives only with its facts on disk.
            on_disk = await ctl.store.durable()
            assert [type(f) for f in on_disk[-2:]] == [F.JobSubmitted, F.JobDispatched]
            assert dispatch == M.Dispatch(seq=2, job="1", attempt=1, spec=SPEC, uid=ctl.job("1").uid)
            assert dispatch.uid is not None  # every submission has its own random uid
            reply = await client.receive()
            assert reply["ok"] and reply["job"]["id"] == "1" and reply["job"]["state"] == "RUNNING"

            # The completion: the Ack waits for JobFinished to be durable.
            gate = ctl.store.hold()
            await agent.send(finished("1", exit_code=3))
            await gate.entered.wait()
            assert [type(f) for f in gate.facts] == [F.JobFinished]
            assert ctl.job("1").state is JobState.FAILED
            assert await agent.arrivals_within(30) == []
            assert not any(isinstance(f, F.JobFinished) for f in await ctl.store.durable())
            gate.release()
            ack = await agent.receive()
            assert ack == M.Ack(seq=3, job="1", attempt=1, outcome=M.AckOutcome.APPLIED)
            last = (await ctl.store.durable())[-1]
            assert isinstance(last, F.JobFinished) and last.exit_code == 3
            # In order, nothing else: Welcome 1, Dispatch 2, Ack 3.
            assert agent.pending() == []


async def test_a_failed_commit_releases_nothing(tmp_path, autojump_clock):
    """The commit fails: the daemon dies (the core loop's error propagates) and the
    decided Dispatch and client reply never leave it."""
    seen_by_agent: list = []
    seen_by_client: list = []
    with trio.fail_after(GUARD):
        with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="disk on fire"), flatten_subgroups=True):
            async with controller(tmp_path, heartbeat_timeout=100) as ctl:
                agent, _ = await ctl.join("n1")
                seen_by_agent.append(await agent.receive())
                client, _ = await ctl.connect("/client")
                ctl.store.fail = OSError("disk on fire")
                gate = ctl.store.hold()
                await client.send({"op": "submit", "spec": SPEC.to_dict()})
                await gate.entered.wait()
                seen_by_client_early = client.pending()
                gate.release()
                try:
                    await trio.sleep(30)  # the core loop's failure cancels this
                finally:
                    seen_by_agent.extend(agent.pending())
                    seen_by_client.extend(seen_by_client_early + client.pending())
    assert seen_by_agent == [M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None)]
    assert seen_by_client == []


# ---- 2. group commit ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("max_batch", "expected_calls"), [(5_000, [1, 30]), (12, [1, 12, 12, 6])])
async def test_group_commit(tmp_path, autojump_clock, max_batch, expected_calls):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100, max_batch=max_batch) as ctl:
            client, _ = await ctl.connect("/client")
            gate = ctl.store.hold()
            replies: dict[int, str] = {}

            async def submit(i: int) -> None:
                replies[i] = await ctl.submit(SPEC)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit, 0)
                await gate.entered.wait()  # the core loop is committing event 0 ...
                for i in range(1, 30):  # ... while 29 more events and a client submit queue up
                    nursery.start_soon(submit, i)
                await client.send({"op": "submit", "spec": SPEC.to_dict()})
                await trio.testing.wait_all_tasks_blocked()
                assert replies == {} and client.pending() == []  # nothing answered before its commit
                gate.release()
            reply = await client.receive()
            assert reply["ok"]

            assert ctl.store.calls == expected_calls  # 31 events, far fewer appends
            assert sorted(replies) == list(range(30))  # every caller got its answer ...
            ids = set(replies.values()) | {reply["job"]["id"]}
            assert ids == {str(i) for i in range(1, 32)}  # ... each its own job
            on_disk = await ctl.store.durable()
            assert [f.job for f in on_disk if isinstance(f, F.JobSubmitted)] == [str(i) for i in range(1, 32)]
            assert ctl.store.last_seq == 32  # and the start's IdMarkRaised


# ---- 3. a round deadline is a cancel scope ---------------------------------------------------------------------


async def _job_running_on_n1(ctl) -> str:
    """A job RUNNING on n1 while n1 is disconnected: the next join of n1 arms a round."""
    first, first_done = await ctl.join("n1")
    await first.expect(M.Welcome)
    job = await ctl.submit()
    assert await first.expect(M.Dispatch) == M.Dispatch(seq=2, job=job, attempt=1, spec=SPEC, uid=ctl.job(job).uid)
    await first.aclose()
    await first_done.wait()
    await ctl.sync()
    assert ctl.node("n1") == "DISCONNECTED"
    assert ctl.job(job).state is JobState.RUNNING and ctl.job(job).agent == "n1"
    return job


async def test_round_deadline_closes_a_silent_agent(tmp_path, autojump_clock):
    round_timeout = 5.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, round_timeout=round_timeout, heartbeat_timeout=100) as ctl:
            job = await _job_running_on_n1(ctl)
            facts_before = ctl.store.last_seq

            silent, silent_done = await ctl.join("n1")
            t_welcome, welcome = await silent.receive_timed()
            assert welcome.token is not None and welcome.query_pages == 1
            query = await silent.receive()
            assert query == M.ResyncQuery(seq=2, token=welcome.token, page=0, pages=1, jobs=((job, 1),))
            assert ctl.node("n1") == "RECONCILING"
            assert len(live_tasks("_round_timer")) == 1

            # It never answers.  At the deadline: an error naming why, then the close.
            t_error, error = await silent.receive_timed()
            assert isinstance(error, M.Error) and error.fatal and "resync round timed out" in error.reason
            assert t_error - t_welcome == pytest.approx(round_timeout, abs=0.01)
            assert await silent.wait_closed() == []
            assert silent.closed_at - t_welcome < round_timeout + 1
            await silent_done.wait()
            await ctl.sync()
            assert ctl.node("n1") == "DISCONNECTED"  # not RECONCILING any more
            assert ctl.daemon.model.sessions["n1"].round is None
            assert live_tasks("_round_timer") == []
            assert any(isinstance(e, E.RoundDeadlineExpired) for e in ctl.events)
            # Nothing was invented: the job is where it was, and no fact was written.
            assert ctl.job(job).state is JobState.RUNNING and ctl.job(job).attempt == 1
            assert ctl.store.last_seq == facts_before

            # The next join arms a fresh round, which a page of the old one cannot touch.
            again, _ = await ctl.join("n1")
            welcome2 = await again.expect(M.Welcome)
            assert welcome2.token is not None and welcome2.token != welcome.token
            await again.expect(M.ResyncQuery)
            assert ctl.node("n1") == "RECONCILING"
            running = M.ReportEntry(job=job, attempt=1, status=M.EntryStatus.RUNNING)
            await again.send(M.ResyncReport(token=welcome.token, page=0, pages=1, entries=(running,)))
            stale = await again.expect(M.Error)
            assert "stale resync round token" in stale.reason and not stale.fatal
            assert ctl.node("n1") == "RECONCILING"
            await again.send(M.ResyncReport(token=welcome2.token, page=0, pages=1, entries=(running,)))
            assert await again.expect(M.ResyncDone) == M.ResyncDone(seq=4, token=welcome2.token)
            await ctl.sync()
            assert ctl.node("n1") == "BUSY"


async def test_round_deadline_ignores_wall_clock_steps(tmp_path, autojump_clock, monkeypatch):
    """The round lasts ``round_timeout`` on trio's clock from the moment its query
    goes out, whatever the wall clock does between the join and the commit."""
    wall = TrioWall()
    patch_controller(monkeypatch, "time", wall)
    round_timeout = 5.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, round_timeout=round_timeout, heartbeat_timeout=10_000) as ctl:
            await _job_running_on_n1(ctl)
            # The join's commit (a new slot count is a fact) is held; meanwhile the wall
            # clock is stepped back an hour, as NTP or an operator might.
            gate = ctl.store.hold()
            agent, _ = await ctl.join("n1", slots=2)
            await gate.entered.wait()
            wall.step = -3600.0
            gate.release()
            t_welcome, welcome = await agent.receive_timed()
            assert welcome.token is not None
            error = None
            with trio.move_on_after(round_timeout + 60):
                error = await agent.expect(M.Error, skip=(M.ResyncQuery,))
            assert error is not None, "no timeout within a minute of the deadline"
            assert "resync round timed out" in error.reason
            assert trio.current_time() - t_welcome == pytest.approx(round_timeout, abs=0.01)


# ---- 4. a disconnect cancels the round ---------------------------------------------------------------------


async def test_disconnect_ends_the_round(tmp_path, autojump_clock):
    round_timeout = 5.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, round_timeout=round_timeout, heartbeat_timeout=100) as ctl:
            job = await _job_running_on_n1(ctl)
            agent, agent_done = await ctl.join("n1")
            welcome = await agent.expect(M.Welcome)
            await agent.expect(M.ResyncQuery)
            assert ctl.daemon.model.sessions["n1"].round is not None
            assert len(live_tasks("_round_timer")) == 1

            await agent.aclose()  # mid-round
            await agent_done.wait()
            assert live_tasks("_round_timer") == []  # the timer went with the connection's nursery
            await ctl.sync()
            session = ctl.daemon.model.sessions["n1"]
            assert session.round is None and session.conn is None
            assert ctl.node("n1") == "DISCONNECTED"
            assert ctl.daemon._conns == {}
            def untimed() -> list:  # the controller's clock ticks every second: not an event of the round
                return [e for e in ctl.events if not isinstance(e, E.Tick)]

            handled = len(untimed())

            await trio.sleep(round_timeout * 4)  # long past the old deadline
            assert not any(isinstance(e, E.RoundDeadlineExpired) for e in ctl.events)
            assert len(untimed()) == handled  # nothing at all happened meanwhile but the clock's ticks
            assert ctl.job(job).state is JobState.RUNNING and ctl.job(job).attempt == 1

            again, _ = await ctl.join("n1")
            welcome2 = await again.expect(M.Welcome)
            assert welcome2.token not in (None, welcome.token)
            assert ctl.node("n1") == "RECONCILING"


# ---- 5. heartbeat timeout ---------------------------------------------------------------------------------------


async def test_silent_agent_is_disconnected(tmp_path, autojump_clock):
    heartbeat_timeout = 10.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=heartbeat_timeout) as ctl:
            talker, _ = await ctl.join("talker")
            await talker.expect(M.Welcome)
            silent, silent_done = await ctl.join("silent")
            t_welcome, _ = await silent.receive_timed()
            assert ctl.node("silent") == "IDLE"

            async def heartbeats() -> None:
                while True:
                    await talker.send(M.Heartbeat(running=0, digest=0, seen_seq=1))
                    await trio.sleep(heartbeat_timeout / 2)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(heartbeats)
                assert await silent.wait_closed() == []
                assert silent.closed_at - t_welcome == pytest.approx(heartbeat_timeout, abs=0.01)
                await silent_done.wait()
                await ctl.sync()
                assert ctl.node("silent") == "DISCONNECTED"
                # One that keeps talking stays, well past the timeout.
                await trio.sleep(heartbeat_timeout * 3)
                assert not talker.closed.is_set() and ctl.node("talker") == "IDLE"
                nursery.cancel_scope.cancel()


# ---- frames: several messages in one WebSocket message ----------------------------------------------------------


async def test_a_frame_with_a_bad_message_is_refused_whole(tmp_path, autojump_clock):
    """A valid completion next to a malformed message in one frame: neither is used."""
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            agent, _ = await ctl.join("n1")
            await agent.expect(M.Welcome)
            job = await ctl.submit()
            dispatch = await agent.expect(M.Dispatch)
            assert dispatch.job == job
            await agent.send_raw(cbor2.dumps([M.to_wire(finished(job)), {"type": "finished", "job": job}]))
            error = await agent.expect(M.Error)
            assert error.fatal and "malformed message" in error.reason
            # A refusal's code, as the model's refusals carry (the agent model decides its pace from it).
            assert error.code is M.RefusalCode.INVALID and not error.permanent
            await agent.wait_closed()
            await ctl.sync()
            assert ctl.job(job).state is JobState.RUNNING  # the good half was not applied either
            assert not any(isinstance(f, F.JobFinished) for f in await ctl.store.durable())


async def test_messages_queued_together_go_out_in_one_frame_and_are_all_read(tmp_path, autojump_clock):
    """Dispatches decided in one batch reach the agent as one CBOR array; a frame of
    completions from the agent is applied message by message, in order."""
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            agent, _ = await ctl.join("n1", slots=3)
            await agent.expect(M.Welcome)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "submit_many", "specs": [SPEC.to_dict()] * 3})
            assert (await client.receive())["ok"]
            dispatches = [await agent.expect(M.Dispatch) for _ in range(3)]
            assert agent.frames_with_several >= 1  # they were batched on the wire
            await agent.send_raw(cbor2.dumps([M.to_wire(finished(d.job, exit_code=i)) for i, d in enumerate(dispatches)]))
            acks = [await agent.expect(M.Ack) for _ in range(3)]
            assert [(a.job, a.outcome) for a in acks] == [(d.job, M.AckOutcome.APPLIED) for d in dispatches]
            assert [ctl.job(d.job).exit_code for d in dispatches] == [0, 1, 2]


async def test_a_version_1_agent_gets_one_message_a_frame(tmp_path, autojump_clock):
    """Agents of protocol version 1 read one map per frame: the controller does not batch for them."""
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            old, _ = await ctl.connect()
            await old.send(M.Join(agent="old", slots=3, version=1))
            assert (await old.receive()) == M.Welcome(seq=1, version=1, token=None)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "submit_many", "specs": [SPEC.to_dict()] * 3})
            assert (await client.receive())["ok"]
            dispatches = [await old.expect(M.Dispatch) for _ in range(3)]
            for d in dispatches:
                await old.send(finished(d.job))
            assert [(await old.expect(M.Ack)).outcome for _ in range(3)] == [M.AckOutcome.APPLIED] * 3
            assert old.frames_with_several == 0


# ---- 6. malformed input -------------------------------------------------------------------------------------------

JOIN = M.Join(agent="bad", slots=1, version=M.PROTOCOL_VERSION)

MALFORMED = {
    "not cbor": ([], b"\xff\xfe\x00garbage", "undecodable CBOR"),
    "text frame": ([], "hello", "expected a binary CBOR message"),
    "not a map": ([], cbor2.dumps(7), "a frame must be a CBOR map or an array of maps"),
    "array of non-maps": ([], cbor2.dumps([1, 2, 3]), "a message must be a map, got int"),
    "empty array": ([JOIN], cbor2.dumps([]), "a frame holds 1 to"),
    "one bad message in a frame": ([JOIN], cbor2.dumps([M.to_wire(M.Heartbeat(running=0, digest=0, seen_seq=1)),
                                                        {"type": "bogus"}]), "unknown message type 'bogus'"),
    "unknown type": ([], cbor2.dumps({"type": "bogus"}), "unknown message type 'bogus'"),
    "before join": ([], M.Heartbeat(running=0, digest=0, seen_seq=0), "the first message must be join, got heartbeat"),
    "join twice": ([JOIN], JOIN, "join sent twice"),
    "invalid field": ([], cbor2.dumps({**M.to_wire(JOIN), "slots": -1}), "slots"),
    "unknown field": ([JOIN], cbor2.dumps({**M.to_wire(M.Heartbeat(running=0, digest=0, seen_seq=1)), "x": 1}),
                      "unknown fields ['x']"),
    "no outcome": ([JOIN], cbor2.dumps({**M.to_wire(finished("1")), "exit_code": None}),
                   "needs an exit code or a signal"),
    "bad version": ([], M.Join(agent="bad", slots=1, version=99), "protocol version 99 not supported"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_malformed_input_closes_only_that_connection(tmp_path, autojump_clock, case):
    before, bad_message, reason = MALFORMED[case]
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            good, _ = await ctl.join("good")
            assert (await good.receive()) == M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None)

            bad, bad_done = await ctl.connect()
            for msg in before:
                await bad.send(msg)
            if before:
                await bad.expect(M.Welcome)
            if isinstance(bad_message, (bytes, str)):
                await bad.send_raw(bad_message)
            else:
                await bad.send(bad_message)
            error = await bad.receive()
            assert isinstance(error, M.Error) and error.fatal, error
            assert reason in error.reason
            if before:  # joined at this version: the refusal carries its code, not only its words
                assert error.code is M.RefusalCode.INVALID, error
            assert await bad.wait_closed() == []
            await bad_done.wait()
            await ctl.sync()
            if "bad" in ctl.daemon.model.sessions:
                assert ctl.node("bad") == "DISCONNECTED"

            # The other agent is unaffected: a dispatch and its completion go through.
            client, _ = await ctl.connect("/client")
            await client.send({"op": "submit", "spec": SPEC.to_dict()})
            assert (await client.receive())["ok"]
            dispatch = await good.expect(M.Dispatch)
            await good.send(finished(dispatch.job, dispatch.attempt))
            ack = await good.expect(M.Ack)
            assert (ack.job, ack.outcome) == (dispatch.job, M.AckOutcome.APPLIED)
            assert ctl.job(dispatch.job).state is JobState.COMPLETED
            assert not good.closed.is_set()


async def test_missing_or_wrong_token_is_refused(tmp_path, autojump_clock):
    from trio_websocket import ConnectionRejected

    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            for token, body in ((None, b"missing token"), ("wrong", b"bad token")):
                refused = pytest.RaisesExc(ConnectionRejected, check=lambda e: (e.status_code, e.body) == (401, body))
                with pytest.RaisesGroup(refused):
                    async with trio.open_nursery() as nursery:
                        await ctl.connect(token=token, client_nursery=nursery)
            assert ctl.daemon.model.sessions == {}


# ---- the scheduler sees the batch it runs after ---------------------------------------------------------------


async def test_submitted_job_is_dispatched_without_another_event(tmp_path, autojump_clock):
    """``submit_many`` sends no follow-up read: the dispatch must not wait for some later event."""
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            agent, _ = await ctl.join("n1", slots=2)
            await agent.expect(M.Welcome)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "submit_many", "specs": [SPEC.to_dict(), SPEC.to_dict()]})
            assert (await client.receive()) == {"ok": True, "jobs": ["1", "2"]}
            dispatched = [await agent.receive() for _ in range(2)]  # nothing else happens meanwhile
            assert [(d.job, d.seq) for d in dispatched] == [("1", 2), ("2", 3)]


async def test_a_backlog_is_dispatched_in_budgeted_batches_without_another_event(tmp_path, autojump_clock):
    """A backlog larger than one batch's dispatch budget still goes out in full, in order,
    over several group commits, with nothing else happening."""
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100, max_dispatch_per_batch=3) as ctl:
            agent, _ = await ctl.join("n1", slots=10)
            await agent.expect(M.Welcome)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "submit_many", "specs": [SPEC.to_dict()] * 10})
            assert (await client.receive())["jobs"] == [str(i) for i in range(1, 11)]
            dispatched = [await agent.receive() for _ in range(10)]
            assert [d.job for d in dispatched] == [str(i) for i in range(1, 11)]
            facts = (await ctl.store.load())[1][-sum(ctl.store.calls):]  # after the start's own commit
            per_commit, at = [], 0
            for n in ctl.store.calls:
                per_commit.append(sum(isinstance(f, F.JobDispatched) for f in facts[at:at + n]))
                at += n
            assert sum(per_commit) == 10 and max(per_commit) <= 3, per_commit


async def test_joining_agent_gets_pending_work_without_another_event(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            job = await ctl.submit()
            agent, _ = await ctl.join("n1")
            await agent.expect(M.Welcome)
            assert await agent.receive() == M.Dispatch(seq=2, job=job, attempt=1, spec=SPEC, uid=ctl.job(job).uid)



# ---- issue #9: silence on the monotonic clock, dispatches to a closing connection -------------------------


async def test_lost_after_ignores_wall_clock_steps(tmp_path, autojump_clock, monkeypatch):
    """Bug 8c: a disconnected agent is lost after ``lost_after`` seconds of trio's
    clock; a wall-clock step of an hour forward does not declare it lost at once."""
    wall = TrioWall()
    patch_controller(monkeypatch, "time", wall)
    lost_after = 60.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=10_000, lost_after=lost_after) as ctl:
            job = await _job_running_on_n1(ctl)
            t_drop = trio.current_time()
            wall.step = 3600.0  # NTP or an operator moves the wall clock an hour ahead
            await trio.sleep(lost_after / 2)
            await ctl.sync()
            assert ctl.node("n1") == "DISCONNECTED"
            assert ctl.job(job).state is JobState.RUNNING and ctl.job(job).attempt == 1
            # Silence as such still counts: after lost_after of trio time the agent is lost.
            while ctl.node("n1") != "LOST":
                await trio.sleep(0.5)
            assert trio.current_time() - t_drop == pytest.approx(lost_after, abs=2.0)
            assert ctl.job(job).state is JobState.PENDING and ctl.job(job).attempt == 2


async def test_a_dispatch_dropped_for_a_closing_connection_is_redone_at_once(tmp_path, autojump_clock, monkeypatch):
    """Bug 8b: the daemon closes a connection that does not read (its send queue is
    full) while the model still counts it connected.  The dispatches dropped for it
    never left, so their jobs are requeued at once, and the model knows of the close
    at once (no more work is placed there); they used to stay RUNNING until the
    agent rejoined."""
    patch_controller(monkeypatch, "OUTGOING_QUEUE", 1)
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=10_000) as ctl:
            peer, _ = await ctl.join("n1", slots=3)
            await peer.expect(M.Welcome)
            [conn] = ctl.daemon._conns.values()
            stalled = trio.Event()  # never set: the agent's side stops reading

            async def send_message(data):
                await stalled.wait()

            conn.ws.send_message = send_message
            first = await ctl.submit()  # its dispatch is taken by the (stalled) writer
            await ctl.sync()
            second = await ctl.submit()  # fills the queue
            await ctl.sync()
            third = await ctl.submit()  # does not fit: the connection is closed, this dispatch dropped
            await ctl.sync()
            await ctl.sync()
            assert conn.closing
            assert ctl.node("n1") == "DISCONNECTED"
            # Queued or written, the first two may have reached the agent: its rejoin settles them.
            assert [(ctl.job(j).state, ctl.job(j).attempt) for j in (first, second)] == [(JobState.RUNNING, 1)] * 2
            assert (ctl.job(third).state, ctl.job(third).attempt) == (JobState.PENDING, 2)
            requeued = [f for f in await ctl.store.durable() if isinstance(f, F.JobRequeued)]
            assert [(f.job, f.attempt, f.reason) for f in requeued] == [(third, 1, "dispatch not delivered")]
            ctl.nursery.cancel_scope.cancel()
