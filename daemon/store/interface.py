"""What the controller daemon needs from its fact store, and how one is chosen.

Two implementations: ``daemon.store.facts.FactStore`` (SQLite in the state
directory: the embedded default, one controller) and
``daemon.store.postgres.PgFactStore`` (PostgreSQL: several controllers, one
leader per epoch, every commit fenced by that epoch).  The cluster's identity
is the log's first fact (``ClusterCreated``), so it lives wherever the facts do.

The contract both keep (tests/daemon/test_store_contract.py runs it against both, and checks
that both classes have every member of ``ControllerStore`` with the same signature):

* ``append(facts)`` writes the whole batch in one transaction and returns only
  once it is durable (group commit); a batch is fully there or not at all, and
  a cancelled caller gets ``Cancelled`` only if nothing was written.
* ``seq`` numbers facts 1, 2, 3, ... without gaps; a snapshot covers every fact
  up to its ``upto_seq``; ``load()`` is (latest snapshot, the facts after it,
  the last seq), and a gap or an undecodable row is a ``StoreError``.
* ``facts_about(job)`` is what ``reckon history`` reads: the facts still in
  the log (a pruning snapshot drops older ones) that name the job, in order.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

from reckon.model import facts as F

StoreKind = Literal["sqlite", "postgresql"]


@runtime_checkable
class ControllerStore(Protocol):
    """The controller's fact log, as the core loop, the client operations and the metrics use it."""

    @property
    def kind(self) -> StoreKind:
        """Which store this is ("sqlite": a file in the state directory; "postgresql": a shared database)."""

    @property
    def last_seq(self) -> int:
        """The last fact's seq as this store last saw it."""

    @property
    def facts_since_snapshot(self) -> int:
        """Facts a restart would replay: the controller snapshots when this grows large."""

    @property
    def where(self) -> str:
        """Where the facts live, for messages (no password)."""

    def disk_bytes(self) -> int | None:
        """Bytes the store's own files take on disk now; None when it keeps none of its own
        (PostgreSQL: the database's size is its operator's to watch)."""

    async def load(self) -> tuple[dict[str, Any] | None, list[F.Fact], int]:
        """(latest snapshot or None, the facts after it in order, the last seq)."""

    async def append(self, facts: Sequence[F.Fact], then: Callable[[int], None] | None = None) -> int:
        """Append the batch in one transaction, durable on return; the new last seq.

        ``then(last_seq)`` runs on the store's thread once the batch is durable, before this
        returns (the controller records the log's position in its id mark file there)."""

    async def write_snapshot(self, snapshot: dict[str, Any], upto_seq: int) -> None:
        """Store a snapshot covering facts ``seq <= upto_seq``."""

    async def facts_about(self, job: str) -> list[F.Fact]:
        """The facts still in the log that name ``job``, in order."""

    async def aclose(self) -> None:
        """Close the store (idempotent)."""

    async def __aenter__(self) -> "ControllerStore":
        """The store itself; ``__aexit__`` closes it."""

    async def __aexit__(self, *exc: object) -> None:
        """``aclose()``."""


def is_postgres_url(store: str | None) -> bool:
    return store is not None and store.startswith(("postgresql://", "postgres://"))


def check_store_url(store: str | None) -> None:
    """A clear error for a ``--store`` this reckon cannot use, before connecting (changes nothing).
    A well-formed URL whose database cannot be reached is no usage error: the start fails then (exit 1)."""
    if store is None:
        return
    if not is_postgres_url(store):
        raise ValueError(f"--store must be a postgresql:// URL (got {store.split('://')[0]!r}); "
                         "without --store the controller keeps its facts in SQLite under --state-dir")
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # PgFactStore.open says how to install it
        return
    try:
        info = conninfo_to_dict(store)
    except Exception as exc:  # psycopg.ProgrammingError; its text never contains the password
        raise ValueError(f"--store is not a usable postgresql:// URL: {exc}") from None
    port = str(info.get("port", "5432"))
    if not all(p.isdigit() for p in port.split(",")):  # libpq checks this only when it connects
        raise ValueError(f"--store names port {port!r}: not a number")


class SteppedDown(Exception):
    """This controller led and no longer does (deposed, or its lease could not be renewed in
    time): it has stopped releasing effects and exits; run it again to stand by."""
