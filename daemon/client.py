"""The trio client of the controller's `/client` endpoint (dev mode, the demo, the benchmarks, chaos).

The command line uses the blocking twin, ``daemon/blocking/client.py``; both take
the configuration, the error texts and the leader search from ``daemon/client_common.py``:
``url`` may list several controllers (``ws://a:7420,ws://b:7420``, one leads
on PostgreSQL), and both clients find the leader the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import ConnectionRejected, HandshakeError

from reckon.daemon import wire
from reckon.daemon.auth.client import ClientAuth, auth_of
from reckon.daemon.client_common import (DEFAULT_CONTROLLER, EACH_CONNECT_TIMEOUT, ClientError, LeaderSearch, NotLeader,
                                         UsageError, auth_headers, client_ssl_context, closed, parse_controller_urls,
                                         refused, reply_of, request_bytes, resolve_controller, resolve_token,
                                         unreachable)
from reckon.daemon.wsconnect import TLSFailure, open_websocket

__all__ = ["DEFAULT_CONTROLLER", "Client", "ClientError", "auth_headers", "call", "resolve_controller",
           "resolve_token"]

CONNECT_TIMEOUT = 5.0  # seconds to connect to one controller when only one is listed


class Client:
    """One connection, many requests: `async with Client(url, auth) as c: await c.call(...)`.

    With several URLs the first that connects is asked, and a standby's "not
    the leader" sends the request on to the leader it names, else to the next
    URL (``LeaderSearch``); when none serves, one ``ClientError`` names why
    each did not.
    """

    def __init__(self, url: str, auth: ClientAuth | str | None, *, ca: str | Path | None = None,
                 follow_leader: bool = True) -> None:
        self.urls = parse_controller_urls(url)  # a UsageError for any bad one, before connecting anywhere
        self.follow_leader = follow_leader  # False: a standby's "not the leader" is the answer (benchmarks)
        self.url = self.urls[0]
        self.auth = auth  # a ClientAuth (munge: a credential per connection), or a token (None: none)
        self.ca = ca  # wss://: the CA file to trust (None: the system's store)
        self._cm: Any = None
        self._ws: Any = None
        self._search: LeaderSearch | None = None  # from connecting to the first call

    async def __aenter__(self) -> "Client":
        self._search = LeaderSearch(self.urls, self.url)
        await self._connect_from(self._search)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._close(*exc_info)

    async def _connect_from(self, search: LeaderSearch) -> None:
        # One frozen controller (accepts TCP, never answers) must not take the whole time-out.
        timeout = CONNECT_TIMEOUT if len(self.urls) == 1 else min(CONNECT_TIMEOUT, EACH_CONNECT_TIMEOUT)
        url: str | None = search.current
        while url is not None:
            self.url = url
            try:
                await self._connect_one(timeout)
                return
            except UsageError:
                raise
            except ClientError as exc:
                url = search.failed(exc)
        raise search.error()

    async def _connect_one(self, timeout: float) -> None:
        tls = {"ssl_context": client_ssl_context(self.ca)} if self.url.startswith("wss:") else {}
        auth = auth_of(self.auth)
        # A credential waits on munged: off the trio thread.
        headers = await trio.to_thread.run_sync(auth_headers, auth) if auth.mode == "munge" else auth_headers(auth)
        cm = open_websocket(self.url + "/client", extra_headers=headers,
                            max_message_size=wire.MAX_CLIENT_MESSAGE, connect_timeout=timeout, disconnect_timeout=2,
                            **tls)
        try:
            self._ws = await cm.__aenter__()
        except ConnectionRejected as exc:
            raise refused(self.url, exc.status_code, exc.body or b"") from None
        except TLSFailure as exc:
            raise ClientError(f"cannot connect to {self.url}: {exc}") from None
        except (OSError, HandshakeError, trio.TooSlowError) as exc:
            # HandshakeError carries its reason in __cause__ (e.g. "all attempts to connect ... failed").
            raise unreachable(self.url, str(exc) or str(exc.__cause__ or "") or type(exc).__name__) from None
        self._cm = cm

    async def _close(self, *exc_info: Any) -> None:
        cm, self._cm, self._ws = self._cm, None, None
        if cm is None:
            return
        try:
            await cm.__aexit__(*(exc_info or (None, None, None)))
        except (WSClosed, OSError, HandshakeError):
            # HandshakeError: trio-websocket's DisconnectionTimeout, a peer frozen while we close
            # (a SIGSTOPped controller in the chaos run): the answer, if any, is already ours.
            pass

    async def call(self, op: str, **fields: Any) -> dict:
        search = self._search or LeaderSearch(self.urls, self.url)
        self._search = None  # the next request starts a search of its own (from the leader found)
        while True:
            try:
                return await self._call_one(op, fields)
            except NotLeader as exc:
                await self._close()
                if not self.follow_leader:
                    raise
                if search.not_the_leader(exc) is None:
                    raise search.error() from None
                await self._connect_from(search)

    async def _call_one(self, op: str, fields: dict[str, Any]) -> dict:
        if self._ws is None:
            raise ClientError(f"not connected to the controller at {self.url}")
        try:
            await self._ws.send_message(request_bytes(op, fields))
            data = await self._ws.get_message()
        except WSClosed as exc:
            raise closed(self.url, str(exc.reason)) from None
        return reply_of(data, self.url)


async def call(url: str, auth: ClientAuth | str | None, op: str, **fields: Any) -> dict:
    async with Client(url, auth) as client:
        return await client.call(op, **fields)
