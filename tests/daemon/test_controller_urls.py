"""Several controller URLs: the agent's round (daemon/agent/controllers.py) and the clients' leader
search (daemon/client_common.py ``LeaderSearch``, shared by the blocking and the trio client)."""

from __future__ import annotations

import pytest

from reckon.daemon.agent.controllers import ControllerUrls, parse_controller_urls
from reckon.daemon.client_common import ClientError, LeaderSearch, NotLeader, UsageError
from reckon.daemon.client import Client


def test_a_list_is_parsed_and_bad_ones_are_refused_clearly():
    assert parse_controller_urls("ws://a:7420") == ("ws://a:7420",)
    assert parse_controller_urls(" ws://a:7420/, wss://b:7420 ") == ("ws://a:7420", "wss://b:7420")
    with pytest.raises(UsageError, match="comma-separated"):
        parse_controller_urls("ws://a:7420,,ws://b:7420")
    with pytest.raises(UsageError, match="must start with ws://"):
        parse_controller_urls("http://a:7420")


def test_failures_go_round_the_list_and_a_named_leader_comes_first():
    urls = ControllerUrls("ws://a:1,ws://b:2,ws://c:3")
    assert urls.current == "ws://a:1"
    urls.failed()
    assert urls.current == "ws://b:2"
    urls.not_the_leader("ws://c:3/")  # b is a standby and says c leads
    assert urls.current == "ws://c:3"
    urls.failed()  # c did not answer: back to the list after b
    assert urls.current == "ws://b:2"
    urls.not_the_leader("")  # a standby that knows no leader: the next one
    assert urls.current == "ws://c:3"
    urls.not_the_leader("ws://elsewhere:9")  # a leader not in the list (its advertised URL) is tried too
    assert urls.current == "ws://elsewhere:9"
    urls.not_the_leader("ws://elsewhere:9")  # a standby naming itself: move on
    assert urls.current == "ws://c:3"


def test_the_leader_search_follows_hints_asks_each_once_and_ends_in_one_error():
    search = LeaderSearch(parse_controller_urls("ws://a:1,ws://b:2,ws://c:3"))
    assert search.current == "ws://a:1"
    assert search.failed(ClientError("controller unreachable at ws://a:1: refused")) == "ws://b:2"
    assert search.not_the_leader(NotLeader("controller at ws://b:2: not the leader", "ws://z:9/")) == "ws://z:9"
    assert search.failed(ClientError("controller unreachable at ws://z:9: refused")) == "ws://c:3"
    assert search.not_the_leader(NotLeader("controller at ws://c:3: not the leader", "ws://b:2")) is None
    message = str(search.error())
    assert message.startswith("no controller answered as the leader (4 asked): controller unreachable at ws://a:1")
    assert all(u in message for u in ("ws://a:1", "ws://b:2", "ws://z:9", "ws://c:3"))
    one = LeaderSearch(("ws://a:1",))  # one controller: its own reason, as before
    assert one.failed(ClientError("controller unreachable at ws://a:1: refused")) is None
    assert str(one.error()) == "controller unreachable at ws://a:1: refused"


async def test_the_trio_client_takes_several_urls_and_fails_with_one_error_naming_each():
    with pytest.raises(UsageError, match="must start with ws://"):
        Client("ws://127.0.0.1:1,http://x:2", None)
    with pytest.raises(ClientError) as raised:
        async with Client("ws://127.0.0.1:1, ws://127.0.0.1:2/", None):
            pass
    message = str(raised.value)
    assert message.startswith("no controller answered as the leader (2 asked)"), message
    assert "unreachable at ws://127.0.0.1:1" in message and "unreachable at ws://127.0.0.1:2" in message
