"""``sinfo``: reckon's nodes (its agents) as Slurm prints them (layouts.py; the ``nodes`` op).

Its partitions are the controller's (issue #22); a cluster without any has one, ``reckon``, the
default (``reckon*``), holding every node.  Lines are grouped per partition by node state as Slurm
groups them; ``-N`` prints one line per node and partition.
"""

from __future__ import annotations

import sys

from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import layouts as L
from reckon.daemon.slurm.common import SlurmCommandError, connect, run

PROG = "sinfo"
OPTIONS = {
    "-o": ("format", True), "--format": ("format", True), "-h": ("noheader", False),
    "--noheader": ("noheader", False), "-N": ("node", False), "--Node": ("node", False), "-p": ("partitions", True),
    "--partition": ("partitions", True), "-l": ("long", False), "--long": ("long", False), "-a": ("all", False),
    "--all": ("all", False), "-e": ("exact", False), "--exact": ("exact", False), "-r": ("responding", False),
    "--responding": ("responding", False), "-d": ("dead", False), "--dead": ("dead", False),
    "-n": ("nodes", True), "--nodes": ("nodes", True), "-t": ("states", True), "--states": ("states", True),
    "--help": ("help", False), "--usage": ("help", False), "-V": ("version", False), "--version": ("version", False),
    "--local": ("local", False),
}
LONG = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
USAGE = "Usage: sinfo [-o format] [-h] [-N] [-p partition] [-n nodes] [-t states] [-r] [-d]"
DEAD = ("DISCONNECTED", "LOST")


def _main(argv: list[str]) -> int:
    try:
        opts, rest = C.parse_keyed(argv, OPTIONS)
        if rest:
            raise C.UsageProblem(f"unrecognized argument '{rest[0]}'")
        if opts.get("help"):
            sys.stdout.write(USAGE + "\n")
            return 0
        if opts.get("version"):
            sys.stdout.write("slurm 22.05.8 (reckon)\n")
            return 0
        if opts.get("long") and "format" not in opts:
            raise C.UsageProblem("--long is not implemented by reckon's sinfo: give -o")
        default = L.SINFO_NODES_DEFAULT if opts.get("node") else L.SINFO_DEFAULT
        fields = L.parse_sinfo_format(str(opts.get("format") or default))
    except C.UsageProblem as exc:
        raise SlurmCommandError(str(exc)) from None  # Slurm: status 1
    client = connect()
    try:
        parts = L.partitions_of(client.call("nodes"))
    finally:
        client.close()
    if "partitions" in opts:
        wanted_parts = set(C.split_list(str(opts["partitions"])))
        parts = [p for p in parts if p["name"] in wanted_parts]
    for part in parts:
        nodes = part["members"]
        if "nodes" in opts:
            names = set(C.split_list(str(opts["nodes"])))
            nodes = [n for n in nodes if n["name"] in names]
        if opts.get("responding"):
            nodes = [n for n in nodes if n["state"] not in DEAD]
        if opts.get("dead"):
            nodes = [n for n in nodes if n["state"] in DEAD]
        if "states" in opts:
            wanted = {s.lower() for s in C.split_list(str(opts["states"]))}
            nodes = [n for n in nodes if {L.node_state(n).rstrip("*"), L.node_state(n, long=True).rstrip("*")} & wanted]
        part["members"] = nodes
    # A partition with no node left prints one line, 0 nodes, state n/a (as Slurm does).
    groups, owners = L.sinfo_partition_groups(parts, node_oriented=bool(opts.get("node")))
    lines = L.sinfo_lines(groups, fields, header=not opts.get("noheader"), parts=owners)
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command (default: ``sys.argv[1:]``); its exit status (daemon/slurm/launchers.py runs it)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
