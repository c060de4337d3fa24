"""Token mode: the shared bearer token, or loopback alone when none is configured (a single-user
cluster: whoever gets in may do everything, and jobs run as the agent's user)."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

NO_TOKEN = "no token is configured, so only loopback connections are accepted"


def bearer_of(headers: Any) -> str | None:
    """The ``Authorization`` header's value (its ``Bearer `` prefix dropped), or None without one."""
    for key, value in headers:
        if key.lower() == b"authorization":
            return value.decode("latin-1").removeprefix("Bearer ").strip()
    return None


def authorized(token: str | None, request: Any) -> str | None:
    """None if the request (a trio-websocket ``WebSocketRequest``) may connect to a controller with
    ``token`` (None: loopback only), else the reason it may not."""
    if token is None:
        host = getattr(request.remote, "address", None)
        try:
            if host is not None and ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            pass
        return NO_TOKEN
    offered = bearer_of(request.headers)
    if offered is None:
        return "missing token"
    if hmac.compare_digest(offered.encode(), token.encode()):
        return None
    return "bad token"
