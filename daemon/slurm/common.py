"""What every Slurm-style command shares: its connection to the controller and its error exit.

Minimal (the query commands' copy): the helper of the submit commands writes the full module
with these names (``connect``, ``run``, ``SlurmCommandError``); merging keeps theirs.  The
connection settings are the CLI's (daemon/client_common.py): ``$RECKON_CONTROLLER``, the token
from ``$RECKON_TOKEN``/``$RECKON_TOKEN_FILE``, ``$RECKON_AUTH`` for munge, ``$RECKON_CA``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.client_common import (ClientError, UsageError, client_ssl_context, resolve_auth, resolve_ca,
                                         resolve_controller)

TIMEOUT = float(os.environ.get("RECKON_SLURM_TIMEOUT") or 30.0)  # seconds: connect, then each request


class SlurmCommandError(Exception):
    """A one-line failure of a Slurm-style command; ``status`` is its exit status (2: usage)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def connect() -> SyncClient:
    """A connected client of the controller the environment names (the caller closes it)."""
    url = resolve_controller(None)
    auth = resolve_auth(None, None, None)
    tls = client_ssl_context(resolve_ca(None)) if any(u.strip().startswith("wss:") for u in url.split(",")) else None
    client = SyncClient(url, auth, timeout=TIMEOUT, ssl_context=tls)
    client.connect()
    return client


def run(main: Callable[[list[str]], Any], argv: list[str] | None = None) -> int:
    """Run ``main(argv)``; a known failure is one line on stderr (``prog: error: ...``) and its status."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c") else "slurm"
    if prog.endswith(".py") or prog == "__main__.py":
        prog = prog.removesuffix(".py")
    try:
        status = main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        return int(status or 0)
    except SlurmCommandError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return exc.status
    except UsageError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    except ClientError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 1
    except BrokenPipeError:  # `squeue | head`: the reader left; no flush at exit onto the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
