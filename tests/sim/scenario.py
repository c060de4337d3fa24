"""Scenarios: a list of steps (operator actions and faults), run against a fresh cluster in one trio run.

``run(scenario)`` returns the violations found (an empty list: every checked
invariant held).  Every step is followed by the safety checks; after the last
one the faults stop (``Cluster.heal``), the cluster gets ``SETTLE`` fake
seconds, then the liveness checks run, then time passes until every process
has ended, then the log must stay still for ``STEADY`` seconds.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import trio
import trio.testing
from hypothesis.internal.entropy import deterministic_PRNG  # seeds trio's scheduler, as under @given

from tests.sim.checks import Checker
from tests.sim.cluster import HEARTBEAT_TIMEOUT, Cluster
from tests.sim.patches import installed

HOSTS = ("a1", "a2")
SLOTS = 2
LAUNCH_TIME = 0.5  # fake seconds a launch takes when the `cancel_during_launch` rule is on
SETTLE = 60.0  # fake seconds after the faults stop before the cluster must agree with the world
STEADY = 60.0  # fake seconds the fact log must not grow once everything is over
FINISH_GUARD = 3_000.0  # fake seconds for every process to end after the faults stop
RUN_GUARD = 20_000.0  # fake seconds for a whole run (a hang guard, never reached by a good run)


# ---- steps -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Submit:
    duration: float
    exit_code: int


@dataclass(frozen=True)
class Cancel:
    pick: int  # which submission (modulo how many there are)


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Delay:
    host: str
    seconds: float


@dataclass(frozen=True)
class Partition:
    host: str
    seconds: float


@dataclass(frozen=True)
class StallRoundAnswer:
    host: str
    seconds: float  # the next time a round opens for this host's agent, hold what it sends this long


@dataclass(frozen=True)
class Reset:
    host: str


@dataclass(frozen=True)
class ControllerRestart:
    down: float
    backup: bool  # copy the state directory while it is down (for a later rollback)


@dataclass(frozen=True)
class HotBackup:
    """Copy controller.db* while the controller runs (an online backup; no restart in between)."""


@dataclass(frozen=True)
class ControllerRollback:
    down: float  # restart from the oldest backup (a plain restart when there is none)
    # False: copy back controller.db* only, as the README says (the id mark stays); True: the
    # whole directory, id mark included, which the README says does not keep every promise
    # (ids may repeat; a job may run again once the agents the copy knows are back).
    whole: bool = False


@dataclass(frozen=True)
class AgentRestart:
    host: str
    down: float


@dataclass(frozen=True)
class Duplicate:
    host: str
    seconds: float  # a second agent with this host's name runs this long
    # True: its state directory starts as a copy of the host's (a VM cloned after the agent had run:
    # the same identity); False: a fresh one (another identity)
    copy_state: bool = False
    # True: the duplicate's machine has the host's machine id (a VM clone that kept /etc/machine-id);
    # False: a machine of its own (a copied directory, or a clone given a new id)
    same_machine: bool = False


@dataclass(frozen=True)
class ClockStep:
    machine: str  # "controller" or "agents"
    seconds: float


Step = Union[Submit, Cancel, Wait, Delay, Partition, StallRoundAnswer, Reset, ControllerRestart, ControllerRollback,
             AgentRestart, Duplicate, ClockStep, HotBackup]

# The fault rules, by name; a scenario uses only the enabled ones (see test_sim.py's KNOWN_OPEN).
RULES = {
    "cancel": Cancel,
    "delay": Delay,
    "partition": Partition,
    "reset": Reset,
    "controller_crash": ControllerRestart,
    "rollback": ControllerRollback,
    "agent_crash": AgentRestart,
    "duplicate_name": Duplicate,
    "clock_step": ClockStep,
    "online_backup": HotBackup,  # a later rollback may restore a copy taken while the controller ran
    "cloned_agent_state": Duplicate,  # a duplicate on another machine, started on a copy of its host's state directory
    "cloned_vm_same_machine": Duplicate,  # ... on a VM clone that kept the host's machine id
    "cancel_during_launch": None,  # not a step: launches take LAUNCH_TIME, and a cancel may land inside one
    "reset_in_handshake": None,  # not a step: resets and crashes also break connections in their handshake
    "sends_fail_after_reset": None,  # not a step: a reset may be an RST (later sends fail), not only a FIN
}


@dataclass(frozen=True)
class Scenario:
    seed: int
    steps: tuple[Step, ...]
    launch_time: float = 0.0
    cancels_in_launch: bool = True  # False: a cancel waits until its job is not being launched
    lost_after: float | None = None
    hosts: tuple[str, ...] = HOSTS
    reset_in_handshake: bool = True
    sends_fail_after_reset: bool = True
    latency: float = 0.0  # fake seconds each way on every link
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT
    pong_timeout: float = 10.0  # the agents' keepalive (AgentOptions.pong_timeout)


# ---- running one ---------------------------------------------------------------------------------


def run(scenario: Scenario, stats: dict[str, int] | None = None, refusals: list[str] | None = None) -> list[str]:
    """The violations this scenario finds (none: every checked invariant held).  Deterministic:
    trio's scheduler (made deterministic by Hypothesis' trio plugin) is seeded from ``scenario.seed``.
    ``refusals`` gets each agent's refusal to start (a copied state directory), in order."""
    with tempfile.TemporaryDirectory(prefix="reckon-sim-") as root, deterministic_PRNG(scenario.seed):
        return trio.run(_main, scenario, Path(root), {} if stats is None else stats,
                        [] if refusals is None else refusals, clock=trio.testing.MockClock(autojump_threshold=0))


