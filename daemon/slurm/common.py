"""What reckon's Slurm commands share: the one connection to the controller, the run of a
command's main with Slurm's error lines and exit codes, Slurm's signal names.

Light: a workflow tool runs ``sbatch`` once per job and ``scancel`` in loops, so these modules
import no trio, no ``reckon.model``, no argparse, no json, no re, no enum, no signal (whose
``Signals`` enum is the cost): the controller validates the spec dicts they build.
The controller and its authentication are resolved as ``reckon``'s client commands resolve
them (``daemon/client_common.py``): ``$RECKON_CONTROLLER`` (default ws://127.0.0.1:7420),
``$RECKON_AUTH``, ``$RECKON_TOKEN``/``$RECKON_TOKEN_FILE``, ``$RECKON_CA``.
"""

from __future__ import annotations

import os
import sys


TIMEOUT = 30.0  # seconds for connecting, then for each request ($RECKON_SLURM_TIMEOUT overrides)
# Seconds a command keeps trying to connect while no controller answers (a restart, a failover), as
# Slurm's commands retry slurmctld for about as long; nothing has been sent yet, so a retry is safe.
# $RECKON_SLURM_CONNECT_WAIT overrides (0: one try).
CONNECT_WAIT = 10.0

# Linux's signal numbers (x86, arm, riscv: the generic table).  Not from the signal module:
# importing it builds an enum of every signal, a cost each sbatch and scancel would pay.
SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9,
    "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16,
    "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
    "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31,
}


# The controller's refusal of a job no agent can run ends with this (model/admission.py's, held
# equal by tests/slurm/test_sbatch_e2e.py): it names reckon submit's flag, which sbatch and srun
# lack, so they leave it out.  A copy: importing the model would cost every command its import.
QUEUE_ANYWAY_HINT = " (--queue-anyway queues it for an agent yet to join)"


class SlurmCommandError(Exception):
    """One line for the user, printed as ``PROG: error: TEXT``; ``status`` the exit code (Slurm: 1)."""

    def __init__(self, text: str, status: int = 1, prefix: str = "error: ") -> None:
        super().__init__(text)
        self.status = status
        self.prefix = prefix


def invalid(text: str) -> SlurmCommandError:
    """A value Slurm would not parse: its exit status is 255, as Slurm's (exit(-1))."""
    return SlurmCommandError(text, 255)


def bad_option(prog: str, text: str) -> SlurmCommandError:
    """getopt's own complaint, as Slurm's commands print it (no ``error:``), exit status 255."""
    return SlurmCommandError(f"{text}\nTry \"{prog} --help\" for more information", 255, prefix="")


def signal_number(text: str) -> int:
    """``USR2``, ``SIGUSR2``, ``usr2`` or ``12`` -> 12, as Slurm reads a signal; else an error."""
    word = text.strip().upper()
    if word.isdigit() and 0 < int(word) < 65:
        return int(word)
    number = SIGNALS.get(word[3:] if word.startswith("SIG") else word)
    if number is None:
        raise invalid(f"Invalid signal specification: {text!r}")
    return number


def connect():  # -> SyncClient (not annotated: the import stays inside)
    """One connection to the controller, reused for every request of the command."""
    from reckon.daemon.client_common import (UsageError, client_ssl_context, resolve_auth, resolve_ca,
                                             resolve_controller)

    url = resolve_controller(None)
    auth = resolve_auth(None, None, None)
    tls = client_ssl_context(resolve_ca(None)) if any(u.strip().startswith("wss:") for u in url.split(",")) else None
    try:
        timeout = float(os.environ.get("RECKON_SLURM_TIMEOUT") or TIMEOUT)
    except ValueError:
        raise UsageError("$RECKON_SLURM_TIMEOUT must be a number of seconds, got "
                         f"{os.environ['RECKON_SLURM_TIMEOUT']!r}") from None
    client = _connected_class()(url, auth, timeout=timeout, ssl_context=tls)
    _connect_waiting(client, _seconds("RECKON_SLURM_CONNECT_WAIT", CONNECT_WAIT))
    return client


def _seconds(name: str, default: float) -> float:
    from reckon.daemon.client_common import UsageError

    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UsageError(f"${name} must be a number of seconds, got {text!r}")
    return value


