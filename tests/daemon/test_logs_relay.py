"""`reckon logs` through the controller: the relay (daemon/controller/logs.py) with a scripted agent.

Each defined outcome of a read has its test: data relayed (and ``over`` once
the attempt ended), unknown job, unknown attempt, not started yet, never ran,
agent disconnected (before and during a read), an agent of protocol version 3,
output deleted by retention.
"""

from __future__ import annotations

import trio

from reckon.daemon import wire
from reckon.model import messages as M
from reckon.model.output import OutputStatus, OutputStream
from tests.daemon.trio_harness import SPEC, controller

GUARD = 1_000  # fake seconds


async def _running_job(ctl, *, version: int = M.PROTOCOL_VERSION):
    agent, _ = await ctl.connect()
    await agent.send(M.Join(agent="n1", slots=1, version=version, running=0))
    await agent.expect(M.Welcome)
    job = await ctl.submit(SPEC)
    dispatch = await agent.expect(M.Dispatch)
    await agent.send(M.Started(job=job, attempt=1, started_at=1_700_000_000.0, uid=dispatch.uid))
    await ctl.sync()
    return agent, job, dispatch


async def _answer(agent, chunk_for) -> M.OutputRead:
    read = await agent.expect(M.OutputRead)
    await agent.send(chunk_for(read))
    return read


async def test_a_read_is_relayed_and_over_once_the_attempt_ended(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, dispatch = await _running_job(ctl)
            client, _ = await ctl.connect("/client")

            await client.send({"op": "logs", "job": job, "stream": "stderr", "offset": 3, "limit": 5})
            read = await _answer(agent, lambda r: M.OutputChunk(request=r.request, status=OutputStatus.DATA,
                                                                 data=b"lo wo", size=11, path="/x/1.1.stderr"))
            assert (read.job, read.attempt, read.stream, read.offset, read.limit) == (job, 1, OutputStream.STDERR, 3, 5)
            reply = await client.receive()
            assert reply["ok"] and reply["data"] == b"lo wo" and reply["size"] == 11
            assert reply["over"] is False and reply["agent"] == "n1" and reply["path"] == "/x/1.1.stderr"

            await agent.send(M.Finished(job=job, attempt=1, exit_code=0, signal=None, finished_at=1_700_000_001.0,
                                        uid=dispatch.uid))
            await agent.expect(M.Ack)
            await client.send({"op": "logs", "job": job})
            await _answer(agent, lambda r: M.OutputChunk(request=r.request, status=OutputStatus.DATA, size=0))
            reply = await client.receive()
            assert reply["ok"] and reply["data"] == b"" and reply["over"] is True


async def test_unknown_job_and_attempt_are_errors(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": "99"})
            assert await client.receive() == {"ok": False, "error": "unknown job 99"}
            await client.send({"op": "logs", "job": job, "attempt": 2})
            assert await client.receive() == {"ok": False, "error": f"job {job} has no attempt 2 (its latest is 1)"}
            await client.send({"op": "logs", "job": job, "offset": -1})
            assert (await client.receive())["error"] == "offset must be a non-negative integer"
            assert agent.pending() == []  # nothing was asked of the agent


async def test_a_job_not_started_is_waiting_and_a_cancelled_one_never_ran(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            job = await ctl.submit(SPEC)  # no agent: it stays PENDING
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": job})
            reply = await client.receive()
            assert reply["ok"] and reply["reason"] == "not_started"
            assert reply["waiting"] == f"job {job} has not started yet (PENDING)"
            await client.send({"op": "cancel", "job": job})
            await client.receive()
            await client.send({"op": "logs", "job": job})
            assert await client.receive() == {
                "ok": False, "error": f"job {job} never ran: it is CANCELLED and no agent started it"}


async def test_a_disconnected_agent_is_waiting(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl)
            client, _ = await ctl.connect("/client")

            # Gone while a read is out: the client is told at once, not after the answer timeout.
            await client.send({"op": "logs", "job": job})
            await agent.expect(M.OutputRead)
            with trio.fail_after(1):
                await agent.aclose()
                reply = await client.receive()
            assert reply["ok"] and reply["reason"] == "agent_away" and "did not answer" in reply["waiting"]

            await ctl.sync()
            await client.send({"op": "logs", "job": job})
            reply = await client.receive()
            assert reply["ok"] and reply["reason"] == "agent_away"
            assert reply["waiting"] == f"agent n1, which holds the output of job {job} attempt 1, is not connected"


async def test_an_agent_of_version_3_is_never_sent_a_read(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl, version=3)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": job})
            reply = await client.receive()
            assert not reply["ok"] and "agent n1 speaks protocol version 3" in reply["error"]
            assert [m for m in agent.pending() if isinstance(m, M.OutputRead)] == []


async def test_output_deleted_by_retention_is_an_error_naming_it(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": job})
            await _answer(agent, lambda r: M.OutputChunk(request=r.request, status=OutputStatus.EXPIRED,
                                                         reason="deleted by this agent's output retention"))
            reply = await client.receive()
            assert reply == {"ok": False,
                             "error": f"job {job} attempt 1 on agent n1: deleted by this agent's output retention"}


async def test_extra_answers_to_one_read_are_dropped(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": job})
            read = await agent.expect(M.OutputRead)
            chunk = M.OutputChunk(request=read.request, status=OutputStatus.DATA, data=b"one", size=3)
            [frame] = wire.frames([wire.encode(chunk)] * 3, version=M.PROTOCOL_VERSION)
            await agent.send_raw(frame)  # three answers in one frame: the first one counts
            assert (await client.receive())["data"] == b"one"
            await ctl.sync()
            assert ctl.node("n1") in ("BUSY", "IDLE")  # the agent's connection is fine
            await client.send({"op": "logs", "job": job})
            await _answer(agent, lambda r: M.OutputChunk(request=r.request, status=OutputStatus.DATA, data=b"two"))
            assert (await client.receive())["data"] == b"two"


async def test_an_agent_that_does_not_answer_is_waiting_within_the_clients_timeout(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=500) as ctl:
            agent, job, _ = await _running_job(ctl)
            client, _ = await ctl.connect("/client")
            await client.send({"op": "logs", "job": job})
            await agent.expect(M.OutputRead)  # and never answered
            t0 = trio.current_time()
            reply = await client.receive()
            assert reply["ok"] and reply["reason"] == "agent_away" and "did not answer" in reply["waiting"]
            assert trio.current_time() - t0 < 10  # the CLI's default request time-out
