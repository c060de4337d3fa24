"""`reckon`: the command line.  A contract: scripts and tests drive it.

Exit status 0 on success; 2 for a usage error (a bad option, a bad URL, an
unreadable --file); 1 for a failure (the controller unreachable, a refusal,
a busy state directory).  Either way one ``reckon: ...`` line on stderr.

This module is the entry point of every `reckon` call, and a shell loop of
`reckon submit` pays its start-up each time: it imports argparse alone.  The
client commands (daemon/cli/jobs.py, a blocking client) never import trio, the
model's controller or the servers; the daemons (daemon/cli/daemons.py) do.
"""

from __future__ import annotations

import argparse
import re  # argparse imports it anyway
import sys

from reckon.daemon.args import path
from reckon.daemon.durations import duration, duration_or_zero, since

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any, NoReturn


CLIENT_COMMANDS = ("submit", "jobs", "show", "cancel", "nodes", "forget", "history", "drain", "resume", "hold",
                   "release", "requeue", "logs", "whoami", "signal", "partition", "update", "priority")
COMMANDS = ("controller", "agent", *CLIENT_COMMANDS, "dev", "demo", "bench", "chaos", "config")
COMMANDS += ("slurm-commands",)  # reckon slurm-commands DIR: daemon/slurm/launchers.py
DAEMONS = ("controller", "agent")  # the commands a --config file configures (daemon/cli/config.py)
JOB_STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
MAX_SLOTS = 1 << 16  # model.jobs.MAX_SLOTS (not imported: this module stays light; a test compares)
MAX_PAGE_ENTRIES = 50_000  # model.messages.MAX_PAGE_ENTRIES (likewise)
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
AGENT_NAME_RULE = ("1 to 100 characters: letters, digits, '.', '_' and '-', starting with a letter or a digit "
                   "(a host name fits)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reckond")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """`reckon --version`, without importing importlib.metadata on every other call."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, help="print reckon's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from reckon.model.messages import PROTOCOL_VERSION

        print(f"reckon {_version()} (protocol version {PROTOCOL_VERSION})")
        parser.exit()


# ---- option types -----------------------------------------------------------------------


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    if not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (0 to 65535; 0: any free port)")
    return host.strip("[]") or "127.0.0.1", int(port)


def _count(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_SLOTS}, got {value!r}")
    return int(value)


def _whole(value: str, *, most: int = 10**9) -> int:
    if not value.isdigit() or not 1 <= int(value) <= most:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {most}, got {value!r}")
    return int(value)


def _page_size(value: str) -> int:
    return _whole(value, most=MAX_PAGE_ENTRIES)


def _agent_name(value: str) -> str:
    if not AGENT_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid agent name: {AGENT_NAME_RULE}")
    return value


def _moved_from(value: str) -> str:
    from reckon.daemon.store.machine import check_moved_from  # light: no trio

    try:
        return check_moved_from(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _retry_cap(value: str) -> float:
    number = duration(value)
    if number < 1.0:  # the agent's first retry waits 1 s; the cap cannot be below it
        raise argparse.ArgumentTypeError(f"must be at least 1 (second), got {value}")
    return number


# Each type's TOML type (daemon/cli/config.py).
_whole.toml_type = _page_size.toml_type = "integer"  # type: ignore[attr-defined]
_retry_cap.toml_type = "duration"  # type: ignore[attr-defined]
_count.toml_type = "integer"  # type: ignore[attr-defined]


def _keep_output(value: str) -> float | None:
    from reckon.model.output import parse_keep_output

    try:
        return parse_keep_output(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _file_mode(value: str) -> int:
    from reckon.daemon.store.filemodes import parse_mode

    try:
        return parse_mode(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(value: str) -> int:
    from reckon.model.resources import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _gpu_indices(value: str) -> tuple[int, ...]:
    items = [v.strip() for v in value.split(",") if v.strip()] if value.strip() != "none" else []
    if not all(v.isascii() and v.isdigit() for v in items):
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1 (or none), got {value!r}")
    indices = [int(v) for v in items]  # by value: "0,00" names GPU 0 twice
    for index in indices:
        if indices.count(index) > 1:
            raise argparse.ArgumentTypeError(f"GPU {index} is named twice in {value!r}")
    return tuple(sorted(indices))


def _gres_list(value: str) -> tuple[tuple[str, int], ...]:
    from reckon.model.resources import parse_gres

    try:
        items = [v.strip() for v in value.split(",") if v.strip()]
        gres = parse_gres(items)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    # A machine's count is said once (a submit's repeated --gres add up; an agent's would be a typo).
    names = [item.partition(":")[0] for item in items]
    for name in names:
        if names.count(name) > 1:
            raise argparse.ArgumentTypeError(f"{name} is named twice in {value!r} (give its count once)")
    return gres


def _umask(value: str) -> int:
    try:
        mask = int(value, 8)
    except ValueError:
        mask = -1
    if not 0 <= mask <= 0o777 or mask & 0o700:
        raise argparse.ArgumentTypeError(f"expected an octal umask that leaves the owner all rights, such as 022 "
                                         f"or 077, got {value!r}")
    return mask


def _daemon_files(p: Any) -> None:
    """The options every daemon has: its config file and its log file."""
    p.add_argument("--config", type=path, metavar="FILE",
                   help="read options from this TOML file (its [controller] or [agent] table); flags override it")
    p.add_argument("--log-file", type=path, metavar="FILE",
                   help="log here instead of stderr; SIGHUP reopens it (logrotate)")


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {value!r}")
    return key, val


# ---- the parser ---------------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, with the terminal's width found without ``shutil``.

    argparse makes a formatter for every ``add_argument`` (to check the
    metavar), and with no width given that imports shutil (and with it bz2,
    lzma, zlib, fnmatch): a tenth of a submit's start-up, for help text that
    is rarely printed.
    """

    def __init__(self, prog: str, **kwargs: object) -> None:
        kwargs.setdefault("width", _help_width())
        super().__init__(prog, **kwargs)  # type: ignore[arg-type]


