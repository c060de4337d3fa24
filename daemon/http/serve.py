"""Serving the HTTP API on hypercorn's trio worker, in the caller's nursery (beside the controller).

hypercorn binds its own sockets from a ``Config``; they are bound here first (``create_sockets``)
so a taken port is one line (``CannotListen``) before anything is served, then handed to its trio
worker.  With the controller's certificate and key the API is HTTPS, as the WebSocket is wss.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio
from hypercorn.config import Config
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from reckon.daemon.http.app import HttpApp
from reckon.daemon.http.backend import Backend
from reckon.daemon.listen import CannotListen

log = logging.getLogger("reckon.http")


def config_for(host: str, port: int, tls_cert: Path | None = None, tls_key: Path | None = None) -> Config:
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.errorlog = log  # hypercorn's own lines go to reckon's log
    config.accesslog = None
    config.graceful_timeout = 1.0  # a stop does not wait on a browser's keep-alive connection
    config.include_server_header = False
    if tls_cert is not None and tls_key is not None:
        config.certfile, config.keyfile = str(tls_cert), str(tls_key)
    return config


async def serve_http(backend: Backend, host: str, port: int, *, tls_cert: Path | None = None,
                     tls_key: Path | None = None, version: str = "0",
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the API until cancelled; reports its base URL (``http://HOST:PORT``, or https)."""
    config = config_for(host, port, tls_cert, tls_key)
    try:
        sockets = config.create_sockets()
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets):
            sock.listen(config.backlog)  # (worker_serve listens only on sockets it made itself)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise CannotListen(f"cannot listen on {host}:{port} (--http): {reason}") from None
    app = wrap_app(HttpApp(backend, version), config.wsgi_max_body_size, "asgi")
    bound = (sockets.secure_sockets or sockets.insecure_sockets)[0].getsockname()[1]
    scheme = "https" if config.ssl_enabled else "http"

    class _Status:  # hypercorn reports its binds' text; ours is the URL with the port bound
        def started(self, value: object = None) -> None:
            task_status.started(f"{scheme}://{host if ':' not in host else f'[{host}]'}:{bound}")

    try:
        await worker_serve(app, config, sockets=sockets, task_status=_Status())
    finally:  # hypercorn wraps these sockets but leaves closing them to whoever made them
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets):
            sock.close()
