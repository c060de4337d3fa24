"""``squeue``: reckon's queue as Slurm prints it (formats in formats.py; the ``query`` op).

Without ``-j``/``-t`` it lists PENDING and RUNNING jobs, as Slurm does; with ``-j`` a job in any
state (a job reckon knows is never left out: Parsl reads a missing job as COMPLETED); ``-t all``
lists every job.  ``SQUEUE_FORMAT`` is read as Slurm reads it.  An id no job has: Slurm's error
(exit 1) when no id named a job, else the jobs found.
"""

from __future__ import annotations

import os
import sys

from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import formats as S
from reckon.daemon.slurm.common import SlurmCommandError, connect, mark_pending, run

PROG = "squeue"
OPTIONS = {
    "-j": ("jobs", True), "--jobs": ("jobs", True), "-u": ("users", True), "--user": ("users", True),
    "-n": ("names", True), "--name": ("names", True), "-t": ("states", True), "--states": ("states", True),
    "-h": ("noheader", False), "--noheader": ("noheader", False), "-o": ("format", True),
    "--format": ("format", True), "-O": ("Format", True), "--Format": ("Format", True), "-r": ("array", False),
    "--array": ("array", False), "-a": ("all", False), "--all": ("all", False), "-l": ("long", False),
    "--long": ("long", False), "-p": ("partitions", True), "--partition": ("partitions", True),
    "-A": ("accounts", True), "--account": ("accounts", True), "--me": ("me", False), "--help": ("help", False),
    "--usage": ("help", False), "-V": ("version", False), "--version": ("version", False),
    "-M": ("clusters", True), "--clusters": ("clusters", True), "--local": ("local", False),
}
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
USAGE = ("Usage: squeue [-j jobs] [-u users] [-n names] [-t states|all] [-p partitions] [-A accounts] "
         "[-h] [-r] [-l] [-o format | -O fields] [--me]")


def slurm_states(text: str) -> set[str] | None:
    """-t's list as Slurm state names (None: all)."""
    out = set()
    for name in C.split_list(text):
        upper = name.upper()
        if upper == "ALL":
            return None
        state = S.CODE_STATES.get(upper, upper)
        if state not in S.RECKON_STATE:
            raise C.UsageProblem(f"Invalid job state specified: {name}")
        out.add(state)
    return out


def _main(argv: list[str]) -> int:
    try:
        opts, rest = C.parse_keyed(argv, OPTIONS, frozenset({"jobs", "users", "names", "states"}))
        if rest:
            raise C.UsageProblem(f"unrecognized argument '{rest[0]}'")
        if opts.get("help"):
            sys.stdout.write(USAGE + "\n")
            return 0
        if opts.get("version"):
            sys.stdout.write("slurm 22.05.8 (reckon)\n")
            return 0
        if "Format" in opts:
            fields = S.parse_squeue_long_format(str(opts["Format"]))
        else:
            fmt = opts.get("format") or os.environ.get("SQUEUE_FORMAT") or (LONG_FORMAT if opts.get("long")
                                                                             else S.SQUEUE_DEFAULT)
            fields = S.parse_squeue_format(str(fmt))
        ids = C.split_list(str(opts["jobs"])) if "jobs" in opts else None
        if ids is not None and not ids:
            raise C.UsageProblem("--jobs needs a job id")
        if "states" in opts:
            wanted = slurm_states(str(opts["states"]))
        else:
            wanted = None if ids is not None else {"PENDING", "RUNNING"}
    except C.UsageProblem as exc:
        raise SlurmCommandError(str(exc)) from None  # Slurm: status 1
    users = C.split_list(str(opts["users"])) if "users" in opts else None
    if opts.get("me"):
        import pwd

        users = [pwd.getpwuid(os.getuid()).pw_name]
    names = C.split_list(str(opts["names"])) if "names" in opts else None
    partitions = set(C.split_list(str(opts["partitions"]))) if "partitions" in opts else None
    accounts = set(C.split_list(str(opts["accounts"]))) if "accounts" in opts else None
    states = sorted({S.RECKON_STATE[s] for s in wanted}) if wanted is not None else None
    client = connect()
    try:
        reply = client.call("query", ids=ids, names=names, users=users, states=states,  # only what it prints
                            fields=S.squeue_query_fields(fields, partitions is not None or accounts is not None))
        jobs = [j for j in reply["jobs"] if (wanted is None or S.slurm_state(j) in wanted)
                and (partitions is None or S.partition(j) in partitions)
                and (accounts is None or S.label(j, "account") in accounts)]
        # Issue #22: why each queued job waits, as the controller decided it (`reckon show`'s code):
        # one more call, only for a column that prints a reason or a priority.  From an older
        # controller, a queued job whose partition does not start jobs waits for it (PartitionDown).
        if (any(code in ("r", "R", "Q") for _, code, _, _ in fields) and not mark_pending(client, jobs)
                and any(j["state"] == "PENDING" and j.get("partition") for j in jobs)):
            S.mark_partition_reasons(jobs, client.call("partitions")["partitions"])
    finally:
        client.close()
    if ids is not None and not reply["jobs"] and len(reply.get("unknown") or ()) == len(ids):
        raise SlurmCommandError("Invalid job id specified")  # Slurm: slurm_load_jobs error
    rows = S.array_rows(S.mark_array_limits(jobs), expand=bool(opts.get("array")))
    lines = S.squeue_lines(rows, fields, reply["now"], header=not opts.get("noheader"))
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command (default: ``sys.argv[1:]``); its exit status (daemon/slurm/launchers.py runs it)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
