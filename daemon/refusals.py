"""Logging a steady refusal without a line per attempt.

A refused peer keeps trying (a duplicate agent, a bad token, another
controller history): logging each attempt filled logs with one line a
second and hid everything else.  ``RefusalLog`` logs a condition when it
starts or changes, then a reminder (with how many attempts it refused
meanwhile) at most every ``remind_every`` seconds, and forgets it when the
caller says it is over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Hashable

MAX_TRACKED = 10_000  # conditions remembered at once (one per refused peer); the oldest is dropped beyond


@dataclass(slots=True)
class _Condition:
    message: str
    logged_at: float  # when its last line was written
    since_logged: int = 0  # attempts refused since that line


class RefusalLog:
    def __init__(self, logger: logging.Logger, *, remind_every: float, clock: Callable[[], float]) -> None:
        self.log = logger
        self.remind_every = remind_every
        self.clock = clock  # monotonic seconds (trio.current_time in the daemons)
        self._conditions: dict[Hashable, _Condition] = {}

    def refused(self, key: Hashable, message: str) -> bool:
        """One refused attempt of ``key`` for ``message``; True if it was logged."""
        now = self.clock()
        known = self._conditions.get(key)
        if known is None or known.message != message:
            self._conditions.pop(key, None)
            if len(self._conditions) >= MAX_TRACKED:
                self._conditions.pop(next(iter(self._conditions)))
            self._conditions[key] = _Condition(message=message, logged_at=now)
            self.log.warning("%s", message)
            return True
        known.since_logged += 1
        self.log.debug("refused again: %s", message)  # -v shows every attempt
        if now - known.logged_at >= self.remind_every:
            self.log.warning("still refused (%d more attempt(s) in %.0f s): %s", known.since_logged,
                             now - known.logged_at, message)
            known.logged_at, known.since_logged = now, 0
            return True
        return False

    def cleared(self, key: Hashable) -> bool:
        """The condition of ``key`` is over (the peer was accepted); True if there was one."""
        return self._conditions.pop(key, None) is not None

    def active(self, key: Hashable) -> bool:
        return key in self._conditions
