"""A cluster of real daemons in one trio run: one controller, agents, the world and the network.

``SimController`` runs the real ``ControllerDaemon`` (core loop and ticker)
recovered from its state directory the way ``serve_controller`` does it;
``SimAgent`` runs the real ``run_agent`` (store, adopt, core loop, ticker,
exits, connection loop).  Each runs in a cancel scope of its own: cancelling it
is a crash (nothing is flushed but what ``run_agent``'s own ``finally`` writes),
and starting it again recovers from whatever its state directory holds.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import random
import shutil
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.daemon.controller.core import ControllerDaemon
from reckon.daemon.controller.server import ControllerOptions
from reckon.daemon.store.facts import FactStore
from reckon.daemon.store.machine import CopiedStateDir
from reckon.model import events as E
from reckon.model import facts as F
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.errors import LocalProtocolError
from reckon.model.state import apply

from reckon.daemon.agent.resources import Declared

from tests.sim.net import Network, serve_connection
from tests.sim.patches import SeededSecrets, SimWall
from tests.sim.world import AGENT_RESOURCES, World, job_spec

log = logging.getLogger("reckon.sim")

TOKEN = "sim-token"
HEARTBEAT_TIMEOUT = 10.0
ROUND_TIMEOUT = 30.0
LAUNCH_GUARD = 5.0  # fake seconds a cancel waits for a launch to end when cancels spare launches
CALL_GUARD = 60.0  # fake seconds a client waits for the controller's answer
AGENT_MODEL = {"heartbeat_interval": 2.0, "retry_initial": 1.0, "retry_max": 4.0}


class SimController:
    def __init__(self, state_dir: Path, net: Network, wall: SimWall, secrets: SeededSecrets,
                 lost_after: float | None, heartbeat_timeout: float) -> None:
        self.state_dir = state_dir
        self.net = net
        self.wall = wall
        self.secrets = secrets
        self.options = ControllerOptions(state_dir=state_dir, token=TOKEN,
                                         model=ControllerConfig(round_timeout=ROUND_TIMEOUT, lost_after=lost_after),
                                         heartbeat_timeout=heartbeat_timeout)
        self.daemon: ControllerDaemon | None = None
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._crashing = False
        self.deaths: list[str] = []  # how it died when nobody crashed it (INV-SIM-NO-DAEMON-DEATH)

    @property
    def up(self) -> bool:
        return self.daemon is not None

    async def start(self, nursery: trio.Nursery) -> None:
        self._stopped = trio.Event()
        await nursery.start(self._run)

    async def _run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._scope = trio.CancelScope()
        self._crashing = False
        try:
            with self._scope:
                store = await FactStore.open(self.state_dir)
                try:
                    snapshot, facts, _ = await store.load()
                    model = Controller.from_log(facts, self.options.model, snapshot)
                    if model.state.cluster is None:  # a new history, as serve_controller names it
                        created = F.ClusterCreated(cluster=self.secrets.token_hex(8))
                        apply(model.state, created)
                        await store.append([created])
                    daemon = ControllerDaemon(self.options, store, model)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(daemon.core_loop)
                        nursery.start_soon(daemon.ticker)
                        self._nursery, self.daemon = nursery, daemon
                        self.net.controller = self
                        task_status.started()
                finally:
                    with trio.CancelScope(shield=True):
                        await store.aclose()
        except Exception as exc:
            # A simulated crash is a SIGKILL: what the daemon's tasks raise while torn
            # down (a send to a connection whose writer is already gone) would never
            # happen to a killed process.  Anything else is the daemon dying by itself.
            if not self._crashing:
                self.deaths.append(describe_death("the controller", exc))
            log.debug("controller crash: ignored what its teardown raised", exc_info=True)
        finally:
            self.daemon = self._nursery = None
            if self.net.controller is self:
                self.net.controller = None
            self._stopped.set()

    def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one new connection, as the listener would (``OSError`` once the controller is going)."""
        if self._nursery is None or self.daemon is None:
            raise OSError(errno.ECONNREFUSED, "connection refused (the controller is down)")
        self._nursery.start_soon(serve_connection, self._nursery, self.daemon, stream)

    async def crash(self) -> None:
        if self._scope is None or self.daemon is None:
            return
        self.net.controller = None  # no new connections from here on
        self._crashing = True
        self._scope.cancel()
        await self._stopped.wait()
        await self.net.reset_all()  # the host is gone: every connection breaks

    async def facts(self) -> list[F.Fact]:
        assert self.daemon is not None
        snapshot, facts, _ = await self.daemon.store.load()
        assert snapshot is None, "the simulation never writes a snapshot (snapshot_every is large)"
        return facts

    async def call(self, **work: Any) -> Any:
        """``ControllerDaemon.call`` (a client's request), or None if the controller is down or
        its core loop does not answer within ``CALL_GUARD`` fake seconds (then it counts as dead)."""
        daemon = self.daemon
        if daemon is None:
            return None
        with trio.move_on_after(CALL_GUARD):
            return await daemon.call(**work)
        if daemon is self.daemon:
            self.deaths.append(f"INV-SIM-NO-DAEMON-DEATH: the controller's core loop did not answer for {CALL_GUARD} s")
        return None

    async def submit(self, spec) -> str | None:
        """Through the daemon's own submit path (the one a client's ``submit`` takes), which
        gives the submission its uid; None if the controller is down or does not answer."""
        daemon = self.daemon
        if daemon is None:
            return None
        with trio.move_on_after(CALL_GUARD):
            [job] = await daemon._submit_batch([spec])
            return job
        if daemon is self.daemon:
            self.deaths.append(f"INV-SIM-NO-DAEMON-DEATH: the controller's core loop did not answer for {CALL_GUARD} s")
        return None

    async def cancel(self, job: str) -> None:
        try:
            await self.call(event=E.CancelJob(job=job, now=self.wall.time()))
        except LocalProtocolError:
            pass  # refused (already terminal, unknown): a defined answer, nothing changes


