"""An agent with several controller URLs leaves a frozen leader in time (issue #12, `reckon bench failover`).

The freeze figure of the bench was 21.7 s against a target of lease + 3 s: the
agent noticed the silent leader only after its ping timeout, then waited 2 s
for a close handshake the frozen peer never answers, then dialled the same
leader again (a welcomed connection that ended did not count as failed) and
waited out a 5 s handshake time-out there.  And a standby asked in between
names the frozen leader until its lease runs out.  Under trio's mock clock,
with the scripted network of trio_harness.py.
"""

from __future__ import annotations

import trio

from reckon.daemon.agent.controllers import ControllerUrls
from reckon.model import messages as M
from reckon.model.agent import SessionState
from tests.daemon.test_agent_daemon import GUARD, install, options, start_agent
from tests.daemon.trio_harness import FakeNet, until

A, B = "ws://a.test", "ws://b.test"


def test_a_url_that_failed_is_passed_over_and_a_standby_naming_it_keeps_us_on_the_standby():
    urls = ControllerUrls(f"{A},{B}", hold=3.0)
    urls.failed(now=10.0)  # a stopped answering
    assert urls.current == B
    assert urls.not_the_leader(A, now=11.0) is False  # b still names a (its lease runs): stay on b
    assert urls.current == B
    assert urls.not_the_leader(A, now=13.5) is True  # a's hold is over: b's word is followed again
    assert urls.current == A


def test_the_list_skips_a_held_url_while_another_is_left():
    urls = ControllerUrls(f"{A},{B},ws://c.test", hold=3.0)
    urls.failed(now=0.0)  # a
    urls.failed(now=0.5)  # b
    assert urls.current == "ws://c.test"
    urls.failed(now=1.0)  # c too: every URL is held, so the next one of the list all the same
    assert urls.current == A
    urls.welcomed()  # a took us: nothing is held any more
    assert urls.not_the_leader(B, now=1.5) is True and urls.current == B


async def test_a_silent_leader_is_left_for_the_next_url_without_a_close_handshake(tmp_path, autojump_clock,
                                                                                    monkeypatch):
    """The leader stops answering (frozen): the agent drops it after its ping timeout, at once
    (no 2 s close handshake), and dials the *next* URL; that standby names the frozen leader,
    and the agent stays with the standby instead of going back."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            net = FakeNet(nursery)
            install(monkeypatch, net)
            net.up = True
            opts = options(tmp_path / "agent")
            opts = type(opts)(**{**{f: getattr(opts, f) for f in opts.__dataclass_fields__},
                                 "controller": f"{A},{B}", "ping_interval": 1.0, "pong_timeout": 3.0})
            agent, scope, stopped = await start_agent(nursery, opts)
            leader = await net.accepted.receive()
            await leader.expect(M.Join)
            await leader.send(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, cluster="c1"))
            await agent.joined.wait()

            net.blackhole = True  # frozen: no byte, no close
            frozen = trio.current_time()
            await until(lambda: agent.model.session is SessionState.DISCONNECTED, timeout=60)
            net.blackhole = False  # (what is dialled next answers)
            await until(lambda: len(net.urls) >= 2, timeout=60)
            assert net.urls[1].startswith(B + "/")  # the next URL, not the silent leader again
            # Within ping interval + pong timeout + one reconnect delay: no close handshake waited out.
            assert net.attempts[1] - frozen <= opts.ping_interval + opts.pong_timeout + opts.reconnect_initial
            standby = await net.accepted.receive()
            await standby.expect(M.Join)
            await standby.send(M.not_the_leader(M.PROTOCOL_VERSION, A))  # its word lags: a's lease still runs
            await standby.ws.aclose(code=1008, reason="not the leader")  # as daemon/controller/ha.py does
            await until(lambda: len(net.urls) >= 3, timeout=60)
            assert net.urls[2].startswith(B + "/")  # asked again, not sent back to the frozen a
            again = await net.accepted.receive()
            await again.expect(M.Join)
            await again.send(M.Welcome(seq=1, version=M.PROTOCOL_VERSION, token=None, cluster="c1"))
            await until(lambda: agent.model.session is SessionState.OPERATING, timeout=60)
            scope.cancel()
            await stopped.wait()
            nursery.cancel_scope.cancel()


def test_the_ping_timeout_defaults_shorter_with_several_controller_urls():
    from reckon.daemon.cli.daemons import HA_PING_TIMEOUT, PING_TIMEOUT, agent_ping_timeout

    assert agent_ping_timeout(None, A) == PING_TIMEOUT == 10.0
    assert agent_ping_timeout(None, f"{A},{B}") == HA_PING_TIMEOUT == 3.0
    assert agent_ping_timeout(7.0, f"{A},{B}") == 7.0  # an operator's choice stands
