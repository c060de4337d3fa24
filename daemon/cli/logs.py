"""`reckon logs JOB [--stderr] [--follow] [--attempt N]`: a job's output, through the controller.

Blocking, no trio (like the other client commands).  One request per chunk
(``logs`` op: daemon/controller/logs.py), each of bounded size and written out
at once, so output of any size streams in constant memory.  Without
``--follow`` it prints what there is now and stops; with it, it keeps reading
until the attempt has ended and its file is drained.

A condition that may pass by itself (the job has not started, its agent is
disconnected) ends a plain ``logs`` with that reason (exit 1); ``--follow``
says it once on stderr and waits for it to pass.  Everything else (unknown
job or attempt, output deleted by retention, an agent too old to serve
output) ends either with its one-line reason (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import BinaryIO

from reckon.daemon.client_common import ClientError
from reckon.daemon.auth.client import ClientAuth
from reckon.daemon.blocking.client import SyncClient

FOLLOW_POLL = 0.5  # seconds between reads while a followed attempt writes nothing new


def run_logs(args: argparse.Namespace, url: str, auth: ClientAuth | str | None, tls: object = None,
             out: BinaryIO | None = None) -> int:
    """``out``: where the output goes (default stdout; srun sends a job's stderr to its own)."""
    stream = "stderr" if args.stderr else "stdout"
    out = sys.stdout.buffer if out is None else out
    offset = 0
    attempt = args.attempt  # pinned at the first chunk: a requeue while following does not mix attempts
    said: str | None = None  # the waiting condition last told, so each is told once
    with SyncClient(url, auth, timeout=args.timeout, ssl_context=tls) as client:
        while True:
            reply = client.call("logs", job=args.job, attempt=attempt, stream=stream, offset=offset)
            waiting = reply.get("waiting")
            if waiting is not None:
                if not args.follow:
                    raise ClientError(waiting)
                if waiting != said:
                    print(f"reckon: {waiting}; waiting (--follow)", file=sys.stderr, flush=True)
                    said = waiting
                time.sleep(FOLLOW_POLL)
                continue
            said = None
            attempt = reply["attempt"]
            data = reply["data"]
            if data:
                out.write(data)
                out.flush()
                offset += len(data)
                continue
            if reply["over"] or not args.follow:
                return 0
            time.sleep(FOLLOW_POLL)
