"""``sinfo``: reckon's nodes (its agents) as Slurm prints them (layouts.py; the ``nodes`` op).

reckon has one partition, ``reckon``, the default (``reckon*``), until #22.  Lines are grouped by
node state as Slurm groups them; ``-N`` prints one line per node.
"""

from __future__ import annotations

import sys

from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import layouts as L
from reckon.daemon.slurm.common import SlurmCommandError, connect, run
from reckon.daemon.slurm.formats import PARTITION

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
    if "partitions" in opts and PARTITION not in C.split_list(str(opts["partitions"])):
        nodes: list[dict] = []
    else:
        client = connect()
        try:
            nodes = client.call("nodes")["nodes"]
        finally:
            client.close()
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
    groups = L.sinfo_groups(nodes, node_oriented=bool(opts.get("node")))
    if not groups and not opts.get("node"):
        groups = [[]]  # Slurm prints the partition with 0 nodes, state n/a
    lines = L.sinfo_lines(groups, fields, header=not opts.get("noheader"))
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command (default: ``sys.argv[1:]``); its exit status (daemon/slurm/launchers.py runs it)."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
