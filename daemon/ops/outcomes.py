"""How a job's outcome reads in a log line, the same in the controller's and the agent's log."""

from __future__ import annotations

import signal as _signal


def signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def outcome_text(exit_code: int | None, signal: int | None) -> str:
    """'exit code 3' or 'killed by SIGKILL (9)'."""
    if signal is not None:
        return f"killed by {signal_name(signal)} ({signal})"
    return f"exit code {exit_code}"
