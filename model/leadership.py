"""A controller's hold on its epoch (PostgreSQL store): every leadership decision, sans I/O.

The database (daemon/store/postgres.py) hands out epochs: ``try_lead`` bumps
the epoch and sets the lease's end to the database's ``now() + lease``; a
renewal moves that end to ``now() + lease`` again; every commit is fenced on
the epoch.  This model decides, on the controller's own monotonic clock:

- **when to renew**: a quarter lease (``renew_every``) after the previous
  renewal (or the takeover) was *sent*, one renewal at a time;
- **until when effects may be released**: ``asked_at + (1 - margin) * lease``
  of the newest successful takeover or renewal, where ``asked_at`` is the
  controller's clock *before* the request went out.  The database's lease ends
  at least ``lease`` after that moment on the database's clock, so as long as
  the controller's clock runs at no less than ``1 - margin`` times the
  database's (the clock-rate bound, docs/ha.md), this deadline comes first;
- **when to step down**: the deadline passed without a newer renewal, the
  database refused a renewal or a commit (another controller holds the
  epoch), or the database was lost (with our session goes our advisory lock,
  so the epoch may move at once).  A controller that stepped down never leads
  again: its process exits and a new one stands by.

The daemon (daemon/controller/leadership.py) feeds it the events below with
times it reads from its clock, carries out ``SendRenew`` and ``StepDown``,
and calls ``may_release(now)`` after a batch's commit, before its effects.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Callable, Union

from ._check import check_int, check_str, check_time
from .errors import LocalProtocolError

MARGIN = 0.25  # of the lease: room for clock-rate differences between a controller and the database
MAX_REASON = 2000  # characters of a database message carried into a step-down reason


class Role(enum.Enum):
    STANDBY = "standby"  # holds no epoch: follows the log, asks to lead
    LEADING = "leading"  # holds an epoch; may release effects until its local deadline
    EXPIRED = "expired"  # the local deadline passed without a newer renewal: releases nothing, steps down
    DEPOSED = "deposed"  # the database refused a renewal or commit: another controller holds the epoch
    DISCONNECTED = "disconnected"  # lost the database (and with it the advisory lock): steps down


class Cause(enum.Enum):
    TAKEN = "taken"  # our takeover bumped the epoch
    NOT_TAKEN = "not_taken"  # the epoch was not free
    RENEWED = "renewed"  # a renewal extended the lease
    REFUSED = "refused"  # a renewal or commit found another epoch
    DEADLINE = "deadline"  # a tick found the local deadline passed
    TIME = "time"  # a tick before the deadline (or in a role without one)
    LOST = "lost"  # the database connection failed


# Which causes each role accepts, and where they lead.  A stepped-down role
# stays what it is: answers still on their way (a renewal that returns after
# the deadline, a commit refused after we expired) change nothing, and no
# event brings a stepped-down controller back.  A missing entry (a renewal
# answer to a standby, a second takeover while leading) is a bug in the
# daemon: it raises LocalProtocolError and changes nothing.
TRANSITIONS: dict[tuple[Role, Cause], Role] = {
    (Role.STANDBY, Cause.TAKEN): Role.LEADING,
    (Role.STANDBY, Cause.NOT_TAKEN): Role.STANDBY,
    (Role.STANDBY, Cause.TIME): Role.STANDBY,
    (Role.STANDBY, Cause.LOST): Role.DISCONNECTED,
    (Role.LEADING, Cause.RENEWED): Role.LEADING,
    (Role.LEADING, Cause.TIME): Role.LEADING,
    (Role.LEADING, Cause.DEADLINE): Role.EXPIRED,
    (Role.LEADING, Cause.REFUSED): Role.DEPOSED,
    (Role.LEADING, Cause.LOST): Role.DISCONNECTED,
    **{(role, cause): role
       for role in (Role.EXPIRED, Role.DEPOSED, Role.DISCONNECTED)
       for cause in (Cause.RENEWED, Cause.REFUSED, Cause.TIME, Cause.DEADLINE, Cause.LOST)},
}


# ---- configuration, events, commands ------------------------------------------


def _check_seconds(name: str, value: object) -> None:
    if type(value) not in (int, float) or not 0 < value < math.inf:  # False for NaN
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseConfig:
    lease: float  # seconds, on the database's clock (``--lease``)
    renew_every: float | None = None  # None: a quarter lease
    margin: float = MARGIN

    def __post_init__(self) -> None:
        _check_seconds("lease", self.lease)
        if type(self.margin) not in (int, float) or not 0 < self.margin < 1:
            raise ValueError(f"margin must be in (0, 1), got {self.margin!r}")
        if self.renew_every is not None:
            _check_seconds("renew_every", self.renew_every)
            if self.renew_every >= self.valid_for:
                raise ValueError(f"renew_every ({self.renew_every:g} s) must be shorter than the "
                                 f"{self.valid_for:g} s a renewal lets this controller release effects")

    @property
    def valid_for(self) -> float:
        """How long after sending a successful request this controller may release effects."""
        return self.lease * (1 - self.margin)

    @property
    def renew_interval(self) -> float:
        return self.renew_every if self.renew_every is not None else self.lease / 4


@dataclass(frozen=True, slots=True, kw_only=True)
class TakeoverResult:
    """The answer to a takeover request sent at ``asked_at``: the epoch now ours, or None."""

    epoch: int | None
    asked_at: float
    now: float  # when the answer came back

    def __post_init__(self) -> None:
        if self.epoch is not None:
            check_int("epoch", self.epoch, minimum=1)
        _check_answer(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewResult:
    """The answer to the renewal sent at ``asked_at``: ``ok`` False when the epoch is another's."""

    ok: bool
    asked_at: float
    now: float  # when the answer came back
    detail: str = ""  # the store's words on a refusal ("epoch 3 is over: epoch 4 is led by ...")

    def __post_init__(self) -> None:
        if not isinstance(self.ok, bool):
            raise ValueError("ok must be a bool")
        check_str("detail", self.detail, allow_empty=True, max_len=MAX_REASON)
        _check_answer(self)


