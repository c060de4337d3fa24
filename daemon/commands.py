"""Reading the model's commands in the shell: the facts a handle appended, the jobs it submitted."""

from __future__ import annotations

from typing import Iterable

from reckon.model import events as E
from reckon.model.facts import Fact, JobSubmitted


def facts_of(commands: Iterable[E.Command]) -> list[Fact]:
    """The facts the commands append, in order (what one group commit makes durable)."""
    return [f for c in commands if isinstance(c, E.Append) for f in c.facts]


def submitted_ids(commands: Iterable[E.Command]) -> list[str]:
    """The ids of the jobs the commands submit, in order."""
    return [f.job for f in facts_of(commands) if isinstance(f, JobSubmitted)]
