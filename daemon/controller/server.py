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
import time

import trio

from reckon.model.controller import Controller

from reckon.daemon import runtime
from reckon.daemon.controller.bootstrap import check_auth, name_new_history, start_metrics, start_serving
from reckon.daemon.controller.core import ControllerDaemon
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.controller.tls import check_tls_files
from reckon.daemon.listen import listening
from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.statelock import hold_state_dir

__all__ = ["ControllerOptions", "serve_controller"]

log = logging.getLogger("reckon.controller")


async def serve_controller(options: ControllerOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Recover from the fact log, then serve until cancelled.  Reports the bound port."""
    t0 = time.perf_counter()
    check_tls_files(options.tls_cert, options.tls_key)  # a bad pair fails now, before recovery
    await check_auth(options)  # munged unreachable, an unknown operators' group: one line, before anything
    if options.store is not None:
        from reckon.daemon.controller.ha import serve_ha  # when used: a single controller needs none of it

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
        await name_new_history(controller, store)
        daemon = ControllerDaemon(options, store, controller)
        log.info("recovered %d jobs from %d facts in %.2fs", len(controller.state.jobs),
                 replayed, time.perf_counter() - t0)
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.core_loop)  # the model has started before anyone connects
            nursery.start_soon(daemon.ticker)
            server = await start_serving(nursery, options, listeners, daemon.handle_request, daemon.refusals)
            await start_metrics(nursery, options, daemon.metrics.registry)
            task_status.started((server.port, daemon))
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
