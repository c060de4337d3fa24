"""The controller's side of TLS: its certificate, and the handshakes that fail.

A client or agent that does not trust the controller's certificate (a wrong
``--ca``) aborts the TLS handshake, and retries: the controller logs that once
per peer address and condition (``RefusalLog``), not once per attempt.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import trio

from reckon.daemon.refusals import RefusalLog

HANDSHAKE_TIMEOUT = 10.0  # seconds a new connection may take over its TLS handshake
CLEARTEXT_WARNING = ("serving plain ws:// on {host}: the token and every job cross the network unencrypted "
                     "(serve wss:// with --tls-cert and --tls-key)")


class TLSConfigError(Exception):
    """The certificate or key cannot be used; ``str()`` is a one-line reason."""


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """TLS 1.2 or later with ``cert`` (PEM, the chain after the leaf) and its private ``key`` (PEM)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for path in (cert, key):  # ssl names neither file when one cannot be read
        try:
            open(path, "rb").close()
        except OSError as exc:
            raise TLSConfigError(f"cannot read TLS file {path}: {exc.strerror}") from None
    try:
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except ssl.SSLError as exc:  # before OSError, its base class
        raise TLSConfigError(f"TLS certificate {cert} and key {key} are not a usable pair: "
                             f"{exc.reason or exc}") from None
    except OSError as exc:
        raise TLSConfigError(f"cannot read TLS certificate {cert} or key {key}: {exc.strerror or exc}") from None
    return context


def check_tls_files(cert: Path | None, key: Path | None) -> None:
    """Both or neither, and a usable pair; ``TLSConfigError`` otherwise."""
    if (cert is None) != (key is None):
        raise TLSConfigError("--tls-cert and --tls-key go together: give both or neither")
    if cert is not None and key is not None:
        server_ssl_context(cert, key)


def with_tls(listeners: list[trio.SocketListener], cert: Path | None,
             key: Path | None) -> list[trio.abc.Listener]:
    """``listeners`` as they are, or serving TLS when ``cert`` and ``key`` are given."""
    if cert is None or key is None:
        return list(listeners)
    context = server_ssl_context(cert, key)
    return [trio.SSLListener(listener, context, https_compatible=True) for listener in listeners]


async def tls_handshake(stream: trio.abc.Stream, refusals: RefusalLog | None) -> bool:
    """Complete the TLS handshake of a new connection (if it is TLS); False if it failed (then closed).

    trio-websocket's reader would swallow the failure and hold the connection
    until its connect timeout; done here, the failure is logged with its
    reason (once per peer and reason) and the connection closed at once.
    """
    if not isinstance(stream, trio.SSLStream):
        return True
    host = _peer(stream)  # now: a peer that gave up may be gone by the time the handshake fails
    with trio.move_on_after(HANDSHAKE_TIMEOUT):
        try:
            await stream.do_handshake()
            return True
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            code = getattr(cause, "reason", None)
            reason = f"TLS handshake failed: {code or cause or exc}"
            # OpenSSL's HTTP_REQUEST: the peer sent a plain HTTP request (a ws:// URL), nothing about the CA.
            hint = ("the peer sent a plain ws:// request: it must use wss://" if code == "HTTP_REQUEST"
                    else "does the peer trust this controller's CA?")
            if refusals is not None:
                refusals.refused(("tls", host, reason), f"refused {host}: {reason} ({hint})")
    await trio.aclose_forcefully(stream)
    return False


def _peer(stream: trio.SSLStream) -> str:
    sock = getattr(stream.transport_stream, "socket", None)
    try:
        return str(sock.getpeername()[0]) if sock is not None else "?"
    except OSError:
        return "?"
