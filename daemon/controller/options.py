"""The controller daemon's options (``reckon controller``'s flags, and what tests and dev mode pass)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reckon.model.controller import ControllerConfig

VALIDATE_STATE_ENV = "RECKON_VALIDATE_STATE"  # "1": `reckon controller` runs with validate_state


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerOptions:
    host: str = "127.0.0.1"
    port: int = 7420
    state_dir: Path = Path("reckon-state/controller")
    token: str | None = None
    # Who may connect (daemon/auth/handshake.py): "token" (the token above, or loopback: a single-user
    # cluster) or "munge" (a MUNGE credential per connection, decoded by the munged at munge_socket;
    # None: $RECKON_MUNGE_SOCKET, else munged's default); operators: root and operators_group's members;
    # agents: root and agent_user.
    auth: str = "token"
    munge_socket: str | None = None
    operators_group: str | None = None
    agent_user: str | None = None
    model: ControllerConfig = field(default_factory=ControllerConfig)
    heartbeat_timeout: float = 10.0  # an agent silent this long is disconnected
    snapshot_every: int = 200_000  # facts between snapshots
    max_batch: int = 5_000  # events decided per group commit
    max_dispatch_per_batch: int = 2_000  # dispatches per group commit
    # After a start, no dispatch until every agent the log knows has rejoined and
    # answered its round, or this many seconds have passed (0: no hold): model.startup.
    rejoin_grace: float = 15.0
    metrics: tuple[str, int] | None = None  # (host, port) of the Prometheus endpoint; None: off
    store: str | None = None  # postgresql://...: shared facts, standbys, fenced leadership (daemon/controller/ha.py)
    advertise: str | None = None  # the URL agents and clients are sent to while this controller leads
    lease: float = 5.0  # seconds a leader's lease runs on the database's clock (PostgreSQL store)
    tls_cert: Path | None = None  # both given: serve wss:// (daemon/controller/tls.py)
    tls_key: Path | None = None
    # Recompute and compare every derived index of the model's state after every handle
    # (ControllerState.validate_state): checking runs (reckon chaos) set it, through
    # $RECKON_VALIDATE_STATE=1 on `reckon controller`; a failed check stops the controller.
    validate_state: bool = False
