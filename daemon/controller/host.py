"""What the core loop's helpers may reach of the controller daemon that hosts them.

``ControllerDaemon`` (core.py) builds its parts (the client operations, the output relay, the
metrics, the start-up) and hands itself to them; they type it as ``DaemonHost``, this narrow
face, so no part imports the daemon that imports it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from reckon.model.controller import Controller
from reckon.model.scheduler import Scheduler

from reckon.daemon.controller.connections import AgentConn
from reckon.daemon.controller.lifecycle import NodeTracker
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.store.interface import ControllerStore


class DaemonHost(Protocol):
    options: ControllerOptions
    store: ControllerStore
    model: Controller
    scheduler: Scheduler
    nodes: NodeTracker  # since when each node is in its state
    started_at: float  # wall time
    log_dirs: dict[str, tuple[str, str]]  # agent -> (log_dir, log_layout) from its Join
    mark_hold: bool  # the id mark file says a restored copy's whole-grace hold lasts (startup.py)
    queries: Any  # query.QueryIndex (not imported: it reads this host): the committed jobs, for the query op (query.py; kept by startup.commit)
    before_release: Callable[[], None]  # raises if this controller may not release effects (ha.py)

    async def call(self, event: Any = None, call: Callable[[], Any] | None = None) -> Any:
        """Run an event or a read through the core loop; return once its effects are durable."""

    def job_object(self, job_id: str) -> dict:
        """A job as a client sees it (its output paths included)."""

    def connection(self, conn_id: int | None) -> AgentConn | None:
        """The live agent connection ``conn_id``, if it is still open."""
