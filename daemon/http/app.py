"""The HTTP API's ASGI app: authentication, routing (daemon/http/routes.py), JSON errors, and the
status page's files (daemon/http/static/).

Every request under ``/api/v1/`` is authenticated as a WebSocket handshake is, by the
controller's own check (the ``Backend``): in token mode ``Authorization: Bearer TOKEN`` (or,
with no token configured, loopback alone); in munge mode a fresh MUNGE credential in
``X-Reckon-Munge`` (or ``Authorization: MUNGE ...``), one per request, as munged refuses a
replayed one.  Then the route's op runs through the backend, as the WebSocket endpoint runs it.
Every answer that is not a reply is ``{"error": "one line"}`` with a 4xx (or 503) status.
The status page's files need no credential (they hold no data); the page's API calls do.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from functools import partial
from importlib import resources
from types import SimpleNamespace
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

import trio

from reckon.daemon.encoded import EncodedObjects, json_objects, json_reply
from reckon.daemon.http import routes
from reckon.daemon.http.backend import Backend, HttpError, error_of

log = logging.getLogger("reckon.http")

BIG_REPLY = 1000  # job objects in a reply above which it is encoded on a worker thread
MAX_BODY = 16 << 20  # a submit of many specs, each script up to 4 MiB, fits the WebSocket's frames too
MUNGE_HEADER = b"x-reckon-munge"
STATIC = {"/": "index.html", "/status.css": "status.css", "/status.js": "status.js"}
_KINDS = {"html": b"text/html; charset=utf-8", "css": b"text/css; charset=utf-8",
          "js": b"text/javascript; charset=utf-8"}
_SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                     (b"cache-control", b"no-store")]

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def handshake_of(scope: dict) -> Any:
    """The request as the controller's ``Authenticator`` reads a WebSocket handshake: its headers
    (``X-Reckon-Munge: CRED`` as ``Authorization: MUNGE CRED``), the path of a client, the peer."""
    headers = []
    for key, value in scope.get("headers", []):
        if key.lower() == MUNGE_HEADER:
            headers.insert(0, (b"authorization", b"MUNGE " + value.strip()))
        else:
            headers.append((key, value))
    client = scope.get("client") or (None, None)
    return SimpleNamespace(headers=headers, path="/client", remote=SimpleNamespace(address=client[0]))


class HttpApp:
    """The ASGI 3 app; ``backend`` is the controller's client path (daemon/http/backend.py)."""

    def __init__(self, backend: Backend, version: str = "0") -> None:
        self.backend = backend
        self.encoded_jobs = json_objects(_jsonable)  # the query op's job objects as JSON
        self.document = json.dumps(routes.openapi(version)).encode()
        self.files = {path: resources.files("reckon.daemon.http").joinpath("static", name).read_bytes()
                      for path, name in STATIC.items()}

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # a WebSocket to this port: the controller's own port takes those
            return
        try:
            status, body, kind = await self._answer(scope, receive)
        except HttpError as exc:
            status, body, kind = exc.status, _error(exc.message), b"application/json"
        except Exception as exc:  # a bug: one line to the caller, the traceback to the log
            log.exception("the HTTP API failed on %s %s", scope.get("method"), scope.get("path"))
            status, body, kind = 500, _error(f"the controller could not answer: {type(exc).__name__}: {exc}"), \
                b"application/json"
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *_SECURITY_HEADERS]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body if scope["method"] != "HEAD" else b""})

    async def _answer(self, scope: dict, receive: Receive) -> tuple[int, bytes, bytes]:
        method, path = scope["method"], scope["path"]
        if path in self.files and method in ("GET", "HEAD"):
            kind = _KINDS[STATIC[path].rsplit(".", 1)[1]]  # fixed: nosniff refuses a script of another type
            return 200, self.files[path], kind
        if path == routes.API + "/openapi.json" and method in ("GET", "HEAD"):
            return 200, self.document, b"application/json"
        found = routes.match(method, path)
        if found is None:
            raise HttpError(404, f"no route {method} {path} (the API is under {routes.API}/, "
                                 f"its document at {routes.API}/openapi.json)")
        route, path_params = found
        query = _query(scope)
        _refuse_cross_site(scope)
        admission = await self.backend.admit(handshake_of(scope))  # before its body is read
        if admission.refused is not None:
            raise HttpError(401, admission.refused)
        body = await _json_body(receive, route)
        op, fields = routes.fields_of(route, path_params, query, body)
        try:
            reply = await self.backend.call(op, fields, admission.caller)
        except Exception as exc:
            error = error_of(exc, names_target=bool(path_params))
            if error is None:
                raise
            raise error from None
        if route.finish is not None:
            reply = route.finish(fields, reply)
        elif op == "query" and fields.get("fields") is None:
            # the index's objects, each encoded once while it is the same (daemon/encoded.py); a
            # ``fields`` selection's small dicts are encoded as they come
            return 200, await _encode(reply, self.encoded_jobs), b"application/json"
        return 200, await _encode(reply), b"application/json"


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _refuse_cross_site(scope: dict) -> None:
    """What a browser lets any web page send must not act here: a request that another site's
    page made (its ``Origin`` is not this host) is refused (403), and so is a request without
    credentials that names this host by a DNS name (a rebinding page posing as this origin:
    that only matters where no token is configured and loopback is trusted, 401)."""
    host = _header(scope, b"host") or ""
    origin = _header(scope, b"origin")
    if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
        raise HttpError(403, f"cross-origin request refused: Origin {origin} is not this API's host {host}")
    if _header(scope, b"authorization") is None and _header(scope, MUNGE_HEADER) is None:
        name = urlsplit(f"//{host}").hostname or ""
        try:
            ipaddress.ip_address(name)
        except ValueError:
            if name != "localhost" and name:
                raise HttpError(401, f"a request without credentials must name this host by its address, not "
                                     f"{name!r} (with no token configured only loopback is trusted)") from None


async def _encode(reply: dict[str, Any], objects: EncodedObjects | None = None) -> bytes:
    """The reply as JSON; a big one (10,000 job objects take ~0.2 s) on a worker thread, so the
    controller's core loop, in this process and on this event loop, goes on meanwhile, as the
    WebSocket endpoint does (clients.py BIG_REPLY).  Safe: the job objects are this reply's own or
    the query index's, which replaces an object on a change and never changes one."""
    encode = _dumps if objects is None else partial(json_reply, objects=objects, default=_jsonable)
    jobs = reply.get("jobs")
    if isinstance(jobs, list) and len(jobs) > BIG_REPLY:
        return await trio.to_thread.run_sync(encode, reply)
    return encode(reply)


def _dumps(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply, default=_jsonable).encode()


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def _jsonable(value: Any) -> Any:
    """What the WebSocket's CBOR carries and JSON does not: bytes (as text), sets and tuples."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _query(scope: dict) -> dict[str, str]:
    query: dict[str, str] = {}
    for key, value in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if key in query:
            raise HttpError(400, f"query parameter {key} given twice (a list is comma-separated)")
        query[key] = value
    return query


async def _json_body(receive: Receive, route: routes.Route) -> dict[str, Any]:
    """The request's JSON object (``{}`` when empty and the route allows that); 400/413 otherwise."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(400, "the client went away mid-request")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise HttpError(413, f"the body is over {MAX_BODY >> 20} MiB")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    raw = b"".join(chunks)
    if not raw.strip():
        if route.body_required:
            raise HttpError(400, f"{route.method} {routes.API}{route.path} needs a JSON object as its body")
        return {}
    if route.body is None:
        raise HttpError(400, f"{route.method} {routes.API}{route.path} takes no body")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