@dataclass(eq=False)
class SimAgent:
    host: str  # its state directory's name and its link
    name: str  # the --name it joins with
    state_dir: Path
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)
    daemon: Any = None
    deaths: list[str] = field(default_factory=list)
    pong_timeout: float = 10.0  # the agent's keepalive: a controller silent this long is given up on
    identity: str | None = None  # the identity its state directory gave it (known once started)
    machine_file: Path | None = None  # its machine's /etc/machine-id (Cluster.machine); None: the real one
    refusals: list[str] = field(default_factory=list)  # why it refused to start (CopiedStateDir), each time

    @property
    def up(self) -> bool:
        return self.daemon is not None

    def options(self, slots: int) -> AgentOptions:
        return AgentOptions(name=self.name, slots=slots, state_dir=self.state_dir,
                            controller=f"ws://{self.host}.sim", token=TOKEN, executor="null",
                            reconnect_initial=0.1, reconnect_max=1.0, kill_grace=1.0, pong_timeout=self.pong_timeout,
                            model=AGENT_MODEL,
                            # What the operator declares, as `reckon agent --mem --gpus --gres` would.
                            declared=Declared(mem=AGENT_RESOURCES.mem, gpus=AGENT_RESOURCES.gpus,
                                              gres=AGENT_RESOURCES.gres),
                            **({} if self.machine_file is None else {"machine_id_files": (self.machine_file,)}))

    async def start(self, nursery: trio.Nursery, slots: int) -> None:
        self.stopped = trio.Event()
        self.scope = trio.CancelScope()
        await nursery.start(self._run, slots)

    async def _run(self, slots: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.scope:
                await run_agent(self.options(slots), task_status=_Capture(self, task_status))
        except CopiedStateDir as exc:  # refused to start, as the CLI would exit: not a death
            self.refusals.append(str(exc))
            log.info("agent %s refused to start: %s", self.host, exc)
            task_status.started()
        except Exception as exc:
            if not self.scope.cancel_called:  # else a simulated crash: see SimController._run
                self.deaths.append(describe_death(f"agent {self.host}", exc))
            log.debug("agent %s crash: ignored what its teardown raised", self.host, exc_info=True)
        finally:
            self.daemon = None
            self.stopped.set()

    async def crash(self, net: Network) -> None:
        if self.scope is None or self.daemon is None:
            return
        self.scope.cancel()
        await self.stopped.wait()
        await net.reset(self.host)  # its host is gone: its connection breaks


class _Capture:
    """A task_status that also keeps the started daemon."""

    def __init__(self, agent: SimAgent, task_status: Any) -> None:
        self.agent, self.task_status = agent, task_status

    def started(self, value: Any = None) -> None:
        self.agent.daemon = value
        self.agent.identity = value.model.config.identity
        self.task_status.started(value)


def describe_death(who: str, exc: BaseException) -> str:
    """INV-SIM-NO-DAEMON-DEATH: a daemon ended by itself; its innermost errors, where they were raised."""
    leaves = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        else:
            frames = traceback.extract_tb(e.__traceback__)
            where = next((f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames)
                          if "/daemon/" in f.filename), "?")
            leaves.append(f"{type(e).__name__}({e}) at {where}")
    return f"INV-SIM-NO-DAEMON-DEATH: {who} died: {'; '.join(leaves)}"


