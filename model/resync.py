"""The controller's side of one rejoin resync round.

A round is armed with a fresh token (given as input: the model has no
randomness of its own) and the exact set of (job, attempt) it asks about.  It
collects report pages until it holds every page, then hands the whole report
back exactly once.  The controller keeps at most one round per agent; a page
whose token is not the current round's is stale and is discarded by the
controller before it ever reaches a round.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .errors import LocalProtocolError, RemoteProtocolError
from .messages import ReportEntry, ResyncReport


class RoundState(enum.Enum):
    AWAITING_REPORT = "awaiting_report"  # the query is out, no report page has come back yet
    COLLECTING = "collecting"  # some report pages are in, not all
    APPLIED = "applied"  # every page arrived and the report was applied once (terminal)
    DISCARDED = "discarded"  # the agent went away or was superseded (terminal)
    TIMED_OUT = "timed_out"  # the deadline passed first (terminal)


class RoundEvent(enum.Enum):
    PAGE = "page"  # a report page arrived and more are missing
    COMPLETE = "complete"  # the last missing report page arrived
    DISCARD = "discard"  # the agent disconnected or joined again
    DEADLINE = "deadline"  # the round's deadline expired


# The round machine.  A round waits for the report, collects pages, and ends
# exactly once: applied, discarded or timed out.  The three end states have no
# entries, so a late page, a second completion or a deadline after the end is
# a protocol error that changes nothing (the controller already ignores them
# by token, this is the second line of defence).
ROUND_TRANSITIONS: dict[tuple[RoundState, RoundEvent], RoundState] = {
    (RoundState.AWAITING_REPORT, RoundEvent.PAGE): RoundState.COLLECTING,
    (RoundState.AWAITING_REPORT, RoundEvent.COMPLETE): RoundState.APPLIED,
    (RoundState.AWAITING_REPORT, RoundEvent.DISCARD): RoundState.DISCARDED,
    (RoundState.AWAITING_REPORT, RoundEvent.DEADLINE): RoundState.TIMED_OUT,
    (RoundState.COLLECTING, RoundEvent.PAGE): RoundState.COLLECTING,
    (RoundState.COLLECTING, RoundEvent.COMPLETE): RoundState.APPLIED,
    (RoundState.COLLECTING, RoundEvent.DISCARD): RoundState.DISCARDED,
    (RoundState.COLLECTING, RoundEvent.DEADLINE): RoundState.TIMED_OUT,
}

ROUND_END_STATES = frozenset({RoundState.APPLIED, RoundState.DISCARDED, RoundState.TIMED_OUT})


@dataclass(slots=True)
class ResyncRound:
    agent: str
    token: bytes
    queried: dict[str, int]  # job -> attempt the controller asked about
    deadline: float
    state: RoundState = RoundState.AWAITING_REPORT
    pages: int | None = None  # total report pages, fixed by the first page
    received: dict[int, tuple[ReportEntry, ...]] = field(default_factory=dict)

    def _move(self, event: RoundEvent) -> None:
        try:
            self.state = ROUND_TRANSITIONS[(self.state, event)]
        except KeyError:
            raise LocalProtocolError(f"round event {event.value} not allowed in {self.state.value}") from None

    @property
    def open(self) -> bool:
        return self.state not in ROUND_END_STATES

    def add_page(self, page: ResyncReport) -> list[ReportEntry] | None:
        """Take one page; return the whole report when it is complete, else None.

        Raises ``RemoteProtocolError`` (and keeps nothing of the page) when the
        page contradicts earlier ones or the finished report is incomplete.
        """
        if page.token != self.token:
            raise LocalProtocolError("page for another round reached this round")
        if not self.open:
            raise LocalProtocolError(f"round is already {self.state.value}")
        if self.pages is not None and page.pages != self.pages:
            raise RemoteProtocolError(f"report page says {page.pages} pages, earlier pages said {self.pages}")
        seen = self.received.get(page.page)
        if seen is not None:
            if seen != page.entries:
                raise RemoteProtocolError(f"report page {page.page} sent twice with different entries")
            return None  # an exact duplicate: nothing new
        if len(self.received) + 1 < page.pages:
            self.pages = page.pages
            self.received[page.page] = page.entries
            self._move(RoundEvent.PAGE)
            return None
        entries = _assemble({**self.received, page.page: page.entries}, page.pages)
        self._check_complete(entries)
        self.pages = page.pages
        self.received[page.page] = page.entries
        self._move(RoundEvent.COMPLETE)
        return entries

    def _check_complete(self, entries: list[ReportEntry]) -> None:
        seen = {(e.job, e.attempt) for e in entries}
        if len(seen) < len(entries):
            counted: set[tuple[str, int]] = set()
            for e in entries:
                if (e.job, e.attempt) in counted:
                    raise RemoteProtocolError(f"report names job {e.job} attempt {e.attempt} twice")
                counted.add((e.job, e.attempt))
        missing = self.queried.items() - seen
        if missing:
            raise RemoteProtocolError(f"report has no entry for queried job(s) {sorted(j for j, _ in missing)[:5]}")

    def discard(self) -> None:
        self._move(RoundEvent.DISCARD)

    def expire(self) -> None:
        self._move(RoundEvent.DEADLINE)


def _assemble(received: dict[int, tuple[ReportEntry, ...]], pages: int) -> list[ReportEntry]:
    return [entry for page in range(pages) for entry in received[page]]
