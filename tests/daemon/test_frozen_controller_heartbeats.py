"""A controller that was frozen does not call its agents silent (daemon/controller/connections.py).

Found by ``reckon chaos`` (seed 1130): after every SIGSTOP of the controller longer
than ``--heartbeat-timeout``, its first act on SIGCONT was "agent X silent for 3s:
disconnecting" for every agent, although they had all kept sending heartbeats.
The kernel had received them; trio, waking with the read deadline long past,
cancelled the read before the connection's reader task could hand them over.

Here the freeze is a jump of the mock clock past the deadline, with the agent's
heartbeat arriving at that same instant.
"""

from __future__ import annotations

import trio

from reckon.model import messages as M
from tests.daemon.trio_harness import controller

GUARD = 1_000  # fake seconds


async def test_a_heartbeat_waiting_when_a_frozen_controller_wakes_keeps_the_agent(tmp_path, autojump_clock):
    heartbeat_timeout = 10.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=heartbeat_timeout) as ctl:
            agent, _ = await ctl.join("n1")
            await agent.expect(M.Welcome)
            await ctl.sync()
            assert ctl.node("n1") == "IDLE"

            autojump_clock.jump(heartbeat_timeout * 2)  # frozen: its clock ran on, it did not
            await agent.send(M.Heartbeat(running=0, digest=0, seen_seq=1))  # sent meanwhile

            await trio.sleep(heartbeat_timeout / 2)
            assert not agent.closed.is_set()
            await ctl.sync()
            assert ctl.node("n1") == "IDLE"


async def test_an_agent_silent_across_the_freeze_is_still_disconnected(tmp_path, autojump_clock):
    heartbeat_timeout = 10.0
    with trio.fail_after(GUARD):
        async with controller(tmp_path, heartbeat_timeout=heartbeat_timeout) as ctl:
            agent, done = await ctl.join("n1")
            await agent.expect(M.Welcome)
            await ctl.sync()

            autojump_clock.jump(heartbeat_timeout * 2)  # frozen, and nothing came from the agent

            assert await agent.wait_closed() == []
            await done.wait()
            await ctl.sync()
            assert ctl.node("n1") == "DISCONNECTED"
