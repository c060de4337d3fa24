"""One item of work for the controller's core loop (daemon/controller/core.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from reckon.model import events as E


@dataclass(slots=True)
class WorkItem:
    """One item for the core loop: a model event or a client read/act."""

    event: Any = None
    call: Callable[[], Any] | None = None  # a read run in loop order (sees only durable state)
    reply: "trio.MemorySendChannel[Any] | None" = None
    commands: list[E.Command] = field(default_factory=list)
    result: Any = None
    error: str | None = None
    denied: bool = False  # the error is a permission refusal (PermissionDenied): the HTTP API's 403
