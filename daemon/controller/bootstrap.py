"""What the single controller (server.py) and the controller on PostgreSQL (ha.py) both do to
start serving: the WebSocket endpoint on the bound listeners, the warnings about what is unsafe,
the metrics endpoint, the name of a new history.  Neither path imports the other."""

from __future__ import annotations

import functools
import logging
import secrets
from typing import Awaitable, Callable

import trio
from prometheus_client import CollectorRegistry
from trio_websocket import WebSocketRequest, WebSocketServer

from reckon.model.controller import Controller
from reckon.model.facts import ClusterCreated
from reckon.model.state import apply

from reckon.daemon import wire
from reckon.daemon.auth.handshake import Authenticator
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.controller.tls import CLEARTEXT_WARNING, tls_handshake, with_tls
from reckon.daemon.ops.metrics_http import serve_metrics
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.store.interface import ControllerStore
from reckon.daemon.wsconnect import is_loopback_host

log = logging.getLogger("reckon.controller")


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


async def start_serving(nursery: trio.Nursery, options: ControllerOptions, listeners: list[trio.SocketListener],
                        handler: Callable[[WebSocketRequest], Awaitable[None]],
                        refusals: RefusalLog) -> WebSocketServer:
    """Serve ``handler`` on ``listeners`` (wss:// when the options name a certificate), in ``nursery``;
    warn once about what is unsafe in the options.  The running server (its ``port``)."""
    contained = ContainedServer(handler, with_tls(listeners, options.tls_cert, options.tls_key),
                                handler_nursery=nursery, max_message_size=wire.MAX_AGENT_MESSAGE)
    contained.refusals = refusals
    server = await nursery.start(contained.run)
    log.info("%s", Authenticator.from_options(options).startup_line())  # who may connect, in one line
    if options.auth == "token" and options.token is None:
        log.warning("no token configured: accepting loopback connections only")
    elif options.tls_cert is None and not is_loopback_host(options.host):
        log.warning("%s", CLEARTEXT_WARNING.format(host=options.host))
    return server


async def start_metrics(nursery: trio.Nursery, options: ControllerOptions, registry: CollectorRegistry,
                        before_scrape: Callable[[], Awaitable[None]] | None = None) -> None:
    """The Prometheus endpoint when the options ask for one (``--metrics HOST:PORT``)."""
    if options.metrics is not None:
        await nursery.start(functools.partial(serve_metrics, *options.metrics, registry,
                                              before_scrape=before_scrape))


async def name_new_history(controller: Controller, store: ControllerStore) -> None:
    """A log without a history's name gets one, so agents never confuse it with another history."""
    if controller.state.cluster is None:
        created = ClusterCreated(cluster=secrets.token_hex(8))
        apply(controller.state, created)
        await store.append([created])


async def check_auth(options: ControllerOptions) -> None:
    """Before anything starts: the authentication options can work (``AuthConfigError``), and in
    munge mode our munged answers (``MungeError`` naming its socket).  ``start_serving`` says which mode."""
    await Authenticator.from_options(options).check_munged()
