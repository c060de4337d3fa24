"""What the HTTP API needs of the controller: the seam the entry fills (daemon/cli/daemons.py).

The API never imports the controller.  The entry hands it a ``Backend``: the controller's own
``Authenticator`` check of a handshake (daemon/auth/handshake.py) and the WebSocket ``/client``
endpoint's own operation path, so an HTTP request is decided exactly as the same request over
the WebSocket (same ops, same permissions, same one-line refusals).  What an operation raises
becomes a status code here, in one table.
"""

from __future__ import annotations

from typing import Any, Protocol

from reckon.model.errors import LocalProtocolError, PermissionDenied, ProtocolError


class Backend(Protocol):
    mode: str  # "token" or "munge": the controller's --auth

    async def admit(self, request: Any) -> Any:
        """The controller's ``Authenticator.admit`` of a handshake-like ``request`` (``headers``,
        ``path``, ``remote.address``): an ``Admission`` (``refused`` or ``caller``)."""

    async def call(self, op: str, fields: dict[str, Any], caller: Any) -> dict[str, Any]:
        """One client operation as the WebSocket endpoint runs it; its reply without ``ok``."""


class HttpError(Exception):
    """A request answered with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Unavailable(HttpError):
    """This controller cannot answer now (a standby, not the leader): 503, naming the leader."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


# The start of a refusal that names something the controller does not know (model/state.py,
# model/output.py, the operator's node operations): 404, not 409.
_NOT_FOUND = ("unknown job", "unknown agent", "unknown array", "no such agent", "no agent named")


def error_of(exc: BaseException, *, names_target: bool = False) -> HttpError | None:
    """The HTTP answer to what an operation raised (the errors the WebSocket endpoint answers with
    ``{"ok": false}``); None for anything else (a bug: the app answers 500).  ``names_target``: the
    route's path names a job or node, so "unknown job ..." is that target's 404 (in a submit's body
    it is a bad dependency: 409)."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, PermissionDenied):
        return HttpError(403, str(exc))
    if isinstance(exc, LocalProtocolError):
        text = str(exc)
        return HttpError(404 if names_target and text.startswith(_NOT_FOUND) else 409, text)
    if isinstance(exc, ProtocolError):
        return HttpError(409, str(exc))
    if isinstance(exc, KeyError):
        return HttpError(400, f"missing field {exc}")
    if isinstance(exc, (ValueError, TypeError)):
        return HttpError(400, str(exc))
    return None