def _check_answer(ev: TakeoverResult | RenewResult) -> None:
    check_time("asked_at", ev.asked_at)
    check_time("now", ev.now)
    if ev.now < ev.asked_at:
        raise ValueError(f"an answer (at {ev.now!r}) cannot come before its request (at {ev.asked_at!r})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """The controller's clock reads ``now``."""

    now: float

    def __post_init__(self) -> None:
        check_time("now", self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRefused:
    """The fence refused a commit: the database names another epoch."""

    detail: str

    def __post_init__(self) -> None:
        check_str("detail", self.detail, max_len=MAX_REASON)


@dataclass(frozen=True, slots=True, kw_only=True)
class DatabaseLost:
    """A request failed for another reason than the fence: the connection (and our session) is gone."""

    detail: str

    def __post_init__(self) -> None:
        check_str("detail", self.detail, max_len=MAX_REASON)


LeadershipEvent = Union[TakeoverResult, RenewResult, Tick, CommitRefused, DatabaseLost]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendRenew:
    """Renew the lease; answer with ``RenewResult(asked_at=...)``."""

    asked_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDown:
    """Stop releasing effects for good and exit, saying ``reason``."""

    reason: str


LeadershipCommand = Union[SendRenew, StepDown]


# ---- the machine -----------------------------------------------------------------


class Leadership:
    def __init__(self, config: LeaseConfig) -> None:
        self.config = config
        self.role = Role.STANDBY
        self.epoch: int | None = None
        self.valid_until = -math.inf  # on our clock: effects may be released before this
        self.next_renew = math.inf  # on our clock: the next renewal is due then
        self.renewing: float | None = None  # asked_at of the renewal on its way, if any
        self.reason = ""  # why we stepped down

    def handle(self, event: LeadershipEvent) -> list[LeadershipCommand]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise LocalProtocolError(f"leadership does not handle {type(event).__name__}")
        out: list[LeadershipCommand] = []
        handler(self, event, out)
        return out

    def may_release(self, now: float) -> bool:
        """Whether a batch committed just now may release its effects (the ``1 - margin`` rule)."""
        return self.role is Role.LEADING and now < self.valid_until

    def next_wakeup(self) -> float | None:
        """When a ``Tick`` may next do something (None: never, we stepped down or stand by)."""
        if self.role is not Role.LEADING:
            return None
        return min(self.valid_until, self.next_renew if self.renewing is None else math.inf)

    @property
    def stepped_down(self) -> bool:
        return self.role in (Role.EXPIRED, Role.DEPOSED, Role.DISCONNECTED)

    # ---- handlers: each decides the transition before it changes anything ----------

    def _move(self, cause: Cause) -> Role:
        """The role ``cause`` leads to from ours (not yet entered)."""
        role = TRANSITIONS.get((self.role, cause))
        if role is None:
            raise LocalProtocolError(f"{cause.value} is not allowed while {self.role.value}")
        return role

    def _step_down(self, role: Role, reason: str, out: list[LeadershipCommand]) -> None:
        first = not self.stepped_down
        self.role = role
        if first:
            self.reason = reason
            out.append(StepDown(reason=reason))

    def _on_takeover(self, ev: TakeoverResult, out: list[LeadershipCommand]) -> None:
        role = self._move(Cause.NOT_TAKEN if ev.epoch is None else Cause.TAKEN)
        self.role = role
        if ev.epoch is None:
            return
        self.epoch = ev.epoch
        self.valid_until = ev.asked_at + self.config.valid_for
        self.next_renew = ev.asked_at + self.config.renew_interval

    def _on_renewed(self, ev: RenewResult, out: list[LeadershipCommand]) -> None:
        role = self._move(Cause.RENEWED if ev.ok else Cause.REFUSED)
        if self.role is Role.LEADING and ev.asked_at != self.renewing:
            raise LocalProtocolError(f"no renewal was asked at {ev.asked_at!r} (the one on its way: "
                                     f"{self.renewing!r})")
        self.renewing = None
        if not ev.ok:
            self._step_down(role, ev.detail or f"epoch {self.epoch} is over: the database refused its renewal", out)
            return
        self.role = role
        if role is Role.LEADING:
            # Measured from the send: the database's lease ends at least a lease after it.
            self.valid_until = max(self.valid_until, ev.asked_at + self.config.valid_for)
            self.next_renew = max(ev.asked_at + self.config.renew_interval, ev.now)

    def _on_tick(self, ev: Tick, out: list[LeadershipCommand]) -> None:
        expired = self.role is Role.LEADING and ev.now >= self.valid_until
        role = self._move(Cause.DEADLINE if expired else Cause.TIME)
        if expired:
            self._step_down(role, f"could not renew the lease of epoch {self.epoch} in time (lease "
                                  f"{self.config.lease:g} s): stopped releasing effects before another "
                                  f"controller could take over", out)
            return
        self.role = role
        if role is Role.LEADING and self.renewing is None and ev.now >= self.next_renew:
            self.renewing = ev.now
            out.append(SendRenew(asked_at=ev.now))

    def _on_commit_refused(self, ev: CommitRefused, out: list[LeadershipCommand]) -> None:
        role = self._move(Cause.REFUSED)
        self._step_down(role, f"a commit was refused: {ev.detail}", out)  # the detail names the epochs

    def _on_database_lost(self, ev: DatabaseLost, out: list[LeadershipCommand]) -> None:
        role = self._move(Cause.LOST)
        what = f"epoch {self.epoch}" if self.epoch is not None else "no epoch yet"
        self._step_down(role, f"lost the database (holding {what}): {ev.detail}", out)


_HANDLERS: dict[type, Callable[[Leadership, object, list[LeadershipCommand]], None]] = {
    TakeoverResult: Leadership._on_takeover,  # type: ignore[dict-item]
    RenewResult: Leadership._on_renewed,  # type: ignore[dict-item]
    Tick: Leadership._on_tick,  # type: ignore[dict-item]
    CommitRefused: Leadership._on_commit_refused,  # type: ignore[dict-item]
    DatabaseLost: Leadership._on_database_lost,  # type: ignore[dict-item]
}
