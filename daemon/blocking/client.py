"""The command line's client of the controller's `/client` endpoint: blocking, no trio.

`reckon submit` in a shell loop pays its start-up on every call, and most of
that was importing trio, trio-websocket and the controller's model (issue
#10: 0.43 s a submit).  This client is a blocking socket and a minimal
WebSocket client (``daemon/blocking/websocket.py``; why not wsproto: there): one
connection, one request at a time, every wait bounded by ``timeout``.  ``daemon/client.py`` is its trio twin
for dev mode, the demo and the benchmarks; both share the texts of ``daemon/client_common.py``, so an
error reads the same from either.  Requests and replies go through the client's CBOR (``daemon/cborlite.py``).
"""

from __future__ import annotations

import time

from reckon.daemon import cborlite
from reckon.daemon.blocking import websocket as ws
from reckon.daemon.client_common import (EACH_CONNECT_TIMEOUT, ClientError, LeaderSearch, NotLeader, Unreachable,
                                         UsageError, auth_headers, closed, no_handshake, no_reply, parse_controller_url,
                                         parse_controller_urls, plain_to_tls_text, refused, reply_of, request_bytes,
                                         speaks_tls, tls_failure_text, unreachable)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from reckon.daemon.auth.client import ClientAuth

DEFAULT_TIMEOUT = 10.0  # seconds: connecting (TCP and handshake), and then each request
CLOSE_WAIT = 1.0  # seconds, at most, for the controller to answer our close (it answers at once)


# ---- the blocking client ----------------------------------------------------------------


class SyncClient:
    """One connection, many requests: ``with SyncClient(url, auth) as c: c.call("jobs")``.

    ``auth`` is a ``ClientAuth`` (daemon/auth/client.py: munge mode gets a fresh credential for
    every connection), or a token as before (None: none).

    ``ssl_context`` is used for ``wss://`` (default: the system's trust store).
    Connecting (TCP, TLS and the WebSocket handshake) and then each request
    (send and reply) must each finish within ``timeout`` seconds.

    ``url`` may list several controllers (``ws://a:7420,ws://b:7420``, one
    leads): the first that connects is asked, and a standby's "not the leader"
    sends the request on to the leader it names (or the next URL): a standby
    never acts on a request, so asking again is safe.
    """

    def __init__(self, url: str, auth: ClientAuth | str | None, *, timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: Any = None) -> None:
        self.urls = parse_controller_urls(url)  # a UsageError for any bad one, before connecting anywhere
        self._use(self.urls[0])
        self.auth = auth
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._ws: ws.WebSocket | None = None
        self._search: LeaderSearch | None = None  # while connecting and calling

    def __enter__(self) -> "SyncClient":
        self.connect()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _use(self, url: str) -> None:
        self.url = url
        self.scheme, self.host, self.port = parse_controller_url(url)

    def connect(self) -> None:
        """Connect to the current URL, else to the others in turn (``LeaderSearch``)."""
        self._search = LeaderSearch(self.urls, self.url)
        self._connect_from(self._search)

    def _connect_from(self, search: LeaderSearch) -> None:
        # With several controllers, one that is frozen (accepts TCP, never answers) must not take
        # the whole time-out: the others are tried after EACH_CONNECT_TIMEOUT.
        timeout = self.timeout if len(self.urls) == 1 else min(self.timeout, EACH_CONNECT_TIMEOUT)
        url: str | None = search.current
        while url is not None:
            self._use(url)
            try:
                self._connect_one(timeout)
                return
            except UsageError:
                raise
            except ClientError as exc:
                url = search.failed(exc)
        raise search.error()

    def _connect_one(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        context = self.ssl_context
        if self.scheme == "wss" and context is None:
            import ssl

            context = ssl.create_default_context()
        try:
            sock = ws.connect(self.host, self.port, timeout=timeout, ssl_context=context)
        except TimeoutError:  # socket.timeout
            raise unreachable(self.url, f"no connection within {timeout:g}s") from None
        except OSError as exc:  # refused, no route, name not known; ssl.SSLError is one too
            tls = tls_failure_text(exc, self.host, self.port) if context is not None else None
            if tls is not None:
                raise Unreachable(f"cannot connect to {self.url}: {tls}") from None
            raise unreachable(self.url, getattr(exc, "reason", None) or exc.strerror or str(exc)) from None
        conn = ws.WebSocket(sock)
        host = self.host if ":" not in self.host else f"[{self.host}]"
        try:
            conn.handshake(f"{host}:{self.port}", "/client", auth_headers(self.auth), deadline)
        except ws.WebSocketTimeout:
            conn.abort()
            raise no_handshake(self.url, timeout) from None
        except ws.WebSocketRejected as exc:
            conn.abort()
            raise refused(self.url, exc.status, exc.body) from None
        except (ws.WebSocketClosed, ws.WebSocketProtocolError) as exc:
            conn.abort()
            left = deadline - time.monotonic()  # the probe stays within the connect timeout too
            if self.scheme == "ws" and left > 0 and speaks_tls(self.host, self.port, left):
                raise UsageError(plain_to_tls_text(self.url)) from None
            raise unreachable(self.url, f"the WebSocket handshake failed: {exc}") from None
        self._ws = conn

    def call(self, op: str, **fields: Any) -> dict:
        """One request and its reply (a ``ClientError`` for a refusal, a time-out, a lost connection)."""
        search = self._search or LeaderSearch(self.urls, self.url)
        self._search = None  # the next request starts a search of its own (from the leader found)
        while True:
            try:
                return self._call_one(op, fields)
            except NotLeader as exc:
                self.close()
                if search.not_the_leader(exc) is None:
                    raise search.error() from None
                self._connect_from(search)

    def _call_one(self, op: str, fields: dict[str, Any]) -> dict:
        if self._ws is None:
            raise Unreachable(f"not connected to the controller at {self.url}")
        deadline = time.monotonic() + self.timeout
        try:
            self._ws.send_binary(request_bytes(op, fields), deadline)
            data = self._ws.receive(deadline, cborlite.MAX_CLIENT_MESSAGE)
        except ws.WebSocketTimeout:
            self._abort()
            raise no_reply(self.url, self.timeout) from None
        except ws.WebSocketClosed as exc:
            self._abort()
            raise closed(self.url, exc.reason) from None
        except ws.WebSocketProtocolError as exc:
            self._abort()
            raise Unreachable(f"controller at {self.url} broke the WebSocket protocol: {exc}") from None
        return reply_of(data, self.url)

    def close(self) -> None:
        """A clean close: ours, the controller's answer (briefly awaited), hang up."""
        if self._ws is not None:
            self._ws.close(time.monotonic() + min(CLOSE_WAIT, self.timeout))
            self._ws = None

    def abort(self) -> None:
        """Hang up at once, no close handshake: for a connection a request may have been cut off on
        (an interrupt in the middle of a send or a read)."""
        self._abort()

    def _abort(self) -> None:
        if self._ws is not None:
            self._ws.abort()
            self._ws = None


def call(url: str, auth: ClientAuth | str | None, op: str, *, timeout: float = DEFAULT_TIMEOUT,
         ssl_context: Any = None, **fields: Any) -> dict:
    """One request on a connection of its own."""
    with SyncClient(url, auth, timeout=timeout, ssl_context=ssl_context) as client:
        return client.call(op, **fields)
