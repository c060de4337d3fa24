"""`scancel`: cancel or signal jobs as Slurm's scancel does (issue #21).

``scancel [OPTIONS] [JOB[_INDEX] ...]``: each job is cancelled (an array's id: all its jobs;
``123_4``: that member).  ``-s/--signal SIG`` signals instead (the ``signal`` op): the job's
steps (every process but the batch shell); with ``-b/--batch`` the batch shell only; with
``-f/--full`` every process.  The filters (``-n/--name``,
``-u/--user``, ``--me``, ``-t/--state``, ``-p/--partition``, ``-A/--account``, ``-q/--qos``,
``--wckey``, ``-R/--reservation``, ``-w/--nodelist``) pick the jobs through the ``query`` op,
and with ids, narrow them.  Options permute (``scancel 123 --signal USR2``: submitit).

Exit status as Slurm's: 0, or 1 when a job could not be cancelled (one ``scancel: error:``
line each, unless ``-Q/--quiet``).
"""

from __future__ import annotations

import os
import sys

from reckon.daemon.client_common import ClientError
from reckon.daemon.slurm import argv as getopt
from reckon.daemon.slurm.common import SlurmCommandError, bad_option, connect, invalid, query, run, signal_number
from reckon.daemon.slurm.values import check_clusters

PROG = "scancel"
OPTIONS = [
    ("account", "A", 1), ("batch", "b", 0), ("cron", "c", 0), ("full", "f", 0), ("help", "h", 0),
    ("hurry", "H", 0), ("interactive", "i", 0), ("clusters", "M", 1), ("name", "n", 1), ("jobname", None, 1),
    ("me", None, 0), ("nodelist", "w", 1), ("partition", "p", 1), ("qos", "q", 1), ("quiet", "Q", 0),
    ("reservation", "R", 1), ("sibling", None, 1), ("signal", "s", 1), ("state", "t", 1), ("usage", None, 0),
    ("user", "u", 1), ("verbose", "v", 0), ("version", "V", 0), ("wckey", None, 1),
]
REFUSED = {"interactive": "reckon's scancel does not ask", "sibling": "reckon is one cluster",
           "cron": "reckon has no crontab jobs"}
LIVE = ("PENDING", "RUNNING")  # the states scancel acts on
# Slurm's state names and compact codes -> reckon's (the others match no live reckon job).
STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING"}
LABEL_FILTERS = {"partition": "partition", "account": "account", "qos": "qos", "wckey": "wckey",
                 "reservation": "reservation"}


def parse_args(argv: list[str]) -> tuple[dict[str, str | None], list[str]]:
    try:
        parsed, operands = getopt.parse(argv, OPTIONS, permute=True)
    except getopt.OptionError as exc:
        raise bad_option(PROG, str(exc)) from None
    opts = dict(parsed)
    if "jobname" in opts:
        opts["name"] = opts.pop("jobname")
    for name, why in REFUSED.items():
        if name in opts:
            raise SlurmCommandError(f"--{name} is not supported by reckon ({why})")
    if opts.get("clusters") is not None:  # Snakemake cancels with --clusters=all
        check_clusters(opts["clusters"] or "")
    return opts, operands


def job_ids(operands: list[str]) -> list[str]:
    """The ids named: ``123``, ``123_4``, ``123_[1-3,5]`` (each member), ``,`` lists; steps refused."""
    ids: list[str] = []
    for operand in operands:
        for word in _split(operand):
            if "." in word:
                raise invalid(f"Invalid job id {word}: reckon's jobs have no steps")
            base, us, index = word.partition("_")
            if not base.isdigit():
                raise invalid(f"Invalid job id {word}")
            if not us:
                ids.append(base)
            elif index.startswith("[") and index.endswith("]"):
                ids.extend(f"{base}_{i}" for i in _indices(index[1:-1], word))
            elif index.isdigit():
                ids.append(f"{base}_{index}")
            else:
                raise invalid(f"Invalid job id {word}")
    return ids


def _split(operand: str) -> list[str]:
    """``1,2_[3,4]`` -> ``1``, ``2_[3,4]`` (commas inside brackets stay)."""
    words, depth, word = [], 0, ""
    for char in operand:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            words.append(word)
            word = ""
        else:
            word += char
    return [w for w in [*words, word] if w]


