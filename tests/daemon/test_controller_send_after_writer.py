"""A send to an agent connection whose writer has already ended must not kill the controller.

Found by the long chaos run (seed 20261130, a connection cut): the writer
task ends when a send fails (the peer is gone), closing its end of the
connection's queue, while the connection is still registered (its reader has
not wound up yet).  A Dispatch released to it in that window raised
``trio.BrokenResourceError`` in the core loop, and the controller exited.
The message is dropped instead (the connection is going; the agent's rejoin
reconciles), and the controller keeps serving.
"""

from __future__ import annotations

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket._impl import CloseReason

from reckon.model import messages as M
from reckon.model.jobs import JobState
from tests.daemon.trio_harness import controller

GUARD = 1_000  # fake seconds


async def test_a_dispatch_to_a_connection_whose_writer_ended_is_dropped_and_the_controller_lives(
        tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=100) as ctl:
            agent, handler_done = await ctl.join("n1", slots=2)
            assert isinstance(await agent.receive(), M.Welcome)
            [conn] = ctl.daemon._conns.values()
            hanging_up = trio.Event()

            async def send_fails(data) -> None:
                raise WSClosed(CloseReason(1006, "the peer is gone"))

            async def slow_close(*args, **kwargs) -> None:
                hanging_up.set()
                await trio.sleep(1)  # the writer hangs up; the connection is still registered

            conn.ws.send_message = send_fails
            conn.ws.aclose = slow_close
            await ctl.submit()             # its Dispatch ends the writer
            await hanging_up.wait()
            await ctl.submit()             # its Dispatch finds the writer gone
            await ctl.sync()
            await handler_done.wait()
            await ctl.sync()
            assert ctl.node("n1") == "DISCONNECTED"
            # Not lost: still placed (the rejoin round reconciles it) or back in the queue.
            assert ctl.job("2").state in (JobState.RUNNING, JobState.PENDING)
            assert (await ctl.daemon.call(call=lambda: "alive")) == "alive"
