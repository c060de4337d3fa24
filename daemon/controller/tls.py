"""The controller's side of TLS: its certificate, and the handshakes that fail.

A client or agent that does not trust the controller's certificate (a wrong
``--ca``) aborts the TLS handshake, and retries: the controller logs that once
per peer address and condition (``RefusalLog``), not once per attempt.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from pathlib import Path

import trio

from daemon.refusals import RefusalLog

log = logging.getLogger("reckon.controller")

CLEARTEXT_WARNING = ("serving plain ws:// on {host}: the token and every job cross the network unencrypted "
                     "(serve wss:// with --tls-cert and --tls-key)")


class TLSConfigError(Exception):
    """The certificate or key cannot be used; ``str()`` is a one-line reason."""


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """TLS 1.2 or later with ``cert`` (PEM, the chain after the leaf) and its private ``key`` (PEM)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except FileNotFoundError as exc:
        raise TLSConfigError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
    except OSError as exc:
        raise TLSConfigError(f"cannot read TLS certificate {cert} or key {key}: {exc.strerror or exc}") from None
    except ssl.SSLError as exc:
        raise TLSConfigError(f"TLS certificate {cert} and key {key} are not a usable pair: "
                             f"{exc.reason or exc}") from None
    return context


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_tls_files(cert: Path | None, key: Path | None) -> None:
    """Both or neither, and a usable pair; ``TLSConfigError`` otherwise."""
    if (cert is None) != (key is None):
        raise TLSConfigError("--tls-cert and --tls-key go together: give both or neither")
    if cert is not None and key is not None:
        server_ssl_context(cert, key)


async def open_listeners(host: str, port: int, cert: Path | None, key: Path | None) -> list[trio.abc.Listener]:
    """TCP listeners, TLS ones when ``cert`` and ``key`` are given."""
    if cert is None or key is None:
        return await trio.open_tcp_listeners(port, host=host)
    context = server_ssl_context(cert, key)
    return await trio.open_ssl_over_tcp_listeners(port, context, host=host, https_compatible=True)


def note_tls_failure(refusals: RefusalLog | None, stream: trio.abc.Stream, exc: BaseException) -> bool:
    """Log a connection that failed in its TLS handshake, once per peer and reason; False if it failed otherwise."""
    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else None
    if not isinstance(cause, ssl.SSLError) or refusals is None:
        return False
    sock = getattr(getattr(stream, "transport_stream", None), "socket", None)
    try:
        host = sock.getpeername()[0] if sock is not None else "?"
    except OSError:
        host = "?"
    reason = f"TLS handshake failed: {cause.reason or cause}"
    refusals.refused(("tls", host, reason), f"refused {host}: {reason} (does it trust this controller's CA?)")
    return True