def _help_width() -> int:
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (ValueError, OSError, AttributeError):
        columns = 80
    return max(columns, 20) - 2  # as argparse does


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one ``reckon: ...`` line (the CLI's failure contract) and status 2,
    and no abbreviated options."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        # No prefixes (`--slot` for `--slots`): a later option must never change what one meant.
        # Subparsers are of this class too, so this holds for every command.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        self.exit(2, f"reckon: {self.prog.removeprefix('reckon ')}: {message} (see {self.prog} --help)\n"
                  if self.prog != "reckon" else f"reckon: {message} (see reckon --help)\n")


class _Unbuilt:
    """Stands in for the parser of a command that is not being run: its options are not built.

    Building every command's options took a submit's start-up a few ms more
    than its own; the other commands only need their name and help line.
    """

    def add_argument(self, *args: object, **kwargs: object) -> None:
        return None

    def add_mutually_exclusive_group(self, *args: object, **kwargs: object) -> "_Unbuilt":
        return self

    add_argument_group = add_subparsers = add_parser = add_mutually_exclusive_group


class _Commands:
    """``add_subparsers()``'s result, building only the command ``only`` in full (None: all of them)."""

    def __init__(self, sub: argparse._SubParsersAction, only: str | None) -> None:
        self.sub = sub
        self.only = only

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser | _Unbuilt:
        if self.only is None or self.only == name:
            return self.sub.add_parser(name, **kwargs)  # type: ignore[arg-type]
        # The command run is known (``command_of``): the others are not even named, since each
        # name costs a parser of its own, and only `reckon --help` (only=None) lists them.
        return _Unbuilt()


