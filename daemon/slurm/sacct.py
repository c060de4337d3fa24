"""``sacct``: reckon's jobs, past and present, as Slurm's accounting prints them (sacct_fields.py).

reckon keeps every job's record for good (a snapshot prunes facts, not records), so sacct
answers from the controller's ``query`` op: a job's line, and unless ``-X`` its ``.batch`` and
``.extern`` steps once it started.  The time window is Slurm's: without ``-j`` from ``-S``
(default midnight today; ``now`` with ``-s``) to ``-E`` (default now), a job listed if it was
known at some time in it, but for a PENDING job that never started (Slurm leaves those out of a
time window; a job cancelled while pending stays in: Snakemake reads a job missing from its
sacct poll as still queued, and would wait on it for good); with ``-j`` and no ``-S``/``-E``,
the jobs named whatever their age.
Users: every user's jobs unless ``-u`` (reckon's queue is visible to all, and in token mode jobs
have no user to match).
"""

from __future__ import annotations

import sys
import time

from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import values as V
from reckon.daemon.slurm import formats as S
from reckon.daemon.slurm import sacct_fields as A
from reckon.daemon.slurm.common import SlurmCommandError, connect, mark_pending, run

PROG = "sacct"
OPTIONS = {
    "-j": ("jobs", True), "--jobs": ("jobs", True), "-X": ("allocations", False),
    "--allocations": ("allocations", False), "-n": ("noheader", False), "--noheader": ("noheader", False),
    "-P": ("parsable2", False), "--parsable2": ("parsable2", False), "-p": ("parsable", False),
    "--parsable": ("parsable", False), "-o": ("format", True), "--format": ("format", True),
    "--name": ("names", True), "-u": ("users", True), "--user": ("users", True), "-s": ("states", True),
    "--state": ("states", True), "-S": ("start", True), "--starttime": ("start", True), "-E": ("end", True),
    "--endtime": ("end", True), "-a": ("allusers", False), "--allusers": ("allusers", False),
    "-b": ("brief", False), "--brief": ("brief", False), "-D": ("duplicates", False),
    "--duplicates": ("duplicates", False), "-r": ("partitions", True), "--partition": ("partitions", True),
    "-A": ("accounts", True), "--accounts": ("accounts", True), "-L": ("allclusters", False),
    "--allclusters": ("allclusters", False), "--noconvert": ("noconvert", False), "-T": ("truncate", False),
    "--truncate": ("truncate", False), "-e": ("helpformat", False), "--helpformat": ("helpformat", False),
    "-h": ("help", False), "--help": ("help", False), "--usage": ("help", False), "-V": ("version", False),
    "--version": ("version", False), "--delimiter": ("delimiter", True), "-M": ("clusters", True),
    "--clusters": ("clusters", True),
}
LISTS = frozenset({"jobs", "names", "users", "states", "format", "partitions", "accounts"})  # Slurm appends
USAGE = ("Usage: sacct [-j jobs] [-X] [-n] [-P|-p] [-o fields] [-S time] [-E time] [--name names] "
         "[-u users] [-s states] [-b] [-e]")


def states_of(text: str) -> set[str]:
    out = set()
    for name in C.split_list(text):
        upper = name.upper()
        state = S.CODE_STATES.get(upper, upper)
        if state not in S.RECKON_STATE:
            raise C.UsageProblem(f"Invalid state: {name}")
        out.add(state)
    return out


def _main(argv: list[str]) -> int:
    now = time.time()
    try:
        opts, rest = C.parse_keyed(argv, OPTIONS, LISTS)
        if rest:
            raise C.UsageProblem(f"unrecognized argument '{rest[0]}'")
        if opts.get("help"):
            sys.stdout.write(USAGE + "\n")
            return 0
        if opts.get("version"):
            sys.stdout.write("slurm 22.05.8 (reckon)\n")
            return 0
        if opts.get("helpformat"):
            names = sorted(A.SACCT_FIELDS, key=str.lower)
            for k in range(0, len(names), 4):
                sys.stdout.write("".join(f"{n:<20}" for n in names[k:k + 4]).rstrip() + "\n")
            return 0
        fmt = str(opts["format"]) if "format" in opts else ("JobID,State,ExitCode" if opts.get("brief")
                                                             else A.SACCT_DEFAULT)
        fields = A.parse_sacct_format(fmt)
        ids = C.split_list(str(opts["jobs"])) if "jobs" in opts else None
        wanted = states_of(str(opts["states"])) if "states" in opts else None
        since = V.parse_when(str(opts["start"]), now) if "start" in opts else None
        until = V.parse_when(str(opts["end"]), now) if "end" in opts else None
        if ids is None and since is None:
            since = now if wanted is not None else V.parse_when("midnight", now)
        if since is not None and until is not None and until < since:
            raise C.UsageProblem("start time is after the end time")
    except C.UsageProblem as exc:
        raise SlurmCommandError(str(exc)) from None  # Slurm: status 1
    parsable = "|2" if opts.get("parsable2") else "|" if opts.get("parsable") else None
    users = C.split_list(str(opts["users"])) if "users" in opts else None
    names = C.split_list(str(opts["names"])) if "names" in opts else None
    partitions = set(C.split_list(str(opts["partitions"]))) if "partitions" in opts else None
    accounts = set(C.split_list(str(opts["accounts"]))) if "accounts" in opts else None
    states = sorted({S.RECKON_STATE[s] for s in wanted}) if wanted is not None else None
    client = connect()
    try:
        reply = client.call("query", ids=ids, names=names, users=users, states=states, since=since, until=until,
                            fields=A.sacct_query_fields(fields, partitions is not None or accounts is not None))
        if any(name == "Reason" for name, _ in fields):  # issue #22: a queued job's reason, the controller's
            mark_pending(client, reply["jobs"])
    finally:
        client.close()
    jobs = [job for job in reply["jobs"] if (wanted is None or S.slurm_state(job) in wanted)
            and (partitions is None or S.partition(job) in partitions)
            and (accounts is None or S.label(job, "account") in accounts)]
    if ids is None:  # Slurm lists a job in a time window once it is eligible to start: not while it waits
        jobs = [job for job in jobs if not S.never_started(job)]
    rows = []
    for job in S.array_rows(jobs, expand=False):  # an array's pending members: one record, as Slurm's
        rows += A.sacct_rows(job, allocations=bool(opts.get("allocations")), now=reply["now"])
    lines = A.sacct_lines(rows, fields, reply["now"], header=not opts.get("noheader"), parsable=parsable)
    delimiter = opts.get("delimiter")
    if delimiter and parsable is not None:
        lines = [line.replace("|", str(delimiter)) for line in lines]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command (default: ``sys.argv[1:]``); its exit status (daemon/slurm/launchers.py runs it)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
