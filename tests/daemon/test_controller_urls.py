"""Several controller URLs for an agent (daemon/agent/controllers.py)."""

from __future__ import annotations

import pytest

from daemon.agent.controllers import ControllerUrls, parse_controller_urls


def test_a_list_is_parsed_and_bad_ones_are_refused_clearly():
    assert parse_controller_urls("ws://a:7420") == ("ws://a:7420",)
    assert parse_controller_urls(" ws://a:7420/, wss://b:7420 ") == ("ws://a:7420", "wss://b:7420")
    with pytest.raises(ValueError, match="comma-separated"):
        parse_controller_urls("ws://a:7420,,ws://b:7420")
    with pytest.raises(ValueError, match="must start with ws://"):
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
