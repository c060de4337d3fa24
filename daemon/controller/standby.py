"""A controller on the PostgreSQL store while it stands by: its copy of the state, kept up
with the log's tail, and what answers on its port until it leads (daemon/controller/ha.py)."""

from __future__ import annotations

import logging
from typing import Any

import trio
from trio_websocket import ConnectionClosed as WSClosed
from trio_websocket import WebSocketRequest

from reckon.model import messages as M
from reckon.model.errors import ProtocolError
from reckon.model.state import ControllerState, replay, restore

from reckon.daemon import runtime, wire
from reckon.daemon.auth.handshake import Authenticator
from reckon.daemon.controller.core import REFUSAL_REMINDER, ControllerDaemon
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.refusals import RefusalLog
from reckon.daemon.store.postgres import PgFactStore

log = logging.getLogger("reckon.controller")

STANDBY_ANSWER_TIMEOUT = 5.0  # seconds a standby waits for a peer's first message


class Follower:
    """The standby's copy of the state, kept up with the log's tail."""

    def __init__(self, store: PgFactStore) -> None:
        self.store = store
        self.state = ControllerState()
        self.seen = 0

    async def catch_up(self) -> int:
        snapshot, facts, last = await self.store.follow(self.seen)
        if snapshot is not None:
            self.state = restore(snapshot)
        with runtime.gc_paused():
            replay(facts, self.state)
        self.seen = last
        return len(facts)


class Front:
    """What answers on the port: the standby until this controller leads, then the daemon."""

    def __init__(self, options: ControllerOptions) -> None:
        self.options = options
        self.daemon: ControllerDaemon | None = None
        self.leader = ""  # the current leader's URL as last read from the database ("" unknown)
        # TLS handshakes that fail while standing by, once per peer and reason (the daemon has its own).
        self.refusals = RefusalLog(log, remind_every=REFUSAL_REMINDER, clock=trio.current_time)
        self.follower: Follower | None = None  # the standby's copy of the state (tests look at it)
        self.auth = Authenticator.from_options(options)  # the leader's check: a standby refuses what it refuses

    async def handle_request(self, request: WebSocketRequest) -> None:
        if self.daemon is not None:
            await self.daemon.handle_request(request)
            return
        try:
            admission = await self.auth.admit(request)
            if admission.refused is not None:
                await request.reject(401, body=admission.refused.encode())
                return
            path = request.path
            ws = await request.accept()
            with trio.move_on_after(STANDBY_ANSWER_TIMEOUT):
                if path.startswith("/agent"):
                    await self._answer_agent(ws)
                elif path.startswith("/client"):
                    await self._answer_client(ws)
            with trio.move_on_after(1):
                await ws.aclose(code=1008, reason="not the leader")
        except WSClosed:
            pass

    async def _answer_agent(self, ws: Any) -> None:
        data = await ws.get_message()
        version = 1
        try:
            first = wire.decode_frame(data, to="controller")[0]
            if isinstance(first, M.Join):
                version = first.version
        except (ProtocolError, IndexError):
            pass  # an unreadable first message still gets the plain answer
        await ws.send_message(wire.encode(M.not_the_leader(version, self.leader)))

    async def _answer_client(self, ws: Any) -> None:
        while True:
            await ws.get_message()
            leader = self.leader or "no controller leads right now"
            await ws.send_message(wire.dumps({"ok": False, "error": f"not the leader: the leader is {leader}"
                                              if self.leader else f"not the leader: {leader}",
                                              "leader": self.leader}))
