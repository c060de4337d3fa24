"""The controller's relay for ``reckon logs``: one client read -> one agent read -> one reply.

A client asks for (job, attempt, stream, offset); ``model.output.locate``
names the agent (or the reason there is none), this module sends that agent
an ``output_read`` on its live connection and hands the ``output_chunk`` back.
One chunk at a time, of bounded size: the controller never holds more of a
file than one chunk per client read, however large the output.  ``--follow``
is the client's loop over these reads; the ``over`` flag in each reply tells it
when the attempt has ended, so that an empty read then means "drained".

Replies that are not data come in two kinds: ``waiting`` (it may pass by
itself: the job has not started, its agent is away) and an error (it will
not: unknown job or attempt, output deleted, an agent too old to serve it).
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

import trio

from reckon.model import messages as M
from reckon.model.errors import LocalProtocolError
from reckon.model.permissions import Caller, require
from reckon.model.output import (
    DEFAULT_OUTPUT_CHUNK, MAX_OUTPUT_CHUNK, TRANSIENT_REFUSALS, NoOutput, OutputAt, OutputStatus, OutputStream,
    locate, output_path,
)

from reckon.daemon import wire

if TYPE_CHECKING:
    from reckon.daemon.controller.host import DaemonHost

log = logging.getLogger("reckon.controller")

AGENT_ANSWER_TIMEOUT = 5.0  # seconds an agent has to answer one read (under the CLI's default 10 s request time-out)


class OutputRelay:
    def __init__(self, daemon: "DaemonHost") -> None:
        self.daemon = daemon
        self._ids = itertools.count(1)
        # request id -> (the agent connection it went to, where its answer goes)
        self._pending: dict[int, tuple[int, trio.MemorySendChannel[M.OutputChunk | None]]] = {}

    # ---- called by the server ------------------------------------------------------

    def deliver(self, conn_id: int, chunk: M.OutputChunk) -> None:
        """An agent's answer; one for a read we no longer wait for (timed out) is dropped."""
        waiting = self._pending.get(chunk.request)
        if waiting is not None and waiting[0] == conn_id:
            try:
                waiting[1].send_nowait(chunk)
            except trio.WouldBlock:
                pass  # a second answer to one read: the first one counts

    def connection_ended(self, conn_id: int) -> None:
        """Its reads will never be answered: wake their clients now."""
        for conn, send in self._pending.values():
            if conn == conn_id:
                try:
                    send.send_nowait(None)
                except trio.WouldBlock:
                    pass

    # ---- the client operation ------------------------------------------------------

    async def read(self, request: dict, caller: Caller | None = None) -> dict[str, Any]:
        job_id = str(request["job"])
        attempt = request.get("attempt")
        if attempt is not None and (type(attempt) is not int or attempt < 1):
            raise ValueError("attempt must be a positive integer")
        stream = request.get("stream", "stdout")
        if stream not in ("stdout", "stderr"):
            raise ValueError("stream must be stdout or stderr")
        offset = request.get("offset", 0)
        if type(offset) is not int or offset < 0:
            raise ValueError("offset must be a non-negative integer")
        limit = request.get("limit", DEFAULT_OUTPUT_CHUNK)
        if type(limit) is not int or not 1 <= limit <= MAX_OUTPUT_CHUNK:
            raise ValueError(f"limit must be 1..{MAX_OUTPUT_CHUNK}")

        # Where it is, as of the durable state (a read in the core loop's order).
        where, conn_id = await self.daemon.call(call=lambda: self._locate(job_id, attempt, caller))
        if isinstance(where, NoOutput):
            if where.refusal in TRANSIENT_REFUSALS:
                return {"waiting": where.message, "reason": where.refusal.value}
            raise LocalProtocolError(where.message)
        chunk = await self._ask(where, conn_id, OutputStream(stream), offset, limit)
        if chunk is None:
            return {"waiting": f"agent {where.agent}, which holds the output of job {job_id} attempt "
                               f"{where.attempt}, did not answer (disconnected?)", "reason": "agent_away"}
        if chunk.status is not OutputStatus.DATA:
            raise LocalProtocolError(f"job {job_id} attempt {where.attempt} on agent {where.agent}: {chunk.reason}")
        return {"job": job_id, "attempt": where.attempt, "agent": where.agent, "stream": stream,
                "offset": offset, "data": chunk.data, "size": chunk.size, "path": chunk.path, "over": where.over}

    def _locate(self, job_id: str, attempt: int | None,
                caller: Caller | None = None) -> tuple[OutputAt | NoOutput, int | None]:
        model = self.daemon.model
        job = model.state.jobs.get(job_id)
        if job is not None:  # only the owner (or an operator) reads a job's output: model/permissions.py
            require(caller, "read", job.owner, job=job_id)

        def version(agent: str) -> int | None:
            session = model.sessions.get(agent)
            if session is None or not session.connected or session.conn is None:
                return None
            conn = self.daemon.connection(session.conn)
            return None if conn is None or conn.closing else conn.version

        where = locate(job_id, model.state.jobs.get(job_id), attempt, agent_version=version,
                       output_since=M.OUTPUT_SINCE)
        if isinstance(where, NoOutput):
            return where, None
        return where, model.sessions[where.agent].conn

    async def _ask(self, where: OutputAt, conn_id: int | None, stream: OutputStream, offset: int,
                   limit: int) -> M.OutputChunk | None:
        conn = self.daemon.connection(conn_id)
        if conn is None or conn.closing:
            return None
        request = next(self._ids)
        send, recv = trio.open_memory_channel[M.OutputChunk | None](1)
        self._pending[request] = (conn.id, send)
        try:
            msg = M.OutputRead(request=request, job=where.job, attempt=where.attempt, stream=stream,
                               offset=offset, limit=limit)
            try:
                conn.outgoing.send_nowait(wire.encode(msg))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            with trio.move_on_after(AGENT_ANSWER_TIMEOUT):
                return await recv.receive()
            return None
        finally:
            del self._pending[request]


def output_paths_of(daemon: "DaemonHost", job: Any) -> tuple[str | None, str | None]:
    """Where a job's current attempt's stdout and stderr are (or will be), for `reckon show`."""
    agent = job.agent or job.ran_on or ""
    logs = daemon.log_dirs.get(agent)
    defaults: tuple[str | None, str | None] = (
        M.output_paths(*logs, job.id, job.attempt) if logs is not None else (None, None))
    session = daemon.model.sessions.get(agent)  # the model keeps each agent's latest joined version
    if session is not None and session.version < M.OUTPUT_SINCE:
        return defaults  # an older agent ignores --output / --error
    # A relative pattern with no cwd is relative to the agent's working directory: shown as given.
    # %N (the agent's host name) is the agent's name here: the controller does not know its host's.
    spec = job.spec
    names = dict(array=spec.array_id, index=spec.array_index, name=spec.name, host=agent,
                 user=job.owner.user if job.owner is not None else "")
    custom = [output_path(p, job=job.id, attempt=job.attempt, cwd=spec.cwd, base_dir=None, **names)
              if p is not None else None for p in (spec.output, spec.error)]
    return custom[0] or defaults[0], custom[1] or defaults[1]