def _indices(text: str, word: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        high, _, step = high.partition(":")
        if not low.isdigit() or (dash and not high.isdigit()) or (step and not step.isdigit()):
            raise invalid(f"Invalid job id {word}")
        out.extend(range(int(low), int(high if dash else low) + 1, int(step or 1)))
    return out


def select(client, opts: dict[str, str | None], ids: list[str]) -> list[dict]:
    """The live jobs the filters pick (narrowed to ``ids`` if given), from the ``query`` op."""
    users = None
    if "me" in opts:
        users = [_me()]
    if opts.get("user"):
        users = [u for u in (opts["user"] or "").split(",") if u]
    states = list(LIVE)
    if opts.get("state"):
        wanted = {STATES.get(s.strip().upper(), "") for s in (opts["state"] or "").split(",")}
        states = [s for s in LIVE if s in wanted]
        if not states:
            return []
    names = [n for n in (opts.get("name") or "").split(",") if n] or None
    jobs = query(client, ids=ids or None, names=names, users=users, states=states)
    for option, key in LABEL_FILTERS.items():
        if opts.get(option):
            wanted_values = set((opts[option] or "").split(","))
            jobs = [j for j in jobs if (j.get("labels") or {}).get(key) in wanted_values]
    if opts.get("nodelist"):
        nodes = set((opts["nodelist"] or "").split(","))
        jobs = [j for j in jobs if j.get("agent") in nodes]
    return jobs


def _me() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", str(os.getuid()))


def resolve(client, word: str) -> str:
    """A reckon job id for ``123`` or ``123_4`` (an array member: through the ``query`` op)."""
    if "_" not in word:
        return word
    jobs = query(client, ids=[word])
    if not jobs:
        raise ClientError("Invalid job id specified")
    return jobs[0]["id"]


def members(client, word: str) -> list[str]:
    """The jobs ``word`` names for a signal: itself, an array member, or an array's running jobs."""
    jobs = query(client, ids=[word])
    if len(jobs) <= 1:
        return [resolve(client, word) if not jobs else jobs[0]["id"]]
    return [j["id"] for j in jobs if j["state"] == "RUNNING"]


def _main(argv: list[str]) -> int:
    opts, operands = parse_args(argv)
    if "help" in opts or "usage" in opts:
        sys.stdout.write("Usage: scancel [-A account] [--batch] [--full] [--hurry] [-n job_name] [-p partition]\n"
                         "               [-Q] [-q qos] [-R reservation] [-s signal | integer] [-t PENDING | "
                         "RUNNING]\n               [-u user_name] [--me] [-v] [-w hosts...] [--wckey=wckey] "
                         "[job_id[_array_id]]\n")
        return 0
    if "version" in opts:
        sys.stdout.write("slurm 22.05.0 (reckon)\n")
        return 0
    ids = job_ids(operands)
    filters = [k for k in ("name", "user", "me", "state", "nodelist", *LABEL_FILTERS) if k in opts]
    if not ids and not filters:
        raise SlurmCommandError("No job identification provided")
    sig = signal_number(opts["signal"] or "") if opts.get("signal") is not None else None
    # Slurm's targets (the signal op's too): neither flag, the job's steps (every process but the
    # batch shell); -b the batch shell only; -f every process, the batch shell included (-b ignored).
    full = "full" in opts
    batch = "batch" in opts and not full
    if batch and sig is None:
        sig = 9  # Slurm: -b alone sends SIGKILL to the batch shell
    quiet = "quiet" in opts
    status = 0
    with connect() as client:
        if filters:
            targets = [(j["id"], j["id"]) for j in select(client, opts, ids)]
        else:
            targets = [(word, word) for word in ids]
        for shown, job in targets:
            try:
                if sig is None and filters:
                    # Each job the filters picked, alone: an array's own id among them names only
                    # that member (its siblings are picked, or not, on their own).
                    try:
                        client.call("cancel", job=job, array=False)
                    except ClientError as exc:
                        if " is already " not in str(exc):  # it ended since the query: no longer picked
                            raise
                elif sig is None:
                    client.call("cancel", job=resolve(client, job))  # an array's id: the cancel op takes all
                else:
                    for member in members(client, job):  # the signal op takes one job: each running member
                        client.call("signal", job=member, signal=sig, batch_only=batch, full=full)
            except ClientError as exc:
                status = 1
                if not quiet:
                    what = "Kill job error" if sig is None else "Signal job error"
                    sys.stderr.write(f"scancel: error: {what} on job id {shown}: {exc}\n")
    return status


def main(argv: list[str] | None = None) -> int:
    """The ``scancel`` command (the launcher's entry): its exit status."""
    return run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
