"""Opening a WebSocket whose connect timeout really bounds the opening handshake, over TLS or not.

trio-websocket 0.12's ``open_websocket_url`` starts its reader task before
the handshake; when ``connect_timeout`` fires it raises only once that
reader ends, which it never does while the peer holds the TCP connection
open without answering (a stopped controller, whose kernel still accepts
connections; a stalled network path).  The attempt then hangs forever: an
agent never retries, a CLI call never returns.  Found by ``reckon chaos``
(SIGSTOP of the controller for longer than the connect timeout).

TLS (``wss://``): the same reader task swallows a failed TLS handshake (an
untrusted certificate, a name that does not match, a server that does not
speak TLS), so the attempt would end as a bare timeout with no reason, after
the whole connect timeout.  So before a ``wss://`` attempt ``open_websocket``
makes one TLS handshake of its own with the same address (``tls_failure``)
and raises ``TLSFailure`` at once with what it found.  The price is one more
TLS handshake per connection opened (agents open one per session).
"""

from __future__ import annotations

import ipaddress
import math
import ssl
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import trio
from trio_websocket import ConnectionTimeout, HandshakeError, WebSocketConnection, open_websocket_url

from reckon.daemon.client_common import plain_to_tls_text, probe_context, tls_failure_text

HANDSHAKE_GRACE = 1.0  # seconds past connect_timeout before the attempt is cancelled from outside


class TLSFailure(HandshakeError):
    """The TLS handshake with the controller failed; ``str()`` is a one-line reason."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cleartext_token_warning(url: str, token: str | None) -> str | None:
    """The warning for a token that would cross the network unencrypted, or None."""
    if token and urlsplit(url).scheme == "ws" and not is_loopback_host(urlsplit(url).hostname or ""):
        return (f"the token is sent unencrypted to {url} (plain ws:// to a non-loopback address): "
                "serve the controller with --tls-cert/--tls-key and use wss://")
    return None


def cleartext_munge_warning(url: str) -> str | None:
    """The warning for a munge agent that would trust an unauthenticated controller, or None.

    MUNGE proves the agent to the controller, not the controller to the agent: over plain ws://
    to another host, whatever answers at that address is obeyed, and a root agent runs jobs as
    whichever user it is told.  TLS with the cluster's CA is what authenticates the controller."""
    if urlsplit(url).scheme == "ws" and not is_loopback_host(urlsplit(url).hostname or ""):
        return (f"--auth munge over plain ws:// to {url}: nothing proves the controller is the real one "
                "(anything answering there could run jobs as any user here): serve it with "
                "--tls-cert/--tls-key and use wss:// with --ca")
    return None


async def tls_failure(url: str, ssl_context: ssl.SSLContext | None, timeout: float) -> str | None:
    """Make one TLS handshake with the host of ``url``; the reason it fails for TLS, or None.

    None too when the host cannot be reached (the WebSocket attempt reports that);
    ``ConnectionTimeout`` when the handshake takes longer than ``timeout``.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    context = ssl_context or ssl.create_default_context()
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context, https_compatible=True)
        except OSError:
            return None  # not a TLS matter: the caller reports its own error
        try:
            await stream.do_handshake()
            return None
        except trio.BrokenResourceError as exc:
            return tls_failure_text(exc.__cause__, host, port) if exc.__cause__ is not None else None
        finally:
            await trio.aclose_forcefully(stream)
    raise ConnectionTimeout(f"no TLS handshake from {host}:{port} within {timeout:g}s")


async def speaks_tls(url: str, deadline: float) -> bool:
    """Whether the host of ``url`` completes a TLS handshake by ``deadline`` (False if not, or not by then):
    asked after a ws:// attempt failed, to say why."""
    parts = urlsplit(url)
    with trio.move_on_at(deadline):
        try:
            stream = await trio.open_ssl_over_tcp_stream(parts.hostname or "", parts.port or 80,
                                                         ssl_context=probe_context(), https_compatible=True)
        except OSError:
            return False
        try:
            await stream.do_handshake()
            return True
        except trio.BrokenResourceError:
            return False
        finally:
            await trio.aclose_forcefully(stream)
    return False


@asynccontextmanager
async def open_websocket(url: str, *, connect_timeout: float, opener: Any = open_websocket_url,
                         **kwargs: Any) -> AsyncIterator[WebSocketConnection]:
    """``opener`` (``open_websocket_url``), raising ``ConnectionTimeout`` (a ``HandshakeError``)
    when the handshake overruns ``connect_timeout``, and ``TLSFailure`` when a ``wss://``
    handshake fails for a TLS reason or a ``ws://`` one reached a controller that speaks TLS."""
    if urlsplit(url).scheme == "wss":
        reason = await tls_failure(url, kwargs.get("ssl_context"), connect_timeout)
        if reason is not None:
            raise TLSFailure(reason)
    connected = False
    deadline = trio.current_time() + connect_timeout + HANDSHAKE_GRACE  # the probe below stays within it too
    try:
        with trio.CancelScope(deadline=deadline) as attempt:
            async with opener(url, connect_timeout=connect_timeout, **kwargs) as ws:
                connected = True
                attempt.deadline = math.inf  # connected: the connection itself is not bounded
                yield ws
                return
        raise ConnectionTimeout(f"no WebSocket handshake from {url} within {connect_timeout:g}s")
    except HandshakeError:
        # A TLS controller swallows a plain request (no HTTP answer): the attempt fails or times out.
        if not connected and urlsplit(url).scheme == "ws" and await speaks_tls(url, deadline):
            raise TLSFailure(plain_to_tls_text(url)) from None
        raise
