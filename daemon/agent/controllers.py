"""Several controller URLs (``--controller ws://a:7420,ws://b:7420``): which one to try next.

With controllers on PostgreSQL one leads and the others stand by; a standby
answers "not the leader" and names the leader (protocol 4).  The agent tries
the named leader next; when a connection fails, or a standby does not know the
leader, it moves on to the next URL of the list, round and round.
"""

from __future__ import annotations

from daemon.cli.client import parse_controller_urls  # the clients' parsing: the same checks and words

__all__ = ["ControllerUrls", "parse_controller_urls"]


class ControllerUrls:
    def __init__(self, spec: str) -> None:
        self.urls = parse_controller_urls(spec)
        self._index = 0
        self._leader: str | None = None  # named by a standby: tried before the list

    @property
    def current(self) -> str:
        return self._leader or self.urls[self._index]

    def failed(self) -> None:
        """The current URL did not serve us: the next one of the list."""
        if self._leader is not None:
            self._leader = None  # back to the list where we left it
        else:
            self._index = (self._index + 1) % len(self.urls)

    def not_the_leader(self, leader: str | None) -> None:
        """The current URL is a standby; ``leader`` is where it says the leader is ("" or None: unknown)."""
        leader = (leader or "").rstrip("/")
        if leader and leader != self.current:
            self._leader = leader
        else:
            self.failed()