def _connect_waiting(client, wait: float) -> None:
    """Connect; while the controller is unreachable, try again for ``wait`` seconds (backing off
    from 0.1 s to 1 s between tries), then give its last one-line reason."""
    import time

    from reckon.daemon.client_common import Unreachable

    deadline = time.monotonic() + wait
    pause = 0.1
    while True:
        try:
            client.connect()
            return
        except Unreachable:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _connected_class():
    from reckon.daemon.blocking.client import SyncClient

    class Connected(SyncClient):
        """Connected already: ``with connect() as client`` does not connect a second time."""

        def __enter__(self) -> "Connected":
            if self._ws is None:
                self.connect()
            return self

    return Connected


def warn(prog: str, text: str) -> None:
    sys.stderr.write(f"{prog}: warning: {text}\n")


def run(main, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run ``main(argv)`` (default: ``sys.argv[1:]``); a known failure is one line on stderr as Slurm
    prints it (``sbatch: error: ...``) and its exit status: Slurm's 1 (2 for a bad controller URL or
    token setting, as ``reckon``'s usage errors).  ``prog``: default the command's file name."""
    if prog is None:
        name = sys.argv[0].rpartition("/")[2] if sys.argv and sys.argv[0] not in ("", "-c") else "slurm"
        prog = name.removesuffix(".py")
    argv = sys.argv[1:] if argv is None else argv
    try:
        status = main(argv)
        sys.stdout.flush()
        return int(status or 0)
    except Exception as exc:
        # client_common's errors (unreachable, refused, a bad URL); not imported unless a command
        # connected (srun inside a job never does: it pays for no socket stack).
        client = sys.modules.get("reckon.daemon.client_common")
        if not isinstance(exc, SlurmCommandError) and (client is None or not isinstance(exc, client.ClientError)):
            raise
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        prefix = getattr(exc, "prefix", "error: ")
        lines = str(exc).splitlines() or [""]
        sys.stderr.write(f"{prog}: {prefix}{lines[0]}\n")
        for line in lines[1:]:  # getopt's "Try ... --help" line stands alone, as Slurm prints it
            sys.stderr.write(f"{line}\n" if not prefix else f"{prog}: {prefix}{line}\n")
        if isinstance(exc, SlurmCommandError):
            return exc.status
        return 2 if isinstance(exc, client.UsageError) else 1
    except BrokenPipeError:  # `... | head`: the reader left; no flush at exit onto the closed pipe
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt:
        return 130


def query(client, *, ids: list[str] | None = None, names: list[str] | None = None, users: list[str] | None = None,
          states: list[str] | None = None) -> list[dict]:
    """The ``query`` op's jobs (ids: ``123``, an array's id for all its members, ``123_4``); from a
    controller without it (before protocol 7), the ``jobs`` op's list, filtered here the same way."""
    from reckon.daemon.client_common import ClientError

    try:
        return client.call("query", ids=ids, names=names, users=users, states=states)["jobs"]
    except ClientError as exc:
        if "unknown op" not in str(exc):
            raise
    wanted = set(ids or ())
    out = []
    for job in client.call("jobs")["jobs"]:
        array = job.get("array_id")
        if ids is not None and not (job["id"] in wanted or array in wanted
                                    or (array is not None and f"{array}_{job.get('array_index')}" in wanted)):
            continue
        if names is not None and job.get("name") not in names:
            continue
        if users is not None and job.get("user") not in users:
            continue
        if states is not None and job["state"] not in states:
            continue
        out.append(job)
    return out


def default_signals() -> None:
    """Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored through exec: give the
    command their defaults back (``srun yes | head`` ends ``yes`` as a shell would)."""
    import _signal

    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)


PENDING_IDS = 10_000  # more PENDING jobs shown than this: ask for every PENDING job's reason at once


def mark_pending(client, jobs: list[dict]) -> bool:
    """Put the controller's reason code (``pending_code``) and priority in each PENDING job of
    ``jobs`` (the ``pending`` op, issue #22: the code ``reckon show`` gives), so the commands print
    what the controller decided rather than guess it from the job's record.  False from a
    controller without the op: the caller derives the reasons itself (formats.pending_reason)."""
    from reckon.daemon.client_common import ClientError

    waiting = [job for job in jobs if job["state"] == "PENDING"]
    if not waiting:
        return True
    ids = [job["id"] for job in waiting] if len(waiting) <= PENDING_IDS else None
    try:
        reply = client.call("pending", ids=ids)
    except ClientError as exc:
        if "unknown op" not in str(exc):
            raise
        return False
    reasons, priorities = reply.get("reasons") or {}, reply.get("priorities") or {}
    for job in waiting:
        # A job that started since the query has no code: the record's own reason is shown then.
        if job["id"] in reasons:
            job["pending_code"] = reasons[job["id"]]
            job["priority"] = priorities.get(job["id"])
    return True
