"""`reckon`: the command line.  A contract: scripts and tests drive it.

Exit status 0 on success; otherwise non-zero with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from model.controller import ControllerConfig
from model.jobs import JobSpec

from daemon.cli import config as daemon_config
from daemon.cli.logfile import reopen_on_hangup, setup_logging
from daemon.client import ClientError, resolve_ca, resolve_controller, resolve_token
from daemon.client import call as call_controller
from daemon.controller.tls import TLSConfigError
from daemon.store.filemodes import OUTPUT_MODE, parse_mode
from daemon.wsconnect import CAFileError
from daemon.store.statelock import StateDirBusy, WrongStateDir


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


_positive.toml_type = "number"  # type: ignore[attr-defined]  # daemon/cli/config.py


def _file_mode(value: str) -> int:
    try:
        return parse_mode(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _daemon_files(p: argparse.ArgumentParser) -> None:
    """The options every daemon has: its config file and its log file."""
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="read options from this TOML file (its [controller] or [agent] table); flags override it")
    p.add_argument("--log-file", type=Path, metavar="FILE",
                   help="log here instead of stderr; SIGHUP reopens it (logrotate)")


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {value!r}")
    return key, val


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--controller", help="controller URL (default $RECKON_CONTROLLER or ws://127.0.0.1:7420)")
    common.add_argument("--token-file", help="file holding the shared token (default $RECKON_TOKEN_FILE; "
                                             "$RECKON_TOKEN holds the token itself)")
    common.add_argument("--ca", type=Path, metavar="FILE",
                        help="wss://: trust this CA (PEM) for the controller's certificate "
                             "(default $RECKON_CA, else the system's trust store)")
    common.add_argument("-v", "--verbose", action="store_true", help="log more")

    parser = argparse.ArgumentParser(prog="reckon", description="A batch-job controller and agent "
                                     "that never loses or invents a job outcome.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("controller", parents=[common], help="run the controller in the foreground")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 7420), metavar="HOST:PORT")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--page-size", type=int, default=1000, help="jobs per resync page (default 1000)")
    p.add_argument("--round-timeout", type=_positive, default=30.0, help="seconds a resync round may take")
    p.add_argument("--heartbeat-timeout", type=_positive, default=10.0,
                   help="disconnect an agent silent this long (default 10)")
    p.add_argument("--lost-after", type=_positive, default=None,
                   help="requeue the jobs of an agent disconnected this long (default: never)")
    p.add_argument("--snapshot-every", type=int, default=200_000, help="facts between snapshots")
    p.add_argument("--rejoin-grace", type=float, default=15.0, metavar="SECONDS",
                   help="after a start, dispatch nothing until every known agent has rejoined, or this "
                        "long (default 15; 0: dispatch at once)")
    p.add_argument("--tls-cert", type=Path, metavar="FILE", help="serve wss:// with this certificate (PEM chain)")
    p.add_argument("--tls-key", type=Path, metavar="FILE", help="the private key of --tls-cert (PEM)")
    _daemon_files(p)

    p = sub.add_parser("agent", parents=[common], help="run an agent in the foreground")
    p.add_argument("--name", required=True)
    p.add_argument("--slots", type=int, required=True)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--executor", choices=("process", "null", "hold"), default="process",
                   help="process: run real jobs; null: finish each job at once; "
                        "hold: finish all jobs on SIGUSR1 (benchmarks)")
    p.add_argument("--reconnect-max", type=_positive, default=1.0,
                   help="reconnect backoff cap in seconds (default 1; raise for large clusters)")
    p.add_argument("--page-size", type=int, default=1000, help="entries per resync report page")
    p.add_argument("--recent-window", type=float, default=300.0,
                   help="seconds a finished job is still reported to a rejoin round unasked")
    p.add_argument("--retry-max", type=_positive, default=30.0, help="completion retry backoff cap")
    p.add_argument("--heartbeat-interval", type=_positive, default=2.0)
    p.add_argument("--kill-grace", type=float, default=10.0, help="SIGTERM to SIGKILL grace on cancel")
    p.add_argument("--output-mode", type=_file_mode, default=OUTPUT_MODE, metavar="MODE",
                   help="file mode of job output files, octal (default 0600: the agent's user only)")
    _daemon_files(p)

    p = sub.add_parser("submit", parents=[common], help="submit a job; prints its id")
    p.add_argument("--name")
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--cwd")
    p.add_argument("--env", type=_env_pair, action="append", default=[], metavar="K=V")
    p.add_argument("--json", action="store_true", help="print the job object")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")

    p = sub.add_parser("jobs", parents=[common], help="list jobs")
    p.add_argument("--state", choices=("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"))
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("show", parents=[common], help="show one job")
    p.add_argument("job")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job")

    p = sub.add_parser("nodes", parents=[common], help="list agents")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "forget", parents=[common], help="declare a disconnected agent gone: requeue its jobs, free its name",
        description="Declare a disconnected agent gone for good: its unfinished jobs are requeued (to run "
                    "elsewhere), and its name is released, so a new agent (a wiped state directory, a "
                    "replacement machine) may join under it.  If that machine is in fact still alive, the "
                    "jobs it still runs may run twice: make sure it is gone first.  A connected agent "
                    "cannot be forgotten.")
    p.add_argument("node", help="the agent's name")

    p = sub.add_parser("dev", parents=[common], help="a controller and N agents on this machine, in the foreground")
    p.add_argument("--agents", type=int, default=2)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--state-dir", type=Path, default=None, help="default: a temporary directory")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 7420), metavar="HOST:PORT")

    p = sub.add_parser("demo", parents=[common], help="the failure demo: kill the controller mid-run, check every outcome")
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")

    p = sub.add_parser("config", help="check a daemon config file")
    config_sub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    p = config_sub.add_parser("check", help="validate a TOML config file; exit status 2 names the bad key")
    p.add_argument("file", type=Path)

    from daemon.bench.run import add_parser as add_bench_parser

    add_bench_parser(sub, common)

    from daemon.chaos import add_parser as add_chaos_parser

    add_chaos_parser(sub, common)
    return parser


# ---- output ---------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def format_jobs(jobs: list[dict]) -> str:
    rows = [("ID", "NAME", "STATE", "AGENT", "ATTEMPT", "EXIT", "SIGNAL", "FINISHED")]
    for j in jobs:
        rows.append((j["id"], j["name"][:24], j["state"], j["agent"] or "-", str(j["attempt"]),
                     "-" if j["exit_code"] is None else str(j["exit_code"]),
                     "-" if j["signal"] is None else str(j["signal"]), _when(j["finished_at"])))
    return _table(rows)


def format_nodes(nodes: list[dict]) -> str:
    rows = [("NAME", "STATE", "SLOTS", "USED")]
    rows += [(n["name"], n["state"], str(n["slots"]), str(n["used"])) for n in nodes]
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_job(job: dict) -> str:
    keys = ("id", "name", "state", "agent", "attempt", "exit_code", "signal", "submitted_at", "started_at",
            "finished_at", "command", "cwd", "slots", "stdout", "stderr")
    lines = []
    for key in keys:
        value = job.get(key)
        if key.endswith("_at") and value is not None:
            value = f"{value:.3f} ({_when(value)})"
        elif key == "command":
            value = " ".join(value)
        lines.append(f"{key + ':':14}{'-' if value is None else value}")
    return "\n".join(lines)


# ---- commands -------------------------------------------------------------------------


async def _client_command(args: argparse.Namespace) -> int:
    url = resolve_controller(args.controller)
    token = resolve_token(args.token_file)
    call = partial(call_controller, ca=resolve_ca(args.ca))
    if args.command == "submit":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not argv:
            raise ClientError("no command given: reckon submit [OPTIONS] -- CMD [ARG ...]")
        try:
            spec = JobSpec(name=args.name or Path(argv[0]).name, command=tuple(argv), cwd=args.cwd,
                           env=tuple(args.env), slots=args.slots)
        except ValueError as exc:
            raise ClientError(f"invalid job: {exc}") from None
        job = (await call(url, token, "submit", spec=spec.to_dict()))["job"]
        print(json.dumps(job) if args.json else job["id"])
    elif args.command == "jobs":
        jobs = (await call(url, token, "jobs", state=args.state))["jobs"]
        print(json.dumps(jobs) if args.json else format_jobs(jobs))
    elif args.command == "show":
        job = (await call(url, token, "show", job=args.job))["job"]
        print(json.dumps(job) if args.json else format_job(job))
    elif args.command == "cancel":
        job = (await call(url, token, "cancel", job=args.job))["job"]
        print(f"{job['id']} {job['state']}{' (cancel requested)' if job['state'] == 'RUNNING' else ''}")
    elif args.command == "forget":
        result = await call(url, token, "forget", agent=args.node)
        print(f"forgot {result['agent']}: {len(result['requeued'])} job(s) requeued, "
              f"{len(result['cancelled'])} cancel(s) confirmed; its name is free")
    elif args.command == "nodes":
        nodes = (await call(url, token, "nodes"))["nodes"]
        print(json.dumps(nodes) if args.json else format_nodes(nodes))
    return 0


async def _until_signalled(run: Any, log_file: Any = None) -> None:
    """Run until SIGINT/SIGTERM, then stop cleanly (cancel, cleanups run).  SIGHUP reopens the log file."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            nursery.start_soon(run)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    reopen_on_hangup(log_file)
                    continue
                logging.getLogger("reckon").info("%s: stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


async def _controller_command(args: argparse.Namespace, log_file: Any) -> int:
    from daemon.controller.server import ControllerOptions, serve_controller

    token = resolve_token(args.token_file)
    options = ControllerOptions(
        host=args.listen[0], port=args.listen[1], state_dir=args.state_dir, token=token,
        model=ControllerConfig(page_size=args.page_size, round_timeout=args.round_timeout,
                               lost_after=args.lost_after),
        heartbeat_timeout=args.heartbeat_timeout, snapshot_every=args.snapshot_every,
        rejoin_grace=max(args.rejoin_grace, 0.0), tls_cert=args.tls_cert, tls_key=args.tls_key,
    )
    scheme = "ws" if options.tls_cert is None else "wss"

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            port, _ = await nursery.start(serve_controller, options)
            print(f"reckon controller listening on {scheme}://{options.host}:{port}", flush=True)

    await _until_signalled(run, log_file)
    return 0


async def _agent_command(args: argparse.Namespace, log_file: Any) -> int:
    from daemon.agent.daemon import AgentOptions, run_agent

    options = AgentOptions(
        name=args.name, slots=args.slots, state_dir=args.state_dir,
        controller=resolve_controller(args.controller), token=resolve_token(args.token_file),
        executor=args.executor, reconnect_max=args.reconnect_max, kill_grace=args.kill_grace,
        output_mode=args.output_mode, ca=resolve_ca(args.ca),
        model={"page_size": args.page_size, "recent_window": args.recent_window, "retry_max": args.retry_max,
               "heartbeat_interval": args.heartbeat_interval},
    )

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_agent, options)
            print(f"reckon agent {args.name} running ({args.slots} slots)", flush=True)

    await _until_signalled(run, log_file)
    return 0


