"""What differs from one run to the next, replaced by names, the same way for Slurm and reckon.

By column (by key for scontrol's ``Key=Value`` output), as the output's kind says:

- ``table``: whitespace-aligned columns under a header line (squeue, sacct, sinfo defaults);
  the header line (and sacct's rule line) is kept verbatim (its widths are Slurm's contract),
  each row becomes its normalised fields joined by ``|`` (the widths of values that vary
  cannot be compared); under a rule line the fields are cut by its spans, so an empty one
  stays an empty field, else split at white space;
- ``table-noheader``: the same without the header (the columns are given);
- ``parsable`` / ``parsable-noheader``: ``|``-separated (``--parsable2``, squeue ``%i|%T``);
- ``keyvalue``: scontrol's ``Key=Value`` words, one per line after normalising, in order;
- ``text``: anything else (sbatch's line), ids replaced where they stand alone.

Replacements: a job id by ``{shape}`` (its shape's name: ``{array}_3``, ``{array}_[2-5%2]``,
``{completed}.batch``), an id that is no shape's (an array member's own raw id in Slurm) by
``{id}``; a date-time by ``{time}``; an elapsed/run time by ``{duration}``; this host's and the
node's name by ``{node}``; the private directory by ``{dir}``; the daemons' ports by
``{port}``; a process id (``AllocNode:Sid``) by ``{pid}``; what the scheduler's timing decides
(AccrueTime, LastSchedEval, Scheduler: Main or Backfill) by ``{varies}``; the partition's name (Slurm's
``debug``, reckon's ``reckon``) by ``{partition}`` and the cluster's by ``{cluster}``, in the
columns and keys that hold them.  Time limits, states, exit codes, counts, users and job names
are compared as they are.
"""

from __future__ import annotations

import re

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_DURATION = re.compile(r"^(\d+-)?(\d+:)?\d+:\d\d(\.\d+)?$")
_LEAD_ID = re.compile(r"^(\d+)(?=$|[_.+\[(])")
_DEP_ID = re.compile(r"(?<=[:,])(\d+)(?=$|[(,:_?])")
_SLURM_FILE = re.compile(r"(?<=slurm-)(\d+)(?=[._])")

# Column names (squeue's header words and its % codes, sacct's fields, scontrol's keys), lower
# case but for the % codes (squeue's %P is the partition, %p the priority).
ID_COLUMNS = {"jobid", "jobidraw", "%i", "%A", "%F", "array_job_id", "arrayjobid"}
DEPENDENCY_COLUMNS = {"dependency", "%E"}
DURATION_COLUMNS = {"time", "elapsed", "cputime", "runtime", "time_left", "totalcpu", "%M", "%L",
                    "elapsedraw", "cputimeraw", "usercpu", "systemcpu"}
PARTITION_COLUMNS = {"partition", "%P", "partitionname", "partitions"}
CLUSTER_COLUMNS = {"clustername", "cluster"}
SID_COLUMNS = {"allocnode:sid"}
# Set, or not yet, as the scheduler's passes happen to fall (Unknown in one run, a time in the next).
VARYING_COLUMNS = {"accruetime", "accrue_time", "lastschedeval", "last_sched_eval", "scheduler"}


def column_key(name: str) -> str:
    """`state%20` -> `state`; `%.10i` -> `%i`; `NODELIST(REASON)` -> `nodelist(reason)`."""
    name = name.strip()
    if name.startswith("%"):
        return "%" + re.sub(r"^%[.\-]?\d*", "", name)[:1]
    return name.lower().split("%", 1)[0]