async def _main(scenario: Scenario, root: Path, stats: dict[str, int], refusals: list[str]) -> list[str]:
    with trio.fail_after(RUN_GUARD):
        async with trio.open_nursery() as nursery:
            cluster = Cluster(root, nursery, seed=scenario.seed, hosts=scenario.hosts, slots=SLOTS,
                              launch_time=scenario.launch_time, lost_after=scenario.lost_after,
                              reset_in_handshake=scenario.reset_in_handshake,
                              sends_fail_after_reset=scenario.sends_fail_after_reset, latency=scenario.latency,
                              heartbeat_timeout=scenario.heartbeat_timeout,
                              pong_timeout=scenario.pong_timeout)
            with installed(network=cluster.net, runner_factory=cluster.world.runner_factory(),
                           agent_wall=cluster.agent_wall, controller_wall=cluster.controller_wall,
                           seed=scenario.seed):
                try:
                    return await _drive(cluster, scenario)
                finally:
                    stats.update(_stats(cluster))
                    refusals.extend(r for a in [*cluster.agents.values(), *cluster.duplicates.values()]
                                    for r in a.refusals)
                    with trio.CancelScope(shield=True):
                        await cluster.stop()
                    nursery.cancel_scope.cancel()
    raise AssertionError("unreachable")


async def _drive(cluster: Cluster, scenario: Scenario) -> list[str]:
    checker = Checker(cluster.world)
    await cluster.start()
    async with trio.open_nursery() as faults:  # background fault timers; cancelled when faults stop
        try:
            for index, step in enumerate(scenario.steps):
                await _do(cluster, faults, step, spare_launches=not scenario.cancels_in_launch)
                if isinstance(step, ControllerRollback):
                    checker.rolled_back()
                found = await _safety(cluster, checker)
                if found:
                    return [f"after step {index} {step}: {v}" for v in found]
        finally:
            faults.cancel_scope.cancel()
    await cluster.heal()
    await trio.sleep(SETTLE)
    found = await _safety(cluster, checker) or checker.settled(_jobs(cluster), _names(cluster))
    if found:
        return [f"{SETTLE:.0f} s after the faults stopped: {v}" for v in found]
    with trio.move_on_after(FINISH_GUARD):
        while (cluster.world.alive() or not all(j.terminal for j in _jobs(cluster).values())) and not cluster.deaths():
            await trio.sleep(5)
    await trio.sleep(SETTLE)  # let the last outcomes travel
    found = await _safety(cluster, checker) or checker.finished(_jobs(cluster))
    if found:
        return [f"once every process ended: {v}" for v in found]
    before = len(await cluster.controller.facts())
    await trio.sleep(STEADY)
    if cluster.deaths():
        return cluster.deaths()
    after = len(await cluster.controller.facts())
    if after != before:
        return [f"INV-SIM-LOG-STEADY: the fact log grew from {before} to {after} facts in {STEADY:.0f} s "
                f"with nothing left to do"]
    return []


