"""``scontrol``: show job/config/partition/node(s), hold, release and requeue, in Slurm's words.

``show job`` without an id lists what Slurm's controller still holds: live jobs and jobs that
ended in the last ``MinJobAge`` (300 s).  hold/release/requeue take job ids, comma-separated or
several; an array's id acts on each of its jobs.  ``requeue`` works from inside a job: the agent
puts ``RECKON_CONTROLLER`` in the job's environment.
"""

from __future__ import annotations

import sys
import time

from reckon.daemon.client_common import ClientError, resolve_controller
from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import layouts as L
from reckon.daemon.slurm.common import SlurmCommandError, connect, mark_pending, run

PROG = "scontrol"
OPTIONS = {
    "-o": ("oneliner", False), "--oneliner": ("oneliner", False), "-d": ("details", False),
    "--details": ("details", False), "-a": ("all", False), "--all": ("all", False), "-h": ("help", False),
    "--help": ("help", False), "-V": ("version", False), "--version": ("version", False),
    "-Q": ("quiet", False), "--quiet": ("quiet", False), "--local": ("local", False),
}
MIN_JOB_AGE = 300.0  # seconds: Slurm's default MinJobAge, what `show job` keeps of ended jobs
USAGE = ("Usage: scontrol [-o] show job [ID] | show config | show partition [NAME] | show node[s] [NAME]\n"
         "       scontrol hold|release|requeue JOB_ID[,JOB_ID...]")


def _show(client, what: str, names: list[str], oneliner: bool) -> str:
    now = time.time()
    if what in ("job", "jobs", "jobid"):
        ids = [i for n in names for i in C.split_list(n)] or None
        reply = client.call("query", ids=ids) if ids else client.call("query", since=now - MIN_JOB_AGE)
        if ids and not reply["jobs"]:
            raise SlurmCommandError("Invalid job id specified")
        if not reply["jobs"]:
            return "No jobs in the system\n"
        if not mark_pending(client, reply["jobs"]) and any(  # issue #22: the controller's reasons
                j["state"] == "PENDING" and j.get("partition") for j in reply["jobs"]):  # else its partitions'
            L.mark_partition_reasons(reply["jobs"], client.call("partitions")["partitions"])
        # an array's pending members are one record (ArrayTaskId=2-5%2), as Slurm keeps them
        jobs = L.array_rows(L.mark_array_limits(reply["jobs"]), expand=False)
        blocks = [L.show_job(j, reply["now"], oneliner) for j in jobs]
        return "\n".join(blocks) + ("\n" if oneliner else "\n")
    if what in ("partition", "partitions", "part"):
        parts = L.partitions_of(client.call("nodes"))  # issue #22: the controller's (or the implicit one)
        if names:
            parts = [p for p in parts if p["name"] == names[0]]
            if not parts:
                raise SlurmCommandError(f"Partition {names[0]} not found")
        return "".join(L.show_partition(p["members"], oneliner=oneliner, part=p) + ("\n" if oneliner else "\n")
                       for p in parts)
    if what in ("node", "nodes", "nodename"):
        nodes = client.call("nodes")["nodes"]
        if names:
            wanted = set(C.split_list(names[0]))
            nodes = [n for n in nodes if n["name"] in wanted]
            if not nodes:
                raise SlurmCommandError(f"Node {names[0]} not found")
        if not nodes:
            return "No nodes in the system\n"
        return "".join(L.show_node(n, oneliner) + ("\n" if oneliner else "\n") for n in nodes)
    if what in ("config", "configuration"):
        scheduler = client.call("status")["status"].get("scheduler", "fifo")
        return L.show_config(now, resolve_controller(None), len(client.call("nodes")["nodes"]), scheduler)
    raise SlurmCommandError(f"invalid entity: {what} for keyword:show", 2)


def _act(client, op: str, names: list[str]) -> int:
    ids = [i for n in names for i in C.split_list(n)]
    if not ids:
        raise SlurmCommandError(f"{op} needs a job id", 2)
    reply = client.call("query", ids=ids, fields=["id"])
    failed = 0
    for unknown in reply.get("unknown") or ():
        sys.stderr.write(f"Invalid job id specified for job {unknown}\n")
        failed = 1
    for job in reply["jobs"]:
        try:
            client.call(op, job=job["id"])
        except ClientError as exc:
            sys.stderr.write(f"{op} of job {job['id']}: {exc}\n")
            failed = 1
    return failed


def _main(argv: list[str]) -> int:
    try:
        opts, rest = C.parse_keyed(argv, OPTIONS)
    except C.UsageProblem as exc:
        raise SlurmCommandError(str(exc)) from None  # Slurm: status 1
    if opts.get("help") or not rest:
        sys.stdout.write(USAGE + "\n")
        return 0 if opts.get("help") else 2
    if opts.get("version"):
        sys.stdout.write("slurm 22.05.8 (reckon)\n")
        return 0
    command, args = rest[0].lower(), rest[1:]
    if command == "show":
        if not args:
            raise SlurmCommandError("show needs an entity: job, config, partition, node", 2)
        what = args[0].lower()
        names = args[1:]
        if "=" in what:  # show JobId=5
            what, _, first = what.partition("=")
            names = [first, *names]
        client = connect()
        try:
            sys.stdout.write(_show(client, what, names, bool(opts.get("oneliner"))))
        finally:
            client.close()
        return 0
    if command in ("hold", "uhold", "release", "requeue"):
        op = "hold" if command == "uhold" else command
        client = connect()
        try:
            return _act(client, op, args)
        finally:
            client.close()
    raise SlurmCommandError(f"invalid keyword: {rest[0]} (reckon's scontrol: show, hold, release, requeue)", 2)


def main(argv: list[str] | None = None) -> int:
    """The command (default: ``sys.argv[1:]``); its exit status (daemon/slurm/launchers.py runs it)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
