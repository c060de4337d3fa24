"""What the simulation replaces in the daemon modules, and why (all undone after each run).

* ``SqliteThread`` waits: the stores stay the real ``FactStore`` / ``AgentStore``
  on real SQLite files, still on their own threads, but the trio loop *blocks*
  until the thread answers.  No fake time passes and no other task runs
  meanwhile, so a run does not depend on how fast the disk is: same seed, same
  interleaving.
* ``time`` of ``daemon.agent.daemon`` and of the controller daemon's modules: wall and
  monotonic time moving with trio's clock, each machine with its own step.
* ``random`` (the agent's jitter) and ``secrets`` (the controller's tokens,
  cluster id): seeded from the scenario.
* the agent's network (``open_websocket_url``) and runner (``NullRunner``, the
  runner of ``executor="null"``): ``net.Network`` and ``world.WorldRunner``.
* ``Controller.handle`` (the model): the same, then ``validate_state()`` of the state it
  left, so an index that drifts from the records stops the run (``ModelCorrupted``).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time as _time
from typing import Any, Iterator

import pytest
import trio

from reckon.daemon.agent import daemon as agent_daemon
from reckon.model.controller import Controller
from reckon.daemon.controller import clients, connections, core, effects, server
from reckon.daemon.store import sqlite_thread


class SimWall:
    """A ``time`` module for one machine: wall time = a base + trio time + ``step``."""

    def __init__(self, base: float = 1_700_000_000.0) -> None:
        self._base = base
        self.step = 0.0  # a wall-clock step (NTP, an operator) adds here

    def time(self) -> float:
        return self._base + trio.current_time() + self.step

    def monotonic(self) -> float:
        return trio.current_time()

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


class SeededSecrets:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def token_bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)

    def token_hex(self, n: int) -> str:
        return self._rng.randbytes(n).hex()


class _Reply:
    """Stands in for the trio token a database job answers through: it records the answer."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None

    def run_sync_soon(self, _reschedule: Any, _task: Any, result: Any) -> None:
        self.result = result
        self.done.set()


async def _submit_blocking(self: sqlite_thread.SqliteThread, fn, *args):
    await trio.lowlevel.checkpoint_if_cancelled()
    job = sqlite_thread._Job(fn, args)
    job.token = reply = _Reply()
    self._jobs.put(job)
    reply.done.wait()  # the whole trio run waits: the disk takes no time and changes no order
    await trio.lowlevel.cancel_shielded_checkpoint()
    return reply.result.unwrap()


async def _aclose_blocking(self: sqlite_thread.SqliteThread) -> None:
    if self._closing:
        return
    self._closing = True
    try:
        await _submit_blocking(self, self._close_conn)
    finally:
        self._jobs.put(None)
        self._thread.join()


_handle = Controller.handle


def _handle_validated(self: Controller, event: Any) -> list[Any]:
    commands = _handle(self, event)
    self.state.validate_state()
    return commands


@contextlib.contextmanager
def installed(*, network: Any, runner_factory: Any, agent_wall: SimWall, controller_wall: SimWall,
              seed: int) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sqlite_thread.SqliteThread, "_submit", _submit_blocking)
        mp.setattr(sqlite_thread.SqliteThread, "aclose", _aclose_blocking)
        mp.setattr(Controller, "handle", _handle_validated)
        mp.setattr(agent_daemon, "open_websocket_url", network.open_websocket_url)
        mp.setattr(agent_daemon, "NullRunner", runner_factory)
        mp.setattr(agent_daemon, "time", agent_wall)
        mp.setattr(agent_daemon, "random", random.Random(seed))
        controller_secrets = SeededSecrets(random.Random(seed + 1))  # one stream, as before the split
        for module in (server, core, effects, connections, clients):  # the controller daemon
            for name, value in (("time", controller_wall), ("secrets", controller_secrets)):
                if hasattr(module, name):
                    mp.setattr(module, name, value)
        yield
