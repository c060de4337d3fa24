"""A small synchronous world for the model tests.

One ``Controller``, one ``Scheduler`` and any number of ``Agent`` models,
wired together by explicit, inspectable message queues.  Nothing is delivered
unless a test says so (``deliver_*`` / ``pump``), so a test can drop, duplicate
or reorder any message.  Every message crosses ``to_wire``/``from_wire`` on the
way, every fact the controller appends is kept in ``log`` (and crosses
``encode``/``decode`` when the controller is rebuilt from it), and the agents'
durable commands are mirrored into ``durable_records``/``durable_outbox`` so an
agent can be restarted from exactly what it made durable.

Time is ``self.now``, set by the test; tokens are deterministic and fresh.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Iterable

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model import messages as M
from reckon.model.agent import Agent, AgentConfig, LocalJob, SessionState
from reckon.model.controller import Controller, ControllerConfig
from reckon.model.jobs import JobRecord, JobSpec
from reckon.model.scheduler import Scheduler
from reckon.model.state import replay


def spec(name: str = "job", *, slots: int = 1, command: tuple[str, ...] = ("true",)) -> JobSpec:
    return JobSpec(name=name, command=command, slots=slots)


def token(i: int) -> bytes:
    """A deterministic 16-byte round token."""
    return i.to_bytes(M.TOKEN_BYTES, "big")


def facts_of(commands: Iterable[E.Command]) -> list[F.Fact]:
    return [f for c in commands if isinstance(c, E.Append) for f in c.facts]


def sends_of(commands: Iterable[E.Command], kind: type | None = None) -> list[M.Message]:
    return [c.message for c in commands if isinstance(c, E.Send) and (kind is None or isinstance(c.message, kind))]


def notes_of(commands: Iterable[E.Command]) -> list[object]:
    return [c.note for c in commands if isinstance(c, E.Notify)]


@dataclass
class AgentWorld:
    """What the harness keeps for one agent besides the model itself."""

    config: AgentConfig
    model: Agent
    conn: int | None = None
    inbox: list[M.Message] = field(default_factory=list)  # controller -> agent, in flight
    outbox_wire: list[M.Message] = field(default_factory=list)  # agent -> controller, in flight
    sent: list[M.Message] = field(default_factory=list)  # everything the agent ever sent
    received: list[M.Message] = field(default_factory=list)  # everything the controller sent it
    commands: list[E.Command] = field(default_factory=list)  # every agent command, in order
    durable_records: dict[tuple[str, int], LocalJob] = field(default_factory=dict)
    durable_outbox: dict[tuple[str, int], M.Finished] = field(default_factory=dict)
    processes: set[tuple[str, int]] = field(default_factory=set)  # started and not yet exited
    kills: list[tuple[str, int]] = field(default_factory=list)


class Harness:
    def __init__(self, agents: Iterable[str] = ("a1",), *, slots: int = 16,
                 controller_config: ControllerConfig | None = None, **agent_config: object) -> None:
        self.now = 0.0
        self.config = controller_config or ControllerConfig()
        self.controller = Controller(self.config)
        self.scheduler = Scheduler(self.config.user_limits)
        self.log: list[F.Fact] = []
        self.controller_commands: list[E.Command] = []
        self.timers: dict[str, tuple[bytes, float]] = {}  # agent -> open round timer (token, deadline)
        self.rounds_ended: list[tuple[str, bytes]] = []
        self.closed: list[tuple[int, str]] = []
        self.agents: dict[str, AgentWorld] = {}
        self._conn_agent: dict[int, str] = {}
        self._joined: set[int] = set()
        self._next_conn = 1
        self._next_token = 1
        self._next_uid = 0
        for name in agents:
            self.add_agent(name, slots=slots, **agent_config)

    # ---- set-up ---------------------------------------------------------------

    def add_agent(self, name: str, *, slots: int = 4, records: list[LocalJob] | None = None,
                  **config: object) -> AgentWorld:
        cfg = AgentConfig(name=name, slots=slots, **config)  # type: ignore[arg-type]
        world = AgentWorld(config=cfg, model=Agent(cfg, records=records))
        for r in records or ():
            world.durable_records[r.key] = r
        self.agents[name] = world
        return world

    def token(self) -> bytes:
        t = token(self._next_token)
        self._next_token += 1
        return t

    def uid(self) -> str:
        """A fresh submission uid (the daemon draws random ones; these are unique and deterministic)."""
        self._next_uid += 1
        return f"{self._next_uid:016x}"

    def agent(self, name: str) -> Agent:
        return self.agents[name].model

    def job(self, job_id: str) -> JobRecord:
        return self.controller.state.jobs[job_id]

    # ---- driving the controller --------------------------------------------------

    def controller_handle(self, event: E.ControllerEvent) -> list[E.Command]:
        commands = self.controller.handle(event)
        self.controller_commands.extend(commands)
        closes: list[int] = []
        for cmd in commands:
            if isinstance(cmd, E.Append):
                self.log.extend(cmd.facts)
            elif isinstance(cmd, E.Notify):
                self.scheduler.notify(cmd.note)  # type: ignore[arg-type]
            elif isinstance(cmd, E.Send):
                name = self._conn_agent.get(cmd.conn)
                if name is None:
                    continue  # a connection that never joined (refused at join)
                world = self.agents[name]
                msg = M.from_wire(M.to_wire(cmd.message), to="agent")
                sent = cmd.message
                if isinstance(sent, M.Dispatch):  # an agent is never sent the scheduling-only (v8) fields
                    sent = dataclasses.replace(sent, spec=JobSpec.from_dict(sent.spec.agent_dict()))
                assert msg == sent, "message did not survive the wire"
                world.received.append(msg)
                if world.conn == cmd.conn:
                    world.inbox.append(msg)
            elif isinstance(cmd, E.Close):
                self.closed.append((cmd.conn, cmd.reason))
                closes.append(cmd.conn)
            elif isinstance(cmd, E.StartRoundTimer):
                self.timers[cmd.agent] = (cmd.token, cmd.deadline)
            elif isinstance(cmd, E.RoundEnded):
                self.rounds_ended.append((cmd.agent, cmd.token))
                if self.timers.get(cmd.agent, (None,))[0] == cmd.token:
                    del self.timers[cmd.agent]
        for conn in closes:  # the daemon closes the socket; both ends then see it
            name = self._conn_agent.get(conn)
            if name is not None and self.agents[name].conn == conn:
                self._cut(name)
            self.controller.handle(E.ConnectionClosed(conn=conn, now=self.now))
        return commands

    def submit(self, count: int = 1, *, slots: int = 1, name: str = "job") -> list[str]:
        ids = []
        for _ in range(count):
            job_id = self.controller.state.next_job_id()
            self.controller_handle(E.SubmitJob(spec=spec(f"{name}{job_id}", slots=slots), now=self.now,
                                               uid=self.uid(), queue_anyway=True))  # scenarios choose any size
            ids.append(job_id)
        return ids

    def schedule(self) -> list[tuple[str, str]]:
        """Ask the scheduler for placements and hand every proposal to the controller."""
        proposals = self.scheduler.place()
        for job, agent in proposals:
            self.controller_handle(E.DispatchProposed(job=job, agent=agent, now=self.now))
        return proposals

    def dispatch(self, job: str, agent: str) -> list[E.Command]:
        return self.controller_handle(E.DispatchProposed(job=job, agent=agent, now=self.now))

    def cancel(self, job: str) -> list[E.Command]:
        return self.controller_handle(E.CancelJob(job=job, now=self.now))

    def tick_controller(self) -> list[E.Command]:
        return self.controller_handle(E.Tick(now=self.now))

    def expire_round(self, name: str) -> list[E.Command]:
        tok, _ = self.timers[name]
        return self.controller_handle(E.RoundDeadlineExpired(agent=name, token=tok, now=self.now))

    def crash_controller(self) -> Controller:
        """Lose every connection and all volatile state; recover from the (re-decoded) log."""
        for name, world in self.agents.items():
            if world.conn is not None:
                self._cut(name)
        self._conn_agent.clear()
        self._joined.clear()
        self.timers.clear()
        stored = [F.decode(F.encode(f)) for f in self.log]
        self.controller = Controller.from_log(stored, self.config)
        self.scheduler = Scheduler(self.config.user_limits)
        for cmd in self.controller.initial_notes():
            assert isinstance(cmd, E.Notify)
            self.scheduler.notify(cmd.note)  # type: ignore[arg-type]
        return self.controller

    # ---- driving agents -------------------------------------------------------------

    def agent_handle(self, name: str, event: E.AgentEvent) -> list[E.Command]:
        world = self.agents[name]
        commands = world.model.handle(event)
        world.commands.extend(commands)
        for cmd in commands:
            if isinstance(cmd, E.Send):
                msg = M.from_wire(M.to_wire(cmd.message), to="controller")
                assert msg == cmd.message, "message did not survive the wire"
                world.sent.append(msg)
                if world.conn is not None:
                    world.outbox_wire.append(msg)
            elif isinstance(cmd, E.StartProcess):
                world.processes.add((cmd.job, cmd.attempt))
            elif isinstance(cmd, E.KillProcess):
                world.kills.append((cmd.job, cmd.attempt))
            elif isinstance(cmd, E.StoreRecord):
                rec = cmd.record
                assert isinstance(rec, LocalJob)
                world.durable_records[rec.key] = rec
            elif isinstance(cmd, E.DeleteRecord):
                world.durable_records.pop((cmd.job, cmd.attempt), None)
            elif isinstance(cmd, E.OutboxPut):
                world.durable_outbox[(cmd.report.job, cmd.report.attempt)] = cmd.report
            elif isinstance(cmd, E.OutboxDelete):
                world.durable_outbox.pop((cmd.job, cmd.attempt), None)
        return commands

    def connect(self, name: str) -> int:
        """Open a connection: the agent sends its Join (still in flight)."""
        world = self.agents[name]
        conn = self._next_conn
        self._next_conn += 1
        world.conn = conn
        self._conn_agent[conn] = name
        self.agent_handle(name, E.Connected(now=self.now))
        return conn

    def join(self, name: str) -> None:
        """Connect and deliver everything until both sides are quiet."""
        self.connect(name)
        self.pump()

    def _cut(self, name: str) -> tuple[list[M.Message], list[M.Message]]:
        world = self.agents[name]
        dropped = (world.outbox_wire[:], world.inbox[:])
        world.outbox_wire.clear()
        world.inbox.clear()
        world.conn = None
        if world.model.session is not SessionState.DISCONNECTED:
            self.agent_handle(name, E.Disconnected(now=self.now))
        return dropped

    def disconnect(self, name: str) -> tuple[list[M.Message], list[M.Message]]:
        """Cut the agent's connection: in-flight messages both ways are lost (returned)."""
        conn = self.agents[name].conn
        dropped = self._cut(name)
        if conn is not None:
            self.controller_handle(E.ConnectionClosed(conn=conn, now=self.now))
        return dropped

    def restart_agent(self, name: str) -> Agent:
        """The agent process restarts from what it made durable (its jobs keep running)."""
        world = self.agents[name]
        if world.conn is not None:
            self.disconnect(name)
        world.model = Agent(world.config, records=list(world.durable_records.values()),
                            outbox=list(world.durable_outbox.values()))
        return world.model

    def start(self, name: str, job: str, attempt: int = 1, *, started_at: float | None = None) -> list[E.Command]:
        return self.agent_handle(name, E.ProcessStarted(
            job=job, attempt=attempt, started_at=self.now if started_at is None else started_at))

    def exit(self, name: str, job: str, attempt: int = 1, *, exit_code: int | None = 0, signal: int | None = None,
             finished_at: float | None = None) -> list[E.Command]:
        self.agents[name].processes.discard((job, attempt))
        return self.agent_handle(name, E.ProcessExited(
            job=job, attempt=attempt, exit_code=exit_code, signal=signal,
            finished_at=self.now if finished_at is None else finished_at, now=self.now))

    def lose(self, name: str, job: str, attempt: int = 1) -> list[E.Command]:
        return self.agent_handle(name, E.ProcessLost(job=job, attempt=attempt, now=self.now))

    def tick(self, name: str, *, jitter: float = 0.0) -> list[E.Command]:
        return self.agent_handle(name, E.Tick(now=self.now, jitter=jitter))

    # ---- delivery ------------------------------------------------------------------------

    def deliver_to_controller(self, name: str, count: int | None = None) -> list[E.Command]:
        world = self.agents[name]
        out: list[E.Command] = []
        n = 0
        while world.outbox_wire and (count is None or n < count):
            msg = world.outbox_wire.pop(0)
            conn = world.conn
            assert conn is not None
            if conn not in self._joined:
                assert isinstance(msg, M.Join), "the first message on a connection is a Join"
                self._joined.add(conn)
                out += self.controller_handle(E.AgentJoined(conn=conn, join=msg, token=self.token(), now=self.now))
            else:
                out += self.controller_handle(E.MessageFromAgent(conn=conn, message=msg, now=self.now,
                                                                 token=self.token()))
            n += 1
        return out

    def send_to_controller(self, name: str, msg: M.AgentMessage) -> list[E.Command]:
        """Hand a message straight to the controller as if ``name`` sent it now."""
        conn = self.agents[name].conn
        assert conn is not None and conn in self._joined
        return self.controller_handle(E.MessageFromAgent(conn=conn, message=msg, now=self.now, token=self.token()))

    def deliver_to_agent(self, name: str, count: int | None = None) -> list[E.Command]:
        world = self.agents[name]
        out: list[E.Command] = []
        n = 0
        while world.inbox and (count is None or n < count):
            msg = world.inbox.pop(0)
            out += self.agent_handle(name, E.MessageFromController(message=msg, now=self.now))
            n += 1
        return out

    def pump(self, max_steps: int = 1_000_000) -> int:
        """Deliver both ways, one message at a time, until nothing is in flight."""
        steps = 0
        while True:
            moved = False
            for name, world in self.agents.items():
                if world.outbox_wire:
                    self.deliver_to_controller(name, 1)
                    moved = True
                if world.inbox:
                    self.deliver_to_agent(name, 1)
                    moved = True
            if not moved:
                return steps
            steps += 1
            assert steps < max_steps, "the exchange did not settle"

    # ---- views and checks -----------------------------------------------------------------

    def in_flight(self, name: str) -> tuple[list[M.Message], list[M.Message]]:
        world = self.agents[name]
        return world.outbox_wire, world.inbox

    def assert_views_agree(self) -> None:
        assert self.scheduler.view() == self.controller.scheduler_view()

    def assert_replay_agrees(self) -> None:
        """Rebuilding from the stored log gives exactly the live state."""
        stored = [F.decode(F.encode(f)) for f in self.log]
        assert stored == self.log
        assert replay(stored).digest() == self.controller.state.digest()

    def run_jobs(self, count: int, name: str = "a1", *, slots: int = 1) -> list[str]:
        """Submit ``count`` jobs, place them all on ``name`` and deliver the dispatches."""
        ids = self.submit(count, slots=slots)
        for job in ids:
            self.dispatch(job, name)
        assert all(self.job(j).agent == name for j in ids), "not every job fitted on the agent"
        self.pump()
        return ids
