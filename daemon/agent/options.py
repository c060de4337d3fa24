"""The agent daemon's options: what `reckon agent` and its config file set (daemon/cli/daemons.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reckon.daemon.agent import resources as machine_resources
from reckon.daemon.agent.cgroups import DEFAULT_PIDS_MAX
from reckon.daemon.agent.users import DEFAULT_UMASK
from reckon.daemon.store.filemodes import OUTPUT_MODE
from reckon.daemon.store.machine import MACHINE_ID_FILES, check_moved_from


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    name: str
    slots: int | None  # CPUs jobs may use (--cpus / --slots); None: detect (daemon/agent/resources.py)
    state_dir: Path
    controller: str = "ws://127.0.0.1:7420"
    token: str | None = None
    # "token" (the token above, or none: loopback) or "munge": a fresh MUNGE credential from the
    # munged at munge_socket (None: $RECKON_MUNGE_SOCKET, else munged's default) per connection.
    auth: str = "token"
    munge_socket: str | None = None
    executor: str = "process"  # "process": real jobs; "null": finish at once; "hold": finish on SIGUSR1 (benchmarks)
    reconnect_initial: float = 0.1
    reconnect_max: float = 1.0  # so an agent is back within a second of the controller; raise for large clusters
    kill_grace: float = 10.0
    output_mode: int = OUTPUT_MODE  # of job output files (--output-mode)
    ca: Path | None = None  # wss://: trust this CA (PEM) for the controller's certificate; None: the system store
    # A WebSocket ping every ping_interval s, answered within pong_timeout s, or the
    # connection is given up (a vanished controller host sends no FIN: without
    # this the agent would wait on a dead connection for TCP's ~15 minutes).
    ping_interval: float = 5.0
    pong_timeout: float = 10.0
    refusal_retry_max: float = 60.0  # retry cap after a permanent refusal (not an outage: an operator must act)
    refusal_reminder: float = 300.0  # seconds between reminders of a refusal that goes on
    keep_output: float | None = None  # days to keep finished attempts' output (None: forever, as before)
    model: dict = field(default_factory=dict)  # extra AgentConfig fields (page_size, retry_max, ...)
    metrics: tuple[str, int] | None = None  # (host, port) of the Prometheus endpoint; None: off
    # Where this machine's id is read (the first usable file): the state directory must belong to it
    # (daemon/store/machine.py).  Tests and the simulation give hosts machines of their own this way.
    machine_id_files: tuple[Path, ...] = MACHINE_ID_FILES
    moved_from: str | None = None  # --moved-from: the directory's recorded machine, gone for good
    declared: machine_resources.Declared = machine_resources.Declared()  # --mem, --reserve-mem, --gpus, --gres
    cgroups: bool = True  # each attempt in its own cgroup where the machine allows (--no-cgroups: never)
    allow_root_jobs: bool = False  # run jobs whose owner is root (--allow-root-jobs)
    job_umask: int = DEFAULT_UMASK  # of jobs with an owner
    job_pids_max: int | None = DEFAULT_PIDS_MAX  # processes per attempt, with cgroups

    def __post_init__(self) -> None:
        if not self.ping_interval > 0 or not self.pong_timeout > 0:
            raise ValueError("ping_interval and pong_timeout must be positive")
        if self.moved_from is not None:
            check_moved_from(self.moved_from)