def command_of(argv: list[str]) -> str | None:
    """The command named in ``argv`` (its first word that is not an option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
        if word in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, that command's options alone (the others by name and help)."""
    verbose = _Parser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="store_true", help="log more (protocol detail; never raw frames)")
    verbose.add_argument("--log-format", choices=("text", "json"), default="text",
                         help="text (default), or json: one JSON object per line, for log shippers")
    metrics = _Parser(add_help=False)
    metrics.add_argument("--metrics", type=_listen, default=None, metavar="HOST:PORT",
                         help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    token = _Parser(add_help=False)
    token.add_argument("--token-file", help="file holding the shared token (default $RECKON_TOKEN_FILE; "
                                            "$RECKON_TOKEN holds the token itself)")
    auth = _Parser(add_help=False)
    auth.add_argument("--auth", choices=("token", "munge"), default=None,
                      help="how callers prove who they are: token (the shared token, or loopback only: a "
                           "single-user cluster) or munge (a MUNGE credential per connection from this "
                           "machine's munged) (default $RECKON_AUTH, else token)")
    auth.add_argument("--munge-socket", metavar="PATH",
                      help="munged's socket (default $RECKON_MUNGE_SOCKET, else /run/munge/munge.socket.2)")
    controller = _Parser(add_help=False)
    controller.add_argument("--controller", help="controller URL, ws://HOST:PORT or wss://HOST:PORT, or several "
                                                 "separated by commas (standby controllers: the leader is found) "
                                                 "(default $RECKON_CONTROLLER or ws://127.0.0.1:7420)")
    ca = _Parser(add_help=False)
    ca.add_argument("--ca", type=path, metavar="FILE",
                    help="wss://: trust this CA (PEM) for the controller's certificate "
                         "(default $RECKON_CA, else the system's trust store)")
    client = _Parser(add_help=False, parents=[controller, token, auth, ca])
    client.add_argument("--timeout", type=duration, default=10.0, metavar="SECONDS",
                        help="give up on a controller that does not connect, or answer a request, "
                             "within this long (default 10)")

    parser = _Parser(prog="reckon", description="A batch-job controller and agent "
                                     "that never loses or invents a job outcome.")
    parser.add_argument("--version", action=_VersionAction)
    sub: Any = _Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), only)

    p = sub.add_parser("controller", parents=[verbose, token, auth, metrics], help="run the controller in the foreground")
    p.add_argument("--operators-group", metavar="GROUP",
                   help="--auth munge: members of this Unix group (primary or supplementary), and root, are "
                        "operators: they may act on every job and on nodes (default: root alone)")
    p.add_argument("--agent-user", metavar="USER",
                   help="--auth munge: agents may authenticate as this user as well as root (the service user)")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 7420), metavar="HOST:PORT",
                   help="address to serve agents and clients on (default 127.0.0.1:7420; port 0: any free port)")
    p.add_argument("--state-dir", type=path, default=None,
                   help="where the controller keeps its fact log (one controller per directory); "
                        "required unless --store is given")
    p.add_argument("--store", metavar="postgresql://...",
                   help="keep the facts in PostgreSQL instead: several controllers may share it, one leads "
                        "(README: High availability); needs pip install 'reckond[postgres]'")
    p.add_argument("--advertise", metavar="ws://HOST:PORT",
                   help="with --store: the URL standbys send agents and clients to while this one leads "
                        "(default ws://LISTEN-HOST:PORT)")
    p.add_argument("--lease", type=duration, default=5.0, metavar="SECONDS",
                   help="with --store: a leader's lease on the database's clock (default 5); a standby takes "
                        "over when it runs out, or at once when the leader's database session ends")
    p.add_argument("--page-size", type=_page_size, default=1000, help="jobs per resync page (default 1000)")
    p.add_argument("--round-timeout", type=duration, default=30.0, help="seconds a resync round may take")
    p.add_argument("--heartbeat-timeout", type=duration, default=10.0,
                   help="disconnect an agent silent this long (default 10)")
    p.add_argument("--lost-after", type=duration, default=None, metavar="DURATION",
                   help="requeue the jobs of an agent disconnected this long (10m, 1h, or seconds; default: never)")
    p.add_argument("--snapshot-every", type=_whole, default=200_000, help="facts between snapshots")
    p.add_argument("--scheduler", choices=("backfill", "fifo"), default="backfill",
                   help="backfill (default): EASY backfill, the first blocked job of each partition gets a start "
                        "that no job behind it may delay (jobs' time limits tell when jobs end); fifo: every job "
                        "that fits starts, in queue order")
    p.add_argument("--reserve-after", type=duration_or_zero, default=0.0, metavar="DURATION",
                   help="backfill: promise a start (and hold later jobs back for it) only to a blocked job queued "
                        "this long (Slurm's bf_min_age_reserve; 16h suits long-queue workloads, docs/performance.md; "
                        "default 0: at once)")
    p.add_argument("--max-running-per-user", type=_whole, default=None, metavar="N",
                   help="start no job of a user who runs N jobs already (default: no limit; why pending says so)")
    p.add_argument("--max-cpus-per-user", type=_whole, default=None, metavar="N",
                   help="start no job that would give a user more than N CPUs (slots) at once (default: no limit)")
    p.add_argument("--default-mem-per-cpu", type=_size, default=None, metavar="SIZE",
                   help="a job submitted without --mem asks its CPUs times SIZE (e.g. 2G), recorded in the job "
                        "and enforced by its agent (Slurm's DefMemPerCPU; default: none, such a job asks no "
                        "memory and its agent caps it at the memory it offers)")
    p.add_argument("--rejoin-grace", type=duration_or_zero, default=15.0, metavar="SECONDS",
                   help="after a start, dispatch nothing until every known agent has rejoined, or this "
                        "long (default 15; 0: dispatch at once)")
    p.add_argument("--tls-cert", type=path, metavar="FILE", help="serve wss:// with this certificate (PEM chain)")
    p.add_argument("--tls-key", type=path, metavar="FILE", help="the private key of --tls-cert (PEM)")
    p.add_argument("--http", type=_listen, default=None, metavar="HOST:PORT",
                   help="serve the HTTP/JSON API (/api/v1/) and the status page (/) there too, with the same "
                        "auth and TLS (docs/http-api.md; default: off)")
    _daemon_files(p)

    p = sub.add_parser("agent", parents=[verbose, controller, token, auth, ca, metrics],
                       help="run an agent in the foreground")
    p.add_argument("--name", type=_agent_name, required=True,
                   help="the agent's name, unique in the cluster: " + AGENT_NAME_RULE)
    p.add_argument("--slots", dest="slots", type=_count, default=None,
                   help="how many CPUs (job slots) this machine offers (default: the CPUs the agent may run on)")
    p.add_argument("--cpus", dest="slots", type=_count, default=None, help="the same as --slots")
    p.add_argument("--state-dir", type=path, required=True,
                   help="where the agent keeps its identity, job records and output (one agent per directory)")
    p.add_argument("--mem", type=_size, default=None, metavar="SIZE",
                   help="memory jobs may ask for, e.g. 64G (default: the machine's, or the agent's cgroup limit); "
                        "less --reserve-mem, it is also the limit of a job without --mem and of all jobs together")
    p.add_argument("--reserve-mem", type=_size, default=None, metavar="SIZE",
                   help="memory kept back from jobs for the system and the agent (default: none)")
    p.add_argument("--gpus", type=_gpu_indices, default=None, metavar="INDICES",
                   help="the GPU indices jobs may be given, e.g. 0,1, or none (default: from nvidia-smi -L)")
    p.add_argument("--gres", type=_gres_list, default=(), metavar="NAME:N,...",
                   help="generic countable resources this machine offers, e.g. license:4,fpga:1")
    p.add_argument("--allow-root-jobs", action="store_true",
                   help="run jobs whose owner is root (default: refused, the job fails with exit 126)")
    p.add_argument("--job-umask", type=_umask, default=0o022, metavar="UMASK",
                   help="umask of jobs that run as their owner, octal (default 022)")
    p.add_argument("--job-pids-max", type=_whole, default=4096, metavar="N",
                   help="processes one job may have at once, where cgroups enforce it (default 4096)")
    p.add_argument("--no-cgroups", dest="cgroups", action="store_false",
                   help="never put jobs in cgroups (no memory, CPU or pids limits, no kill of the whole cgroup)")
    p.add_argument("--executor", choices=("process", "null", "hold"), default="process",
                   help="process: run real jobs; null: finish each job at once; "
                        "hold: finish all jobs on SIGUSR1 (benchmarks)")
    p.add_argument("--reconnect-max", type=duration, default=1.0,
                   help="reconnect backoff cap in seconds (default 1; raise for large clusters)")
    p.add_argument("--page-size", type=_page_size, default=1000, help="entries per resync report page")
    p.add_argument("--recent-window", type=duration_or_zero, default=300.0,
                   help="seconds a finished job is still reported to a rejoin round unasked")
    p.add_argument("--retry-max", type=_retry_cap, default=30.0,
                   help="completion retry backoff cap in seconds, at least 1 (default 30)")
    p.add_argument("--heartbeat-interval", type=duration, default=2.0,
                   help="seconds between heartbeats to the controller (default 2)")
    p.add_argument("--ping-timeout", type=duration, default=None, metavar="SECONDS",
                   help="drop a controller that does not answer a WebSocket ping within this (default 10, "
                        "or 3 with several --controller URLs; a ping every half of it, 5 s at most): how soon "
                        "a frozen leader is left for another")
    p.add_argument("--kill-grace", type=duration_or_zero, default=10.0,
                   help="seconds from SIGTERM to SIGKILL, on cancel and at a job's --time limit (default 10)")
    p.add_argument("--keep-output", type=_keep_output, default=None, metavar="DAYS|never",
                   help="delete the output files (in the state directory) of finished jobs older than DAYS, "
                        "never before the controller has acknowledged their outcome (default: never)")
    p.add_argument("--output-mode", type=_file_mode, default=0o600, metavar="MODE",
                   help="file mode of job output files, octal (default 0600: the agent's user only)")
    p.add_argument("--machine-id-file", type=path, default=None, metavar="FILE",
                   help="this machine's id, which the state directory must belong to (default: /etc/machine-id, "
                        "else /var/lib/dbus/machine-id; with neither the check is off, with a warning)")
    p.add_argument("--moved-from", type=_moved_from, default=None, metavar="MACHINE_ID",
                   help="the state directory was moved here from machine MACHINE_ID, which is gone for good: "
                        "record this machine instead (must name the recorded machine; its jobs are reported lost)")
    _daemon_files(p)

    p = sub.add_parser("submit", parents=[client], help="submit a job (or a file of jobs, or an array); prints the ids",
                       description="Submit a job; print its id.  With --file, submit one job per line of "
                                   "FILE in one request (all or none); print their ids, one per line.  With "
                                   "--array, one job per index; print every id, the array's id first.")
    p.add_argument("--name", help="the job's name (default: the command's file name)")
    p.add_argument("--cpus", "--slots", dest="slots", type=int, default=1, metavar="N",
                   help="CPUs the job takes on its agent (default 1; --slots is the older name)")
    p.add_argument("--mem", metavar="SIZE",
                   help="memory the job may use (512M, 4G; a bare number is MiB): it runs only where that much "
                        "is free, and past it the job is killed (FAILED, reason oom) where the agent enforces it "
                        "(default: the controller's --default-mem-per-cpu times --cpus, else none asked and the "
                        "agent's memory as its limit)")
    p.add_argument("--gpus", type=int, default=0, metavar="N",
                   help="GPUs the job takes (the controller picks their indices: CUDA_VISIBLE_DEVICES, RECKON_GPUS)")
    p.add_argument("--gres", action="append", default=[], metavar="NAME[:N]",
                   help="a generic countable resource the agents declare (license:2; repeatable)")
    p.add_argument("--cwd", metavar="DIR", help="run in DIR on the agent (default: the current directory; "
                                               "a relative DIR is taken from the current directory)")
    p.add_argument("--env", type=_env_pair, action="append", default=[], metavar="K=V",
                   help="set an environment variable for the job (repeatable)")
    p.add_argument("--output", "-o", metavar="PATH",
                   help="the job's stdout goes to PATH on the agent (%%j: job id, %%a: attempt, %%%%: a %%; "
                        "relative to the job's cwd); default: the agent's own file")
    p.add_argument("--error", "-e", metavar="PATH", help="the job's stderr likewise (same patterns)")
    p.add_argument("--file", metavar="FILE", help="submit one job per line of FILE ('-': standard input): "
                                                  "shell-quoted command lines; blank and '#' lines skipped")
    p.add_argument("--array", metavar="START-END[:STEP][,...][%MAX]",
                   help="submit one job per index (a list as Slurm's: 1,3,5-9:2; env RECKON_ARRAY_INDEX, RECKON_ARRAY_ID = the first job's "
                        "id, which names the array); %%MAX: at most MAX of them run at once; prints every id")
    p.add_argument("--time", metavar="DURATION",
                   help="time limit (90s, 10m, 2h, 1h30m; a bare number is seconds): SIGTERM at the limit, "
                        "SIGKILL after the agent's --kill-grace; the job ends FAILED with reason timeout")
    p.add_argument("--retries", type=int, default=0, metavar="N",
                   help="run a failed attempt again, up to N times (not a timeout, not a cancel)")
    p.add_argument("--retry-on-exit", metavar="CODES", help="retry only these exit codes (comma-separated)")
    p.add_argument("--after", metavar="JOB[,JOB...]",
                   help="run after all these jobs COMPLETED; if one ends FAILED or CANCELLED this job is "
                        "cancelled with the reason")
    p.add_argument("--partition", "-p", metavar="NAME",
                   help="the partition to run in (default: the cluster's default partition; reckon partition list)")
    p.add_argument("--queue-anyway", action="store_true",
                   help="queue a job even if no registered agent has the CPUs, memory, GPUs or gres to run it")
    p.add_argument("--hold", action="store_true",
                   help="the job(s) start held: not dispatched until released (reckon release)")
    p.add_argument("--nice", type=int, metavar="N",
                   help="lower the job's priority by N (-10000..10000; a negative N, a push up, is an operator's)")
    p.add_argument("--begin", metavar="TIME",
                   help="not started before TIME, in Slurm's formats: now+60, now+1hour, 16:00 (the next one), "
                        "2026-12-02T10:00, midnight, noon, teatime, tomorrow")
    p.add_argument("--singleton", action="store_true",
                   help="one at a time: not started while another job of this name and user runs, or one "
                        "submitted before it waits (Slurm's --dependency=singleton)")
    p.add_argument("--json", action="store_true",
                   help="print the job object (with --file: the list of ids; with --array: the job objects)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]", help="the command to run")

    p = sub.add_parser("jobs", parents=[client], help="list jobs")
    p.add_argument("--state", choices=JOB_STATES, help="only the jobs in this state")
    p.add_argument("--expand", action="store_true", help="list every job of an array (default: one line each)")
    p.add_argument("--user", metavar="USER", help="only the jobs of this user")
    p.add_argument("--json", action="store_true", help="print a JSON list of job objects (arrays expanded)")

    p = sub.add_parser("show", parents=[client], help="show one job")
    p.add_argument("job", help="the job's id")
    p.add_argument("--json", action="store_true", help="print the job object")

    p = sub.add_parser("logs", parents=[client], help="print a job's output (from its agent)",
                       description="Print a job's stdout (or stderr) as its agent has it, while it runs and "
                                   "after it finished, as long as the agent keeps the file.")
    p.add_argument("job", help="the job's id")
    p.add_argument("--stderr", action="store_true", help="the job's stderr instead of its stdout")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing until the job has ended (waits for it to start, and for its agent "
                        "to come back)")
    p.add_argument("--attempt", type=int, default=None, metavar="N", help="this attempt (default: the latest that ran)")

    p = sub.add_parser("cancel", parents=[client], help="cancel a job (an array's id: the whole array)")
    p.add_argument("job", help="the job's id")
    p.add_argument("--job-only", action="store_true",
                   help="cancel only this job, also when its id names an array")

    p = sub.add_parser("hold", parents=[client], help="hold a PENDING job: it is not dispatched until released")
    p.add_argument("job", help="the job's id")
    p = sub.add_parser("update", parents=[client], help="an operator sets a job's priority adjustment")
    p.add_argument("job", help="the job's id")
    p.add_argument("--priority", type=int, required=True, metavar="N",
                   help="the job's priority is its factors' sum, less its nice, plus N (replacing an earlier N)")
    p = sub.add_parser("priority", parents=[client], help="a job's priority and its factors (like sprio)")
    p.add_argument("job", help="the job's id")
    p.add_argument("--json", action="store_true", help="print the factors as JSON")
    p = sub.add_parser("release", parents=[client], help="release a held job")
    p.add_argument("job", help="the job's id")
    p = sub.add_parser("requeue", parents=[client],
                       help="run a job again as a new attempt (a running one is stopped first, as a cancel does)")
    p.add_argument("job", help="the job's id")
    p = sub.add_parser("signal", parents=[client],
                       help="send a signal now to a RUNNING job's processes (all of them; --batch: the top one)")
    p.add_argument("job", help="the job's id")
    p.add_argument("sig", metavar="SIGNAL", help="a signal name or number: USR1, SIGTERM, 10")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--batch", action="store_true", help="only the job's top process (the batch shell)")
    target.add_argument("--steps", action="store_true",
                        help="every process but the top one (scancel --signal's default: the steps)")

    p = sub.add_parser("whoami", parents=[client],
                       help="who the controller takes you for: your user and uid as it decoded them, and "
                            "whether you are an operator (token mode: everyone is)")
    p.add_argument("--json", action="store_true", help="print the controller's answer as JSON")

    p = sub.add_parser("nodes", parents=[client], help="list agents")
    p.add_argument("--json", action="store_true", help="print a JSON list of agent objects")

    p = sub.add_parser(
        "forget", parents=[client], help="declare a disconnected agent gone: requeue its jobs, free its name",
        description="Declare a disconnected agent gone for good: its unfinished jobs are requeued (to run "
                    "elsewhere), and its name is released, so a new agent (a wiped state directory, a "
                    "replacement machine) may join under it.  If that machine is in fact still alive, the "
                    "jobs it still runs may run twice: make sure it is gone first.  A connected agent "
                    "cannot be forgotten.")
    p.add_argument("node", help="the agent's name")

    p = sub.add_parser("history", parents=[client], help="every attempt of a job and why each ended",
                       description="Every attempt of a job: its agent, start and finish, exit code or signal, "
                                   "how the outcome arrived (the agent's report or a resync round), and every "
                                   "requeue or cancel with its reason, read from the controller's fact log.  "
                                   "History older than the controller's last snapshot is compacted: the output "
                                   "says so.  Without a job: the finished jobs (of --user, since --since) with "
                                   "what their latest attempts used.")
    p.add_argument("job", nargs="?", help="the job's id (none: the finished jobs, see --user and --since)")
    p.add_argument("--user", metavar="USER", help="without a job: only this user's jobs")
    p.add_argument("--since", metavar="WHEN", type=since,
                   help="without a job: only jobs that ended since WHEN, a date (2026-12-01), a date and time "
                        "(2026-12-01T09:30) or a duration ago (2h, 1d)")
    p.add_argument("--json", action="store_true", help="print the history as a JSON object")

    p = sub.add_parser("drain", parents=[client], help="no new jobs on a node; its running jobs finish",
                       description="Drain a node: nothing new is dispatched there, its running jobs finish.  "
                                   "The node shows DRAINING, then DRAINED once idle.  Survives restarts; "
                                   "undo with `reckon resume`.")
    p.add_argument("node", help="the agent's name")

    p = sub.add_parser("resume", parents=[client], help="let a drained node take new jobs again")
    p.add_argument("node", help="the agent's name")

    p = sub.add_parser("partition", parents=[client], help="list the partitions; an operator sets or removes one",
                       description="Partitions (Slurm's): named sets of agents with per-job limits.  `set` creates "
                                   "or changes one at run time (a fact: it survives restarts and failovers until "
                                   "the controller's config file changes); keys: nodes, default, max_time, "
                                   "default_time, max_cpus_per_job, max_mem_per_job, max_gpus_per_job, "
                                   "allow_groups, priority_tier, state (up, down, drain, inactive).")
    part_sub = p.add_subparsers(dest="partition_command", required=True, metavar="ACTION")
    q = part_sub.add_parser("list", parents=[client], help="every partition, its limits and agents")
    q.add_argument("--json", action="store_true", help="print a JSON list of partition objects")
    q = part_sub.add_parser("set", parents=[client], help="create or change a partition (operators only)")
    q.add_argument("name", help="the partition's name")
    q.add_argument("assignments", nargs="+", metavar="KEY=VALUE", help="e.g. state=down max_time=2h nodes=node[01-04]")
    q = part_sub.add_parser("remove", parents=[client], help="remove a partition (operators only)")
    q.add_argument("name", help="the partition's name")

    p = sub.add_parser("dev", parents=[verbose, token],
                       help="a controller and N agents on this machine, in the foreground")
    p.add_argument("--agents", type=_count, default=2, help="how many agents (default 2)")
    p.add_argument("--slots", type=_count, default=4, help="slots per agent (default 4)")
    p.add_argument("--state-dir", type=path, default=None, help="default: a temporary directory")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 7420), metavar="HOST:PORT",
                   help="the controller's address (default 127.0.0.1:7420)")

    p = sub.add_parser("demo", parents=[verbose],
                       help="the failure demo: kill the controller mid-run, check every outcome")
    p.add_argument("--jobs", type=_count, default=40, help="jobs to run (default 40)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")

    p = sub.add_parser("slurm-commands", help="write Slurm's commands (sbatch, srun, squeue, ...) into DIR",
                       description="Write small executables sbatch, srun, scancel, squeue, sacct, sinfo and "
                                   "scontrol into DIR (made if missing) that run reckon's Slurm-style commands "
                                   "against $RECKON_CONTROLLER; a file there not written by this command is left "
                                   "alone.  Nothing is put on PATH: it prints the line to add.")
    p.add_argument("dir", metavar="DIR", help="the directory to write them into")

    p = sub.add_parser("config", help="check a daemon config file")
    config_sub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    p = config_sub.add_parser("check", help="validate a TOML config file; exit status 2 names the bad key")
    p.add_argument("file", type=path, help="the TOML file ([controller] and/or [agent] tables)")

    if only in (None, "bench"):  # the tools' options are imported only for them (or the whole help)
        from reckon.daemon.bench.options import add_parser as add_bench_parser

        add_bench_parser(sub, verbose)
    if only in (None, "chaos"):
        from reckon.daemon.chaos.options import add_parser as add_chaos_parser

        add_chaos_parser(sub, verbose)
    return parser


