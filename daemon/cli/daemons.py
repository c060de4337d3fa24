"""The daemon commands of `reckon`: controller, agent, dev, demo, bench, chaos (trio, imported on demand)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path
from functools import partial
from typing import Any

import trio

from reckon.model.errors import ModelCorrupted

from reckon.daemon.auth.client import resolve_mode
from reckon.daemon.auth.handshake import AuthConfigError
from reckon.daemon.auth.munge import MungeError
from reckon.daemon.client_common import (ClientError, UsageError, client_ssl_context, parse_controller_urls,
                                         refuse_unused_ca, resolve_auth, resolve_ca, resolve_controller,
                                         resolve_token)
from reckon.daemon.cli.logfile import reopen_on_hangup, setup_logging
from reckon.daemon.ops.logformat import announce
from reckon.daemon.listen import CannotListen
from reckon.daemon.controller.tls import TLSConfigError, check_tls_files
from reckon.daemon.store.interface import SteppedDown
from reckon.daemon.store.sqlite_thread import StoreError
from reckon.daemon.agent.resources import ResourceConfigError
from reckon.daemon.store.machine import CopiedStateDir, read_machine_id
from reckon.daemon.store.statelock import StateDirBusy, StateDirUnusable, WrongStateDir

PING_TIMEOUT = 10.0  # agent --ping-timeout's default with one controller URL
HA_PING_TIMEOUT = 3.0  # ... and with several (controllers on PostgreSQL): agent_ping_timeout
# An operator's mistake at start: a one-line reason and exit status 1 (a step-down too) ...
_ONE_LINE_ERRORS = (ClientError, StateDirBusy, StateDirUnusable, WrongStateDir, CannotListen, SteppedDown, StoreError,
                    MungeError, AuthConfigError, ResourceConfigError)
# ... or 2 for a directory the operator must change (another machine's; one that cannot be created or written),
# or authentication options that cannot work together (an unknown operators' group).
_USAGE_ERRORS = (CopiedStateDir, StateDirUnusable, AuthConfigError, ResourceConfigError)


def _sole(group: BaseExceptionGroup, kinds: type | tuple[type, ...]) -> BaseException | None:
    """The exception of ``kinds`` a daemon's nursery raised in its group (nested groups unwrapped),
    or None when the group holds anything else too: that one is re-raised as it is."""
    known, rest = group.split(kinds)
    if known is None or rest is not None:
        return None
    while isinstance(known, BaseExceptionGroup):
        known = known.exceptions[0]
    return known


def run_daemon_command(args: argparse.Namespace) -> int:
    level = logging.DEBUG if args.verbose else logging.INFO
    try:
        log_file = setup_logging(level, getattr(args, "log_file", None), getattr(args, "log_format", "text"))
    except OSError as exc:
        raise UsageError(f"cannot open log file {args.log_file}: {exc.strerror}") from None
    try:
        if args.command == "controller":
            try:
                check_tls_files(args.tls_cert, args.tls_key)  # before anything starts: a usage error
            except TLSConfigError as exc:
                raise UsageError(str(exc)) from None
            return trio.run(_controller_command, args, log_file)
        if args.command == "agent":
            refuse_unused_ca(resolve_controller(args.controller), args.ca)
            if any(url.strip().startswith("wss:") for url in resolve_controller(args.controller).split(",")):
                client_ssl_context(resolve_ca(args.ca))  # UsageError for an unusable --ca, before anything starts
            return trio.run(_agent_command, args, log_file)
        if args.command == "dev":
            return trio.run(_dev_command, args)
        if args.command == "demo":
            from reckon.daemon.cli.demo import run_demo

            return run_demo(args)
        if args.command == "bench":
            from reckon.daemon.bench.run import run_bench

            return run_bench(args)
        if args.command == "chaos":
            from reckon.daemon.chaos.main import run_chaos

            return run_chaos(args)
        raise AssertionError(f"not a daemon command: {args.command}")
    except _USAGE_ERRORS as exc:
        raise UsageError(str(exc)) from None
    except (StateDirBusy, WrongStateDir, CannotListen, StoreError, MungeError) as exc:
        raise ClientError(str(exc)) from None
    except SteppedDown as exc:
        raise ClientError(f"controller stepped down: {exc}") from None
    except BaseExceptionGroup as group:
        # Raised from inside a daemon's nursery (an agent's state directory refused at start).
        known = _sole(group, _ONE_LINE_ERRORS)
        if known is None:
            raise
        if isinstance(known, _USAGE_ERRORS):
            raise UsageError(str(known)) from None
        raise ClientError(f"controller stepped down: {known}" if isinstance(known, SteppedDown) else str(known)) from None


async def _until_signalled(run: Any, log_file: Any = None) -> None:
    """Run until SIGINT/SIGTERM, then stop cleanly (cancel, cleanups run).

    SIGHUP reopens the log file when there is one (logrotate); without one it
    is a hang-up (the terminal went away) and stops the daemon cleanly too.
    """
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            nursery.start_soon(run)
            async for signum in signals:
                if signum == signal.SIGHUP and log_file is not None:
                    reopen_on_hangup(log_file)
                    continue
                logging.getLogger("reckon").info("%s: stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def _config_partitions(args: argparse.Namespace) -> Any:
    """The partitions of the controller's --config file (None: it has none, or there is no file)."""
    if getattr(args, "config", None) is None:
        return None
    from reckon.daemon.cli.config import ConfigError, partitions_of

    try:
        return partitions_of(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _config_priority(args: argparse.Namespace) -> Any:
    """The [priority] table of the controller's --config file (the defaults without one)."""
    from reckon.model.priority import PriorityConfig

    if getattr(args, "config", None) is None:
        return PriorityConfig()
    from reckon.daemon.cli.config import ConfigError, priority_of

    try:
        return priority_of(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


async def _controller_command(args: argparse.Namespace, log_file: Any) -> int:
    from reckon.daemon.controller.options import VALIDATE_STATE_ENV
    from reckon.daemon.controller.server import ControllerOptions, serve_controller
    from reckon.model.controller import ControllerConfig
    from reckon.model.messages import OWNERS_SINCE

    from reckon.daemon.store.interface import check_store_url

    mode = resolve_mode(args.auth)
    token = resolve_token(args.token_file) if mode == "token" else None
    if mode == "munge" and (args.token_file or os.environ.get("RECKON_TOKEN_FILE") or os.environ.get("RECKON_TOKEN")):
        raise UsageError("--auth munge needs no token: drop --token-file, $RECKON_TOKEN_FILE and $RECKON_TOKEN "
                         "(clients and agents send a MUNGE credential instead)")
    for option, limit in (("--max-running-per-user", args.max_running_per_user),
                          ("--max-cpus-per-user", args.max_cpus_per_user)):
        if mode == "token" and limit is not None:  # token mode's jobs have no owner: it would limit nothing
            raise UsageError(f"{option} goes with --auth munge (in token mode jobs have no owner, so a per-user "
                             "limit would limit nothing)")
    if args.store is None and args.state_dir is None:
        raise UsageError("reckon controller needs --state-dir (SQLite) or --store postgresql://...")
    try:
        check_store_url(args.store)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.store is None and args.advertise is not None:
        raise UsageError("--advertise goes with --store (a controller on SQLite has no standbys)")
    if args.store is None and args.lease != 5.0:
        raise UsageError("--lease goes with --store (a controller on SQLite has no lease)")
    options = ControllerOptions(
        host=args.listen[0], port=args.listen[1], state_dir=args.state_dir or Path("reckon-state/controller"),
        token=token, auth=mode, munge_socket=args.munge_socket, operators_group=args.operators_group,
        agent_user=args.agent_user, store=args.store, advertise=args.advertise, lease=args.lease,
        model=ControllerConfig(page_size=args.page_size, round_timeout=args.round_timeout,
                               lost_after=args.lost_after, max_running_per_user=args.max_running_per_user,
                               max_cpus_per_user=args.max_cpus_per_user,
                               partitions=_config_partitions(args), scheduler=args.scheduler,
                               reserve_after=args.reserve_after, default_mem_per_cpu=args.default_mem_per_cpu,
                               priority=_config_priority(args),
                               # Users' jobs run as their owners: no agent that would not know whom.
                               min_agent_version=OWNERS_SINCE if mode == "munge" else 1),
        heartbeat_timeout=args.heartbeat_timeout, snapshot_every=args.snapshot_every,
        rejoin_grace=max(args.rejoin_grace, 0.0), metrics=args.metrics, tls_cert=args.tls_cert, tls_key=args.tls_key,
        validate_state=os.environ.get(VALIDATE_STATE_ENV, "") == "1",
    )
    scheme = "ws" if options.tls_cert is None else "wss"

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            port, served = await nursery.start(serve_controller, options)
            announce(f"reckon controller listening on {scheme}://{options.host}:{port}"
                     f"{' (PostgreSQL store: a standby until it leads)' if options.store else ''}",
                     args.log_format, logger="reckon.controller")
            if args.http is not None:
                url = await start_http(nursery, served, options, *args.http)
                announce(f"reckon controller HTTP API on {url}/api/v1/, status page {url}/", args.log_format,
                         logger="reckon.controller")

    try:
        await _until_signalled(run, log_file)
    except BaseExceptionGroup as group:
        corrupted = _sole(group, ModelCorrupted)
        if corrupted is None:
            raise
        raise ClientError(model_corrupted_text(corrupted)) from None
    return 0


class ControllerBackend:
    """The HTTP API's way into the controller (daemon/http/backend.py ``Backend``): the WebSocket
    ``/client`` endpoint's own path, ``_client_op``, and the controller's own ``Authenticator``; the
    controller never imports daemon/http.  ``served`` is what ``serve_controller`` started: the
    daemon, or on PostgreSQL the ``Front`` that has a daemon only while it leads."""

    def __init__(self, served: Any, mode: str) -> None:
        self.served = served
        self.mode = mode

    async def admit(self, request: Any) -> Any:
        return await self.served.auth.admit(request)

    async def call(self, op: str, fields: dict, caller: Any) -> dict:
        from reckon.daemon.controller.clients import whoami
        from reckon.daemon.controller.standby import Front
        from reckon.daemon.http.backend import Unavailable

        if op == "whoami":  # answered by the endpoint itself, as on the WebSocket
            return whoami(self.mode, caller)
        daemon = self.served
        if isinstance(daemon, Front):
            if daemon.daemon is None:
                raise Unavailable(f"not the leader: the leader is {daemon.leader}" if daemon.leader
                                  else "not the leader: no controller leads right now")
            daemon = daemon.daemon
        return await daemon._client_op({**fields, "op": op}, caller)


async def start_http(nursery: trio.Nursery, served: Any, options: Any, host: str, port: int) -> str:
    """``reckon controller --http``: the HTTP API beside the controller, in its nursery; its base URL."""
    from importlib.metadata import version

    from reckon.daemon.http.serve import serve_http

    return await nursery.start(partial(serve_http, ControllerBackend(served, options.auth), host, port,
                                       tls_cert=options.tls_cert, tls_key=options.tls_key,
                                       version=version("reckond")))


def model_corrupted_text(exc: BaseException) -> str:
    """The one line a controller stops with when its model broke mid-decision (``ModelCorrupted``)."""
    return (f"controller stopped: {exc}; nothing of it was committed, and a restart recovers from the "
            "log (please report this: it is a bug)")


def agent_ping_timeout(given: float | None, controller: str) -> float:
    """The agent's --ping-timeout: as given, else by how many controller URLs it has.  With
    standbys, a frozen leader is left about when a standby can have taken over under the default
    5 s lease (docs/ha.md, "Timing"), not 10-15 s later."""
    if given is not None:
        return given
    return HA_PING_TIMEOUT if "," in controller else PING_TIMEOUT


async def _agent_command(args: argparse.Namespace, log_file: Any) -> int:
    from reckon.daemon.agent.daemon import AgentOptions, run_agent
    from reckon.daemon.agent.resources import Declared

    controller = resolve_controller(args.controller)
    parse_controller_urls(controller)  # UsageError (exit 2) before anything starts
    auth = resolve_auth(args.auth, args.munge_socket, args.token_file)  # munge mode reads no token
    ping_timeout = agent_ping_timeout(args.ping_timeout, controller)
    machine_files = {} if args.machine_id_file is None else {"machine_id_files": (args.machine_id_file,)}
    if args.machine_id_file is not None and (found := read_machine_id((args.machine_id_file,))).value is None:
        raise UsageError(f"--machine-id-file: {found.source}")  # named on purpose: no silent fallback
    options = AgentOptions(
        name=args.name, slots=args.slots, state_dir=args.state_dir,
        controller=controller, token=auth.token, auth=auth.mode, munge_socket=auth.munge_socket,
        executor=args.executor, reconnect_max=args.reconnect_max, kill_grace=args.kill_grace,
        keep_output=args.keep_output,
        pong_timeout=ping_timeout, ping_interval=min(5.0, ping_timeout / 2),
        output_mode=args.output_mode, ca=Path(ca) if (ca := resolve_ca(args.ca)) else None,
        model={"page_size": args.page_size, "recent_window": args.recent_window, "retry_max": args.retry_max,
               "heartbeat_interval": args.heartbeat_interval},
        metrics=args.metrics, moved_from=args.moved_from, **machine_files,
        declared=Declared(mem=args.mem, reserve_mem=args.reserve_mem or 0, gpus=args.gpus, gres=args.gres),
        cgroups=args.cgroups, allow_root_jobs=args.allow_root_jobs, job_umask=args.job_umask,
        job_pids_max=args.job_pids_max,
    )

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            daemon = await nursery.start(run_agent, options)
            announce(f"reckon agent {args.name} running ({daemon.model.config.slots} slots)", args.log_format,
                     logger="reckon.agent")

    await _until_signalled(run, log_file)
    return 0


async def _dev_command(args: argparse.Namespace) -> int:
    from reckon.daemon.cli.dev import run_dev

    await _until_signalled(partial(run_dev, args))
    return 0
