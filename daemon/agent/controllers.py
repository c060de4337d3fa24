"""Several controller URLs (``--controller ws://a:7420,ws://b:7420``): which one to try next.

With controllers on PostgreSQL one leads and the others stand by; a standby
answers "not the leader" and names the leader (protocol 4).  The agent tries
the named leader next; when a connection fails, or a standby does not know the
leader, it moves on to the next URL of the list, round and round.

A URL that failed us (refused, timed out, or stopped answering pings) is
passed over for ``hold`` seconds: the list skips it while another URL is left,
and a standby that names it as the leader keeps us on that standby instead.
A standby's word lags: it names the holder of the current epoch until that
leader's lease runs out, so a frozen leader would be named for seconds after
it stopped answering, and every retry there costs a handshake time-out.  The
standby itself leads, or names the new leader, as soon as the epoch moves.
"""

from __future__ import annotations

import math

from reckon.daemon.client_common import parse_controller_urls  # the clients' parsing: the same checks and words

__all__ = ["ControllerUrls", "parse_controller_urls"]


class ControllerUrls:
    def __init__(self, spec: str, *, hold: float = 0.0) -> None:
        if not hold >= 0:
            raise ValueError("hold must be a number of seconds, 0 or more")
        self.urls = parse_controller_urls(spec)
        self.hold = hold
        self._index = 0
        self._leader: str | None = None  # named by a standby: tried before the list
        self._failed_until: dict[str, float] = {}  # URL -> (monotonic) time until which it is passed over

    @property
    def current(self) -> str:
        return self._leader or self.urls[self._index]

    def _held(self, url: str, now: float) -> bool:
        return self._failed_until.get(url, -math.inf) > now

    def failed(self, now: float = -math.inf) -> None:
        """The current URL did not serve us (at ``now``, monotonic): pass it over for ``hold``
        seconds and go on to the next URL."""
        if self.hold > 0 and now > -math.inf:
            self._failed_until[self.current] = now + self.hold
        self._next(now)

    def _next(self, now: float) -> None:
        """Leave the current URL: back to the list after a named leader, else its next URL not
        held (any, if all are)."""
        if self._leader is not None:
            self._leader = None  # back to the list where we left it
            if not self._held(self.urls[self._index], now):
                return
        start = self._index
        for step in range(1, len(self.urls) + 1):
            self._index = (start + step) % len(self.urls)
            if not self._held(self.urls[self._index], now):
                return
        self._index = (start + 1) % len(self.urls)  # every URL is held: round the list all the same

    def not_the_leader(self, leader: str | None, now: float = -math.inf) -> bool:
        """The current URL is a standby; ``leader`` is where it says the leader is ("" or None:
        unknown).  Whether we move: False when it names a leader that just failed us (we stay)."""
        leader = (leader or "").rstrip("/")
        if leader and leader != self.current:
            if self._held(leader, now):
                return False
            self._leader = leader
        else:
            self._next(now)
        return True

    def welcomed(self) -> None:
        """The current URL leads and took us: nothing is held any more."""
        self._failed_until.clear()