def _stats(cluster: Cluster) -> dict[str, int]:
    """What a run did, for Hypothesis' statistics (is the search reaching anything?)."""
    procs = cluster.world.processes.values()
    return {"submissions": len(cluster.submissions), "processes": len(procs),
            "killed": sum(p.killed for p in procs), "fake seconds": int(trio.current_time()),
            "refused starts": sum(len(a.refusals) for a in cluster.duplicates.values())}


def _jobs(cluster: Cluster) -> dict:
    daemon = cluster.controller.daemon
    return {} if daemon is None else daemon.model.state.jobs


def _names(cluster: Cluster) -> dict[str, str]:
    return {a.host: a.name for a in [*cluster.agents.values(), *cluster.duplicates.values()]}


async def _safety(cluster: Cluster, checker: Checker) -> list[str]:
    if cluster.deaths():
        return cluster.deaths()
    if not cluster.controller.up:
        return checker.run_at_most_once([])  # the world alone: no requeue can justify anything now
    await cluster.controller.call(call=lambda: None)  # what it decided so far is durable
    if cluster.deaths() or not cluster.controller.up:
        return cluster.deaths()
    facts = await cluster.controller.facts()
    daemon = cluster.controller.daemon
    resources = checker.resources(daemon.model.state, facts) if daemon is not None else []
    return checker.safety(_jobs(cluster), facts) + resources


async def _do(cluster: Cluster, faults: trio.Nursery, step: Step, *, spare_launches: bool) -> None:
    net = cluster.net
    if isinstance(step, Submit):
        await cluster.submit(step.duration, step.exit_code)
    elif isinstance(step, Cancel):
        await cluster.cancel(step.pick, spare_launches=spare_launches)
    elif isinstance(step, Wait):
        await trio.sleep(step.seconds)
    elif isinstance(step, Delay):
        await net.delay(step.host, step.seconds)
    elif isinstance(step, Partition):
        net.partition(step.host)
        faults.start_soon(_later, step.seconds, net.heal, step.host)
    elif isinstance(step, StallRoundAnswer):
        faults.start_soon(_stall_round_answer, cluster, step.host, step.seconds)
    elif isinstance(step, Reset):
        await net.reset(step.host)
    elif isinstance(step, ControllerRestart):
        await cluster.restart_controller(backup=step.backup, rollback=False, down=step.down)
    elif isinstance(step, HotBackup):
        await cluster.hot_backup()
    elif isinstance(step, ControllerRollback):
        await cluster.restart_controller(backup=False, rollback=True, down=step.down, whole=step.whole)
    elif isinstance(step, AgentRestart):
        await cluster.restart_agent(step.host, step.down)
    elif isinstance(step, Duplicate):
        await cluster.start_duplicate(step.host, copy_state=step.copy_state, same_machine=step.same_machine)
        faults.start_soon(_later, step.seconds, _stop_duplicate, cluster, step.host)
    elif isinstance(step, ClockStep):
        wall = cluster.controller_wall if step.machine == "controller" else cluster.agent_wall
        wall.step += step.seconds
    else:
        raise TypeError(f"not a step: {step!r}")


async def _stall_round_answer(cluster: Cluster, host: str, seconds: float) -> None:
    """Wait (polling in fake time) until a round is open for ``host``'s agent, then hold its answer."""
    name = cluster.agents[host].name
    while True:
        daemon = cluster.controller.daemon
        session = daemon.model.sessions.get(name) if daemon is not None else None
        if session is not None and session.round is not None:
            break
        await trio.sleep(0.01)
    await cluster.net.delay(host, seconds, up_only=True)


async def _later(seconds: float, fn, *args) -> None:
    await trio.sleep(seconds)
    await fn(*args)


async def _stop_duplicate(cluster: Cluster, host: str) -> None:
    await cluster.duplicates[host].crash(cluster.net)