class Normaliser:
    def __init__(self, ids: dict[str, str], hosts: tuple[str, ...] = (), dirs: tuple[str, ...] = (),
                 ports: tuple[str, ...] = ()) -> None:
        self.by_id = {str(v): "{" + k + "}" for k, v in ids.items()}
        self.hosts = tuple(h for h in hosts if h)
        self.dirs = tuple(sorted((d for d in dirs if d), key=len, reverse=True))
        self.ports = set(ports)
        self._host = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, self.hosts)) + r")(?![\w-])") \
            if self.hosts else None

    # ---- values ------------------------------------------------------------------

    def job_id(self, value: str) -> str:
        return _LEAD_ID.sub(lambda m: self.by_id.get(m[1], "{id}"), value, count=1)

    def text(self, value: str) -> str:
        """What varies wherever it is: directories, times, host names."""
        for d in self.dirs:
            value = value.replace(d, "{dir}")
        value = _TIME.sub("{time}", value)
        value = _SLURM_FILE.sub(lambda m: self.by_id.get(m[1], "{id}"), value)
        for port in self.ports:  # in an address (reckon's ws://127.0.0.1:PORT)
            value = value.replace(f":{port}", ":{port}")
        if self._host is not None:
            value = self._host.sub("{node}", value)
        return value

    def value(self, column: str, value: str) -> str:
        key = column_key(column)
        if key in ID_COLUMNS:
            value = self.job_id(value)
        elif key in DEPENDENCY_COLUMNS:
            value = _DEP_ID.sub(lambda m: self.by_id.get(m[1], "{id}"), value)
        elif key in DURATION_COLUMNS and _DURATION.match(value):
            value = "{duration}"
        elif key in PARTITION_COLUMNS and value not in ("", "(null)"):
            value = re.sub(r"^[^*,]+", "{partition}", value)  # keeps sinfo's default mark `*`
        elif key in CLUSTER_COLUMNS and value:
            value = "{cluster}"
        elif key in VARYING_COLUMNS:
            value = "{varies}"
        elif key in SID_COLUMNS:
            value = re.sub(r":\d+$", ":{pid}", value)
        elif value in self.ports:
            value = "{port}"
        return self.text(value)

    # ---- outputs -----------------------------------------------------------------

    def output(self, text: str, kind: str, columns: tuple[str, ...] = ()) -> list[str]:
        lines = text.splitlines()
        if kind == "text":
            return [re.sub(r"(?<![\w{])\d+(?![\w}])", lambda m: self.by_id.get(m[0], m[0]), self.text(ln))
                    for ln in lines]
        if kind == "keyvalue":
            return [self.keyvalue_word(w) for ln in lines for w in split_keyvalue(ln)]
        sep = "|" if kind.startswith("parsable") else None
        if kind.endswith("noheader"):
            head, rows = list(columns), lines
            out = []
        else:
            if not lines:
                return []
            head, rows = (lines[0].split(sep) if sep else lines[0].split()), lines[1:]
            out = [lines[0]]
        spans = None
        if sep is None and rows and rows[0].strip() and set(rows[0].strip()) <= {"-", " "}:
            # sacct's rule line under the header gives each column's exact span: an empty field
            # (a step's Account) stays in its column.
            spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rows[0])]
        for row in rows:
            if not row.strip() and sep is None:
                continue
            if sep is None and set(row.strip()) <= {"-", " "}:  # the rule line itself
                out.append(row)
                continue
            if spans is not None:
                fields = [row[a:b].strip() for a, b in spans]
            else:
                fields = row.split(sep) if sep else row.split()
            names = head + [""] * (len(fields) - len(head))
            fields = [self.value(c, f) for c, f in zip(names, fields)]
            out.append("|".join(fields))
        return out

    def keyvalue_word(self, word: str) -> str:
        key, eq, value = word.partition("=")
        if not eq:
            return self.text(word)
        return f"{key}={self.value(key, value)}"


def split_keyvalue(line: str) -> list[str]:
    """scontrol's words: `Key=Value` separated by spaces, a value may hold spaces only as the
    last word of a line (`Command=...`, `Reason=...`); `show config` lines are `Key  = Value`."""
    stripped = line.strip()
    if not stripped:
        return []
    found = re.match(r"^(\S+)\s+=\s(.*)$", stripped)  # show config's `Key    = value`
    if found and "=" not in found[1]:
        return [f"{found[1]}={found[2].strip()}"]
    words: list[str] = []
    for part in stripped.split(" "):
        if "=" in part or not words:
            words.append(part)
        else:
            words[-1] += " " + part
    return words