class Cluster:
    """The controller, the agents (and duplicates), the world and the network of one run."""

    def __init__(self, root: Path, nursery: trio.Nursery, *, seed: int, hosts: tuple[str, ...],
                 slots: int, launch_time: float, lost_after: float | None, reset_in_handshake: bool,
                 sends_fail_after_reset: bool, latency: float, heartbeat_timeout: float,
                 pong_timeout: float = 10.0) -> None:
        self.root = root
        self.nursery = nursery
        self.slots = slots
        self.agent_wall = SimWall()
        self.controller_wall = SimWall()
        self.secrets = SeededSecrets(random.Random(seed + 2))
        self.net = Network(nursery, reset_in_handshake=reset_in_handshake,
                           sends_fail_after_reset=sends_fail_after_reset, latency=latency)
        self.world = World(nursery, self.agent_wall, launch_time=launch_time)
        self.controller = SimController(root / "controller", self.net, self.controller_wall, self.secrets,
                                        lost_after, heartbeat_timeout)
        self.agents = {h: SimAgent(host=h, name=h, state_dir=root / h, pong_timeout=pong_timeout,
                                   machine_file=self.machine(h)) for h in hosts}
        self.duplicates: dict[str, SimAgent] = {}
        self.backups: list[Path] = []
        self.submissions: dict[int, str] = {}  # submission -> the job id its submit returned

    def machine(self, host: str) -> Path:
        """Host ``host``'s machine-id file: each host is a machine of its own (made on first use)."""
        path = self.root / "machines" / host
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text(hashlib.sha256(host.encode()).hexdigest()[:32] + "\n")
        return path

    async def start(self) -> None:
        await self.controller.start(self.nursery)
        for agent in self.agents.values():
            await agent.start(self.nursery, self.slots)

    # ---- operator actions -----------------------------------------------------------------

    async def submit(self, duration: float, exit_code: int) -> None:
        if not self.controller.up:
            return  # the client is refused
        submission = len(self.submissions) + 1
        job = await self.controller.submit(job_spec(submission, duration, exit_code))
        if job is not None:
            self.submissions[submission] = job

    async def cancel(self, pick: int, *, spare_launches: bool) -> None:
        """Cancel a submission's job; with ``spare_launches``, first wait (a little fake time) until
        it is not being launched (placed, no process yet): the rule `cancel_during_launch` is off."""
        if not self.controller.up or not self.submissions:
            return
        submission = sorted(self.submissions)[pick % len(self.submissions)]
        job = self.submissions[submission]
        if spare_launches:
            with trio.move_on_after(LAUNCH_GUARD):
                while self._launching(job):
                    await trio.sleep(0.01)
        daemon = self.controller.daemon
        record = daemon.model.state.jobs.get(job) if daemon is not None else None
        if record is not None and int(record.spec.command[1]) == submission:
            await self.controller.cancel(job)

    def _launching(self, job: str) -> bool:
        daemon = self.controller.daemon
        record = daemon.model.state.jobs.get(job) if daemon is not None else None
        if record is None or record.agent is None:
            return False
        return not any(p.job == job and p.attempt == record.attempt for p in self.world.processes.values())

    async def restart_controller(self, *, backup: bool, rollback: bool, down: float, whole: bool = False) -> None:
        await self.controller.crash()
        if backup:
            copy = self.root / f"controller-backup-{len(self.backups)}"
            shutil.copytree(self.controller.state_dir, copy)
            self.backups.append(copy)
        await trio.sleep(down)
        if rollback and self.backups and whole:
            shutil.rmtree(self.controller.state_dir)
            shutil.copytree(self.backups[0], self.controller.state_dir)  # the oldest: the most forgotten
        elif rollback and self.backups:
            # As the README tells operators: copy back every controller.db* file of the oldest copy
            # (the most forgotten), and leave the rest of the directory (the id mark) where it is.
            for path in self.controller.state_dir.glob("controller.db*"):
                path.unlink()
            for path in self.backups[0].glob("controller.db*"):
                shutil.copy2(path, self.controller.state_dir / path.name)
        await self.controller.start(self.nursery)

    async def hot_backup(self) -> None:
        """An online backup of controller.db* (the controller keeps running): taken between two
        database calls, since the sim's database work blocks the run (patches.py)."""
        await self.controller.call(call=lambda: None)  # what it decided so far is committed
        copy = self.root / f"controller-backup-{len(self.backups)}"
        copy.mkdir()
        for path in self.controller.state_dir.glob("controller.db*"):
            if not path.name.endswith("-shm"):  # rebuilt from the WAL when the copy is opened
                shutil.copy2(path, copy / path.name)
        self.backups.append(copy)

    async def restart_agent(self, host: str, down: float) -> None:
        agent = self.agents[host]
        await agent.crash(self.net)
        await trio.sleep(down)
        await agent.start(self.nursery, self.slots)

    async def start_duplicate(self, host: str, *, copy_state: bool = False, same_machine: bool = False) -> None:
        """A second agent daemon with ``host``'s name and a state directory of its own (a cloned VM);
        with ``copy_state`` that directory starts as a copy of the host's (copied to another machine, or
        cloned with the VM).  The duplicate is a machine of its own, or with ``same_machine`` one with
        the host's machine id (a VM clone that kept /etc/machine-id)."""
        dup = self.duplicates.setdefault(host, SimAgent(host=f"{host}-dup", name=host,
                                                        state_dir=self.root / f"{host}-dup"))
        dup.machine_file = self.machine(host if same_machine else dup.host)
        if copy_state and not dup.state_dir.exists():
            shutil.copytree(self.agents[host].state_dir, dup.state_dir,
                            ignore=shutil.ignore_patterns("*-shm"))
        if not dup.up:
            await dup.start(self.nursery, self.slots)

    async def stop_duplicates(self) -> None:
        for dup in self.duplicates.values():
            await dup.crash(self.net)

    async def _retire_duplicates(self) -> None:
        """What the operator does once a cloned machine is shut down for good: its processes
        end with it, and if the clone holds the name with jobs placed (it took the name over
        while the original was away, then went), ``reckon forget`` frees the name (README:
        replacing a machine), so the original can join again and those jobs run again."""
        for dup in self.duplicates.values():
            for proc in self.world.alive():
                if proc.host == dup.host:
                    self.world.end(proc, exit_code=None, sig=9)
            daemon = self.controller.daemon
            info = daemon.model.state.agents.get(dup.name) if daemon is not None else None
            if daemon is None or info is None or dup.identity is None or info.identity != dup.identity:
                continue
            with trio.move_on_after(CALL_GUARD):  # the controller notices the clone's connection break
                while (session := daemon.model.sessions.get(dup.name)) is not None and session.connected:
                    await trio.sleep(0.1)
            try:
                await self.controller.call(event=E.ForgetAgent(agent=dup.name, now=self.controller_wall.time()))
            except LocalProtocolError:
                pass  # refused (connected again, unknown): a defined answer, nothing changes

    def deaths(self) -> list[str]:
        return [*self.controller.deaths,
                *(d for a in [*self.agents.values(), *self.duplicates.values()] for d in a.deaths)]

    async def heal(self) -> None:
        """Faults stop: links healed, the controller and every agent up, duplicates gone."""
        await self.stop_duplicates()
        for host in list(self.net.links):
            await self.net.heal(host)
        if not self.controller.up:
            await self.controller.start(self.nursery)
        await self._retire_duplicates()
        for agent in self.agents.values():
            if not agent.up:
                await agent.start(self.nursery, self.slots)

    async def stop(self) -> None:
        for agent in [*self.agents.values(), *self.duplicates.values()]:
            await agent.crash(self.net)
        await self.controller.crash()