async def _dev_command(args: argparse.Namespace) -> int:
    from daemon.cli.dev import run_dev

    await _until_signalled(partial(run_dev, args))
    return 0


# A one-line reason and exit status 1.
_ONE_LINE_ERRORS = (ClientError, StateDirBusy, WrongStateDir, TLSConfigError, CAFileError)


def _daemon_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {name: commands[name] for name in daemon_config.DAEMONS}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line over the defaults a daemon's --config file sets (flags win)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("command", nargs="?")
    pre.add_argument("--config", type=Path)
    known, _ = pre.parse_known_args(argv)
    if known.config is not None and known.command in daemon_config.DAEMONS:
        try:
            daemon_config.apply_config(_daemon_parsers(parser)[known.command], known.config, known.command)
        except daemon_config.ConfigError as exc:
            print(f"reckon: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    return parser.parse_args(argv)


def _config_check(args: argparse.Namespace) -> int:
    try:
        found = daemon_config.check(args.file, _daemon_parsers(build_parser()))
    except daemon_config.ConfigError as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return 2
    tables = ", ".join(f"[{name}] ({len(values)} key(s))" for name, values in found.items()) or "no tables"
    print(f"{args.file}: OK: {tables}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    level = logging.DEBUG if getattr(args, "verbose", False) else logging.INFO
    if args.command not in ("controller", "agent", "dev", "demo", "bench", "chaos"):
        level = logging.WARNING
    try:
        log_file = setup_logging(level, getattr(args, "log_file", None))
    except OSError as exc:
        print(f"reckon: cannot open log file {args.log_file}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        if args.command == "config":
            return _config_check(args)
        if args.command == "controller":
            return trio.run(_controller_command, args, log_file)
        if args.command == "agent":
            return trio.run(_agent_command, args, log_file)
        if args.command == "dev":
            return trio.run(_dev_command, args)
        if args.command == "demo":
            from daemon.cli.demo import run_demo

            return run_demo(args)
        if args.command == "bench":
            from daemon.bench.run import run_bench

            return run_bench(args)
        if args.command == "chaos":
            from daemon.chaos import run_chaos

            return run_chaos(args)
        return trio.run(_client_command, args)
    except _ONE_LINE_ERRORS as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        # Raised from inside a daemon's nursery (an agent's state directory refused at start).
        known, rest = group.split(_ONE_LINE_ERRORS)
        if known is None or rest is not None:
            raise
        while isinstance(known, BaseExceptionGroup):
            known = known.exceptions[0]
        print(f"reckon: {known}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