# ---- dispatch -------------------------------------------------------------------------------


def daemon_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {name: commands[name] for name in DAEMONS if name in commands}  # a parser built for one command has that one


def refuse_non_utf8(argv: list[str]) -> None:
    """Exit status 2 with one line for a word of the command line that is not UTF-8 text.

    Names, commands, environment values and paths cross the wire as UTF-8 (the
    protocol's strings), so bytes that are not UTF-8 cannot be passed on
    faithfully: they are refused, as a ``--file`` that is not UTF-8 is.
    """
    command_at = argv.index("--") if "--" in argv else len(argv)
    for i, word in enumerate(argv):
        try:
            word.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = word.encode("utf-8", "surrogateescape")  # the bytes as given (how Python decoded them)
            if i > command_at:
                what = f"word {i - command_at} of the command"
            elif word.startswith("--") and "=" in word:
                what = f"the value of {word.partition('=')[0]}"
            elif i > 0 and argv[i - 1].startswith("-") and "=" not in argv[i - 1]:
                what = f"the value of {argv[i - 1]}"
            else:
                what = "an argument"
            offset = len(word[:exc.start].encode("utf-8", "surrogateescape"))
            print(f"reckon: {what} is not UTF-8 text: {raw!r} (byte {offset}); names, commands and paths "
                  "go to the controller as UTF-8", file=sys.stderr)
            raise SystemExit(2) from None


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line over the defaults a daemon's --config file sets (flags win)."""
    argv = sys.argv[1:] if argv is None else argv
    refuse_non_utf8(argv)
    command = command_of(argv)
    parser = build_parser(only=command)
    if command in DAEMONS and ("--config" in argv or any(a.startswith("--config=") for a in argv)):
        pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        pre.add_argument("--config", type=path)
        known, _ = pre.parse_known_args(argv)
        if known.config is not None:
            from reckon.daemon.cli import config as daemon_config

            try:
                daemon_config.apply_config(daemon_parsers(parser)[command], known.config, command)
            except daemon_config.ConfigError as exc:
                print(f"reckon: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
    return parser.parse_args(argv)


def _config_check(args: argparse.Namespace) -> int:
    from reckon.daemon.cli import config as daemon_config

    try:
        found = daemon_config.check(args.file, daemon_parsers(build_parser()))
    except daemon_config.ConfigError as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return 2
    tables = ", ".join(f"[{name}] ({len(values)} key(s))" for name, values in found.items()) or "no tables"
    print(f"{args.file}: OK: {tables}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "config":
        return _config_check(args)
    if args.command == "slurm-commands":
        from reckon.daemon.slurm.launchers import run as write_slurm_commands

        return write_slurm_commands(args.dir)
    from reckon.daemon.client_common import ClientError, UsageError

    try:
        if args.command in CLIENT_COMMANDS:
            from reckon.daemon.cli.jobs import run_client_command

            status = run_client_command(args)
        else:
            from reckon.daemon.cli.daemons import run_daemon_command

            status = run_daemon_command(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return status
    except UsageError as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"reckon: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        return 130


def _closed_pipe() -> int:
    """The reader went away (`reckon jobs | head`): stop quietly, as a shell tool killed by SIGPIPE does."""
    import os

    try:  # Python flushes stdout again at exit; point it at /dev/null so that it cannot fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
