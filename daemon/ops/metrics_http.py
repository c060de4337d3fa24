"""A tiny HTTP server for Prometheus scrapes, in the daemon's own trio process.

One GET per connection: ``/metrics`` answers with ``generate_latest`` of the
registry, anything else 404.  The collectors read the daemon's live state, so
the scrape runs on the trio thread between the core loop's batches (never
concurrently with a decision), and a slow or silent scraper is cut off by a
cancel scope, never blocking the loop.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("reckon.metrics")

MAX_REQUEST = 8192  # bytes of request head we read at most
REQUEST_TIMEOUT = 10.0  # seconds a scraper may take to send its request


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port); ValueError with a clear message otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT for --metrics, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _answer(stream: trio.SocketStream, registry: CollectorRegistry,
                  before_scrape: Callable[[], Awaitable[None]] | None) -> None:
    head = b""
    with trio.move_on_after(REQUEST_TIMEOUT):
        while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    request_line = head.split(b"\r\n", 1)[0].split()
    if len(request_line) >= 2 and request_line[0] == b"GET" and request_line[1].split(b"?")[0] == b"/metrics":
        if before_scrape is not None:
            await before_scrape()
        status, ctype, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(registry)
    else:
        status, ctype, body = b"404 Not Found", b"text/plain", b"only GET /metrics is served here\n"
    await stream.send_all(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                          + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


async def serve_metrics(host: str, port: int, registry: CollectorRegistry, *,
                        before_scrape: Callable[[], Awaitable[None]] | None = None,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; reports the bound port.  ``before_scrape`` (bounded by its own
    cancel scope) refreshes what the collectors cannot read from memory."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:  # a busy port, an unknown host: one line (daemon/cli/daemons.py), not a traceback
        from reckon.daemon.listen import CannotListen

        raise CannotListen(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None

    async def handler(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, registry, before_scrape)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the scraper went away: its problem, not ours
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await trio.aclose_forcefully(stream)

    bound = listeners[0].socket.getsockname()[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(bound)
