"""The controller daemon: WebSocket server, the serial core loop, durable facts.

Shape (after trio's own servers): ``serve_controller(..., task_status=...)``
opens the fact store, replays it into the model, and only then listens.  One
core task owns the model (``ControllerDaemon``, daemon/controller/core.py): it
takes every pending event in one batch, lets the model decide, runs the
scheduler, appends the batch's facts in ONE durable transaction (group commit),
and only then releases the batch's effects (effects.py: messages, client
replies).  Each connection has its own nursery (connections.py); each resync
round runs in its own cancel scope inside that nursery, so a disconnect ends
the round and its deadline is a ``move_on_after``.  Client requests: clients.py.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio
from trio_websocket import WebSocketServer

from reckon.model.controller import Controller, ControllerConfig
from reckon.model.facts import ClusterCreated
from reckon.model.state import apply

from reckon.daemon import runtime, wire
from reckon.daemon.controller.core import ControllerDaemon
from reckon.daemon.ops.metrics_http import serve_metrics
from reckon.daemon.store.facts import FactStore
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.listen import listening
from reckon.daemon.controller.tls import CLEARTEXT_WARNING, check_tls_files, is_loopback_host, tls_handshake, with_tls
from reckon.daemon.store.statelock import hold_state_dir

log = logging.getLogger("reckon.controller")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerOptions:
    host: str = "127.0.0.1"
    port: int = 7420
    state_dir: Path = Path("reckon-state/controller")
    token: str | None = None
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


class ContainedServer(WebSocketServer):
    """trio-websocket's server, where one connection's failure ends that connection only.

    trio-websocket 0.12 answers a ping from its reader task; a ping that arrives
    while the connection is closing makes wsproto raise ``LocalProtocolError``
    there, out of the connection's nursery, through the listener's handler
    nursery, and the whole controller stopped (found by the long ``reckon
    chaos`` run: agents ping every 5 s, and a silent agent's connection is
    closed).  Whatever one connection raises is logged and ends it alone.
    """

    refusals: RefusalLog | None = None  # TLS handshake failures, once per peer and reason

    async def _handle_connection(self, stream: trio.abc.Stream) -> None:
        if not await tls_handshake(stream, self.refusals):
            return
        try:
            await super()._handle_connection(stream)
        except Exception as exc:  # not Cancelled (a BaseException): a stop still stops everything
            log.info("a connection failed in the WebSocket layer, closed it: %r", exc)
            await trio.aclose_forcefully(stream)


async def serve_controller(options: ControllerOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Recover from the fact log, then serve until cancelled.  Reports the bound port."""
    t0 = time.perf_counter()
    check_tls_files(options.tls_cert, options.tls_key)  # a bad pair fails now, before recovery
    if options.store is not None:
        from reckon.daemon.controller.ha import serve_ha

        await serve_ha(options, task_status=task_status)
        return
    with hold_state_dir(options.state_dir, "controller"):
        async with listening(options.host, options.port) as listeners:  # before the store: see listen.py
            await _serve(options, t0, listeners, task_status)


async def _serve(options: ControllerOptions, t0: float, listeners: list[trio.SocketListener], task_status) -> None:
    runtime.tune()
    store = await FactStore.open(options.state_dir)
    try:
        snapshot, facts, _ = await store.load()
        with runtime.gc_paused():
            controller = Controller.from_log(facts, options.model, snapshot)
        replayed = len(facts)
        del facts, snapshot  # the state is built: the decoded log need not stay in memory
        runtime.settle()
        if controller.state.cluster is None:
            # A new history: name it, so agents never confuse it with another one.
            created = ClusterCreated(cluster=secrets.token_hex(8))
            apply(controller.state, created)
            await store.append([created])
        daemon = ControllerDaemon(options, store, controller)
        log.info("recovered %d jobs from %d facts in %.2fs", len(controller.state.jobs),
                 replayed, time.perf_counter() - t0)
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.core_loop)  # the model has started before anyone connects
            nursery.start_soon(daemon.ticker)
            contained = ContainedServer(daemon.handle_request, with_tls(listeners, options.tls_cert, options.tls_key),
                                        handler_nursery=nursery, max_message_size=wire.MAX_AGENT_MESSAGE)
            contained.refusals = daemon.refusals
            server = await nursery.start(contained.run)
            if options.token is None:
                log.warning("no token configured: accepting loopback connections only")
            elif options.tls_cert is None and not is_loopback_host(options.host):
                log.warning("%s", CLEARTEXT_WARNING.format(host=options.host))
            if options.metrics is not None:
                await nursery.start(serve_metrics, *options.metrics, daemon.metrics.registry)
            task_status.started((server.port, daemon))
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
