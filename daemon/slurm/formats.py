"""Slurm's output formats for reckon's jobs and nodes: pure functions, one module.

squeue, sacct, sinfo and scontrol (their modules beside this one) fetch job and node objects
from the controller (the ``query`` and ``nodes`` ops) and print them here, so what they print
can be compared field by field with a real Slurm's output (tests/slurmref/).  The layouts follow
Slurm 22.05's source: squeue's ``%[.][width]code`` (a width pads and cuts; ``.`` right-justifies),
sacct's fixed columns (``print_fields.c``: right-justified but JobID, a value longer than its
column cut with a ``+``, a space after every column; ``-P``: ``|`` between fields, ``-p``: after
each), scontrol's ``Key=Value`` lines.

How reckon's jobs read as Slurm's: a job is one task on one node (its agent); an array member's
id is ``ARRAY_INDEX`` (``123_4``), its own id the raw id (``%A``, ``JobIDRaw``); FAILED with reason
``timeout`` is TIMEOUT, with reason ``oom`` OUT_OF_MEMORY; the partition is ``reckon`` (or the job's
``partition`` label).  Light: no regular expressions, no dataclasses, no typing at run time.
"""

from __future__ import annotations

import os
import time

PARTITION = "reckon"  # reckon's one partition, the default, until scheduling has partitions (#22)
CLUSTER = "reckon"
NO_ARRAY_INDEX = "4294967294"  # what Slurm prints for the array index of a job not in an array

STATE_CODES = {
    "PENDING": "PD", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA", "TIMEOUT": "TO",
    "OUT_OF_MEMORY": "OOM", "NODE_FAIL": "NF", "REQUEUED": "RQ", "COMPLETING": "CG", "SUSPENDED": "S",
    "PREEMPTED": "PR", "BOOT_FAIL": "BF", "DEADLINE": "DL", "CONFIGURING": "CF",
}
CODE_STATES = {code: state for state, code in STATE_CODES.items()}
# Each Slurm state's reckon state, for a query (the Slurm state is then checked per job).
RECKON_STATE = {"PENDING": "PENDING", "REQUEUED": "PENDING", "RUNNING": "RUNNING", "COMPLETING": "RUNNING",
                "COMPLETED": "COMPLETED", "FAILED": "FAILED", "TIMEOUT": "FAILED", "OUT_OF_MEMORY": "FAILED",
                "NODE_FAIL": "FAILED", "CANCELLED": "CANCELLED"}

from reckon.daemon.slurm.argv import UsageProblem, split_list


# ---- values --------------------------------------------------------------------------------------



def owner_of(job: dict) -> tuple[str, int, int]:
    """(user name, uid, gid) a job is shown as.  A job without an owner comes from token mode, a
    single-user cluster: it is shown as the caller's own (and ``-u``/``--me`` pick it, query.py)."""
    owner = job.get("owner")
    if job.get("user") and owner:
        return job["user"], owner.get("uid", 0), owner.get("gid", 0)
    uid, gid = os.getuid(), os.getgid()
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name, uid, gid
    except (ImportError, KeyError):
        return os.environ.get("USER") or str(uid), uid, gid

def slurm_state(job: dict) -> str:
    """The job's state in Slurm's long name."""
    state = job["state"]
    if state == "FAILED":
        reason = job.get("reason")
        if reason == "timeout":
            return "TIMEOUT"
        if reason == "oom":
            return "OUT_OF_MEMORY"
    return state


def not_eligible(job: dict) -> bool:
    """A job Slurm's scheduler has not looked at: held, waiting on a dependency, or ended before either
    cleared (its EligibleTime Unknown, its time limit still the partition's)."""
    if job["state"] == "PENDING":
        return bool(job.get("held") or dependency(job) != "(null)")
    return job.get("started_at") is None and job["state"] != "RUNNING"


def never_started(job: dict) -> bool:
    """A PENDING job that has not run yet (not a requeued one, which Slurm lists as it ran)."""
    return (job["state"] == "PENDING" and job.get("started_at") is None and not job.get("requeues")
            and job.get("attempt", 1) == 1)


def job_id(job: dict) -> str:
    """``%i`` / JobID: ``ARRAY_INDEX`` for an array member, else the id."""
    if job.get("array_id") is not None:
        return f"{job['array_id']}_{job['array_index']}"
    return job["id"]


def label(job: dict, key: str) -> str | None:
    return (job.get("labels") or {}).get(key)


def partition(job: dict) -> str:
    """The job's partition: its own (issue #22), else its label (a cluster without partitions), else reckon's."""
    return job.get("partition") or label(job, "partition") or PARTITION


def exit_code(job: dict) -> str:
    """sacct's ``ExitCode``: ``code:signal``; an OOM kill is Slurm's ``0:125`` whatever the shell
    around the killed process exited with."""
    if slurm_state(job) == "OUT_OF_MEMORY":
        return "0:125"
    return f"{job.get('exit_code') or 0}:{job.get('signal') or 0}"


def elapsed_seconds(job: dict, now: float) -> int:
    started = job.get("started_at")
    if started is None or job["state"] == "PENDING":
        return 0
    end = job.get("finished_at") if job["state"] != "RUNNING" else None
    return max(0, int((end if end is not None else now) - started))


def day_clock(seconds: int) -> tuple[int, int, int, int]:
    """Whole ``seconds`` as (days, hours, minutes, seconds): what Slurm's time formats print."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def squeue_time(seconds: float | None) -> str:
    """squeue's TIME and TIME_LIMIT: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    if seconds is None:
        return "UNLIMITED"
    days, hours, minutes, secs = day_clock(int(seconds))
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def sacct_time(seconds: float | None) -> str:
    """sacct's Elapsed and Timelimit (secs2time_str): ``HH:MM:SS``, ``D-HH:MM:SS``."""
    if seconds is None:
        return "UNLIMITED"
    days, hours, minutes, secs = day_clock(int(seconds))
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def date(when: float | None) -> str:
    """Slurm's time stamps (slurm_make_time_str): local ``YYYY-MM-DDTHH:MM:SS``; unset: Unknown."""
    if when is None:
        return "Unknown"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))


def memory(mem: int | None, none: str = "0", exact: bool = False) -> str:
    """Bytes as Slurm shows megabytes (convert_num_unit from M): ``500M``, ``4G``, ``1.50G``; ``exact``
    (TRES strings, CONVERT_NUM_UNIT_EXACT): a larger unit only where it divides, ``4000M``."""
    if not mem:
        return none
    value, units = mem / (1 << 20), "MGTP"
    unit = 0
    while value >= 1024 and unit < len(units) - 1 and (not exact or value % 1024 == 0):
        value /= 1024
        unit += 1
    return f"{int(value)}{units[unit]}" if value == int(value) else f"{value:.2f}{units[unit]}"


def gres(job: dict) -> str:
    """squeue's TRES_PER_NODE / %b: ``gres:gpu:2,gres:name:1``; none: N/A."""
    parts = [f"gres:gpu:{job['gpus']}"] if job.get("gpus") else []
    parts += [f"gres:{name}:{count}" for name, count in job.get("gres") or ()]
    return ",".join(parts) or "N/A"


def pending_reason(job: dict) -> str:
    """Slurm's reason for a job: why a PENDING one waits (by its own record), else None."""
    state = job["state"]
    if state == "PENDING":
        if job.get("pending_code"):  # the controller's (common.mark_pending): what `reckon show` says
            return job["pending_code"]
        # A controller older than the ``pending`` op: the reason as the job's record suggests it.
        if job.get("held"):
            return "JobHeldUser"
        if job.get("after") or job.get("after_any") or job.get("after_not_ok") or job.get("singleton"):
            return "Dependency"
        if job.get("_partition_reason"):
            return job["_partition_reason"]
        if job.get("_array_limited"):
            return "JobArrayTaskLimit"
        if waits_to_begin(job):
            return "BeginTime"
        return "Resources" if not job.get("requeues") else "BeginTime"
    if state == "CANCELLED" and job.get("held"):  # cancelled while held: Slurm keeps the reason
        return "JobHeldUser"
    if state == "CANCELLED" and job.get("reason") and "dependency" in job["reason"]:
        return "DependencyNeverSatisfied"
    return {"FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit", "OUT_OF_MEMORY": "OutOfMemory"}.get(
        slurm_state(job), "None")


def waits_to_begin(job: dict) -> bool:
    """A PENDING job whose --begin time is still ahead (by this machine's clock)."""
    begin = job.get("begin")
    return job["state"] == "PENDING" and begin is not None and begin > time.time()


def eligible_time(job: dict) -> float | None:
    """When the job may start as far as time goes: its --begin, else its submission."""
    begin, submitted = job.get("begin"), job.get("submitted_at")
    if begin is None or submitted is None:
        return submitted
    return max(begin, submitted)


def command_name(job: dict) -> str:
    """The job's Command: the script file sbatch was given; (null) for --wrap and a script on stdin,
    whose display name sbatch sets to ``sbatch``."""
    command = job.get("command") or []
    if not command or (job.get("script") and command[0] == "sbatch"):
        return "(null)"
    return command[0]


def dependency(job: dict) -> str:
    """squeue's %E, scontrol's Dependency: what a PENDING job still waits on, ``afterok:N(unfulfilled)``;
    Slurm drops a dependency once it is met, so a job that started shows (null)."""
    if job["state"] != "PENDING":
        return "(null)"
    parts = [f"{kind}:{dep}(unfulfilled)" for kind, key in (("afterok", "after"), ("afterany", "after_any"),
                                                            ("afternotok", "after_not_ok"))
             for dep in job.get(key) or ()]
    if job.get("singleton"):
        parts.append("singleton(unfulfilled)")
    return ",".join(parts) or "(null)"


def mark_partition_reasons(jobs: list[dict], partitions: list[dict]) -> None:
    """Mark the PENDING jobs whose partition starts nothing now with Slurm's reason (PartitionDown,
    PartitionInactive; a removed partition reads as down), from the ``partitions`` op's answer."""
    states = {p["name"]: p["state"] for p in partitions}
    for job in jobs:
        if job["state"] == "PENDING" and job.get("partition"):
            state = states.get(job["partition"], "DOWN")
            if state in ("DOWN", "INACTIVE"):
                job["_partition_reason"] = "PartitionDown" if state == "DOWN" else "PartitionInactive"


def mark_array_limits(jobs: list[dict]) -> list[dict]:
    """Mark the PENDING array members that the array's ``%`` limit holds back (as many members running
    as it allows): Slurm's reason JobArrayTaskLimit.  Counts the running members among ``jobs``, so the
    caller lists the whole array (an array's id names all its members)."""
    running: dict[str, int] = {}
    for job in jobs:
        if job.get("array_id") is not None and job["state"] == "RUNNING":
            running[job["array_id"]] = running.get(job["array_id"], 0) + 1
    out = []
    for job in jobs:
        limit = job.get("array_max")
        if (limit and job["state"] == "PENDING" and job.get("array_id") is not None
                and running.get(job["array_id"], 0) >= limit):
            job = {**job, "_array_limited": True}
        out.append(job)
    return out


def nodelist(job: dict) -> str:
    return job.get("agent") or ""


def compress_indices(indices: list[int]) -> str:
    """[1, 2, 3, 5] -> ``1-3,5`` (Slurm's array task string)."""
    out: list[str] = []
    ordered = sorted(set(indices))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def array_task_str(indices: list[int]) -> str:
    """A pending array's tasks as Slurm prints them (xlate_array_task_str): ``FIRST-LAST:STEP`` when
    the indices are evenly spaced (more than 5 of them, over a span above 10, not adjacent), else
    ``1-3,5`` cut to 60 characters and ``...``."""
    ordered = sorted(set(indices))
    if len(ordered) > 5 and ordered[-1] - ordered[0] > 10 and ordered[1] != ordered[0] + 1:
        step = ordered[1] - ordered[0]
        if all(b - a == step for a, b in zip(ordered, ordered[1:])):
            return f"{ordered[0]}-{ordered[-1]}:{step}"
    text = compress_indices(ordered)
    return text[:60] + "..." if len(text) > 61 else text


# ---- squeue --------------------------------------------------------------------------------------

SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
# code -> (header, value of (row, now)); a row is a job object, or a collapsed pending array
SQUEUE_HEADERS = {
    "a": "ACCOUNT", "A": "JOBID", "b": "TRES_PER_NODE", "c": "MIN_CPUS", "C": "CPUS", "D": "NODES",
    "e": "END_TIME", "E": "DEPENDENCY", "F": "ARRAY_JOB_ID", "g": "GROUP", "i": "JOBID", "j": "NAME",
    "k": "COMMENT", "K": "ARRAY_TASK_ID", "l": "TIME_LIMIT", "L": "TIME_LEFT", "m": "MIN_MEMORY", "M": "TIME",
    "N": "NODELIST", "o": "COMMAND", "P": "PARTITION", "q": "QOS", "Q": "PRIORITY", "r": "REASON",
    "R": "NODELIST(REASON)", "S": "START_TIME", "t": "ST", "T": "STATE", "u": "USER", "U": "UID",
    "v": "RESERVATION", "V": "SUBMIT_TIME", "w": "WCKEY", "y": "NICE", "Z": "WORK_DIR", "f": "FEATURES",
    "d": "MIN_TMP_DISK", "h": "OVER_SUBSCRIBE", "n": "REQ_NODES", "p": "PRIORITY", "s": "", "x": "EXC_NODES",
    "z": "S:C:T", "B": "EXEC_HOST", "G": "GROUP", "H": "SOCKETS_PER_NODE", "I": "CORES_PER_SOCKET",
    "J": "THREADS_PER_CORE", "O": "CONTIGUOUS", "W": "LICENSES", "X": "CORE_SPEC", "Y": "SCHEDNODES",
}
# squeue -o %all (opts.c): every letter, lower case then upper, `|` between, no widths
SQUEUE_ALL = "|".join(f"%{c}" for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# the fields reckon has no notion of: what Slurm prints for a job that does not set them
SQUEUE_CONSTANT = {"d": "0", "h": "OK", "n": "", "s": "", "x": "", "z": "*:*:*", "H": "*", "I": "*", "J": "*",
                   "O": "0", "W": "(null)", "X": "N/A", "Y": "(null)"}
# squeue -O names (lower case) -> the % code they print
SQUEUE_LONG = {
    "account": "a", "jobid": "i", "jobarrayid": "i", "arrayjobid": "F", "arraytaskid": "K", "name": "j",
    "state": "T", "statecompact": "t", "username": "u", "userid": "U", "timeused": "M", "timelimit": "l",
    "timeleft": "L", "numnodes": "D", "numcpus": "C", "mincpus": "c", "minmemory": "m", "nodelist": "N",
    "reasonlist": "R", "reason": "r", "partition": "P", "workdir": "Z", "command": "o", "starttime": "S",
    "submittime": "V", "endtime": "e", "comment": "k", "qos": "q", "priority": "Q", "dependency": "E",
    "tres-per-node": "b", "wckey": "w", "nice": "y", "feature": "f", "reservation": "v", "group": "g",
}


def parse_squeue_format(fmt: str) -> list[tuple[str, str | None, int, bool]]:
    """``%.18i %j|x`` -> [(literal text before, code or None, width (0: as is), right-justified)]."""
    out: list[tuple[str, str | None, int, bool]] = []
    literal = ""
    fmt = fmt.replace("%all", SQUEUE_ALL)  # Slurm replaces it wherever it stands, before parsing
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            literal += ch
            i += 1
            continue
        i += 1
        if i < len(fmt) and fmt[i] == "%":
            literal += "%"
            i += 1
            continue
        right = False
        if i < len(fmt) and fmt[i] == ".":
            right, i = True, i + 1
        start = i
        while i < len(fmt) and fmt[i].isdigit():
            i += 1
        width = int(fmt[start:i]) if i > start else 0
        if i >= len(fmt):
            raise UsageProblem(f"incomplete format field in '{fmt}'")
        code = fmt[i]
        i += 1
        if code not in SQUEUE_HEADERS:
            raise UsageProblem(f"invalid squeue format field '%{code}' (reckon prints "
                               f"{''.join(sorted(SQUEUE_HEADERS))})")
        out.append((literal, code, width, right))
        literal = ""
    if literal:
        out.append((literal, None, 0, False))
    return out


def parse_squeue_long_format(fmt: str) -> list[tuple[str, str | None, int, bool]]:
    """squeue -O ``name[:[.]size][,...]``: each field 20 wide (left) unless sized, then a space."""
    out: list[tuple[str, str | None, int, bool]] = []
    for part in fmt.split(","):
        name, _, size = part.strip().partition(":")
        code = SQUEUE_LONG.get(name.lower())
        if code is None:
            raise UsageProblem(f"invalid squeue -O field '{name}'")
        right = size.startswith(".")
        size = size.lstrip(".")
        if size and not size.isdigit():
            raise UsageProblem(f"invalid size '{size}' of squeue -O field '{name}'")
        out.append(("", code, int(size) if size else 20, right))
        out.append((" ", None, 0, False))
    return out


def squeue_value(code: str, row: dict, now: float) -> str:
    job = row
    state = slurm_state(job)
    if code in SQUEUE_CONSTANT:
        return SQUEUE_CONSTANT[code]
    if code == "i":
        return row.get("_slurm_id") or job_id(job)
    if code == "A":
        return job["id"]
    if code == "F":
        return job["array_id"] if job.get("array_id") is not None else job["id"]
    if code == "K":
        if row.get("_slurm_tasks"):
            return row["_slurm_tasks"]
        return str(job["array_index"]) if job.get("array_id") is not None else "N/A"
    if code == "j":
        return job["name"]
    if code == "t":
        return STATE_CODES.get(state, state)
    if code == "T":
        return state
    if code == "u":
        return owner_of(job)[0]
    if code == "U":
        return str(owner_of(job)[1])
    if code == "g":  # Slurm: the group's name (reckon's owner has a gid only: the user's group)
        return owner_of(job)[0]
    if code == "G":
        return str(owner_of(job)[2])
    if code == "B":  # Slurm: the batch host, n/a before the job starts
        return nodelist(job) if job["state"] != "PENDING" and nodelist(job) else "n/a"
    if code == "p":  # Slurm's normalised priority; reckon has none (first come first served): 1, held 0
        return f"{0.0 if job.get('held') else 1.0:.14f}"
    if code == "M":
        return squeue_time(elapsed_seconds(job, now))
    if code == "l":
        return squeue_time(job.get("time_limit"))
    if code == "L":
        limit = job.get("time_limit")
        if limit is None:
            return "UNLIMITED"
        return squeue_time(max(0, limit - elapsed_seconds(job, now)))
    if code in ("D",):
        return "1"
    if code in ("C", "c"):
        return str(job.get("cpus") or job.get("slots") or 1)
    if code == "m":
        return memory(job.get("mem"))
    if code == "b":
        return gres(job)
    if code == "N":
        return nodelist(job) if job["state"] not in ("PENDING",) else ""
    if code == "R":  # Slurm: the reason of a pending or failed job, else its nodes
        if job["state"] in ("PENDING", "FAILED"):
            return f"({pending_reason(job)})"
        return nodelist(job)
    if code == "r":
        return pending_reason(job)
    if code == "P":
        return partition(job)
    if code == "Z":
        return job.get("cwd") or ""
    if code == "o":
        return command_name(job)
    if code == "S":
        if job.get("started_at") is None and waits_to_begin(job):
            return date(job["begin"])  # Slurm: a pending job's expected start, its begin time at the earliest
        return date(job.get("started_at")) if job.get("started_at") is not None else "N/A"
    if code == "V":
        return date(job.get("submitted_at"))
    if code == "e":
        if job["state"] in ("PENDING", "RUNNING"):
            limit, started = job.get("time_limit"), job.get("started_at")
            if started is None or job["state"] == "PENDING":
                return "N/A"
            return date(started + limit) if limit is not None else "NONE"
        return date(job.get("finished_at") or job.get("submitted_at"))
    if code == "E":
        return dependency(job)
    if code in ("a", "k", "q", "w", "v", "f"):
        key = {"a": "account", "k": "comment", "q": "qos", "w": "wckey", "v": "reservation", "f": "constraint"}[code]
        value = label(job, key)
        return value if value is not None else ("normal" if code == "q" else "(null)")
    if code == "Q":  # the controller's priority (common.mark_pending), else 1 (first come first served)
        if job.get("held"):
            return "0"
        return str(job["priority"]) if job.get("priority") is not None else "1"
    if code == "y":
        return "0"
    raise AssertionError(code)  # parse_squeue_format admits only the codes above


def array_rows(jobs: list[dict], expand: bool) -> list[dict]:
    """The jobs as squeue and sacct list them: without ``expand`` (``-r``), an array's PENDING members on one
    row ``123_[1-3,5%2]``, where its first pending member was."""
    if expand:
        return jobs
    pending: dict[str, list[dict]] = {}
    for job in jobs:
        # Slurm splits a member off the array's pending record once it starts (or is held)
        if (job.get("array_id") is not None and job["state"] == "PENDING" and not job.get("held")
                and job.get("started_at") is None and job.get("attempt", 1) == 1):
            pending.setdefault(job["array_id"], []).append(job)
    rows: list[dict] = []
    for job in jobs:
        group = pending.get(job.get("array_id")) if job.get("array_id") is not None else None
        if group is None or job not in group or len(group) < 2:
            rows.append(job)
            continue
        if job is not group[0]:
            continue
        tasks = array_task_str([m["array_index"] for m in group])
        if job.get("array_max"):
            tasks += f"%{job['array_max']}"
        rows.append({**job, "_slurm_id": f"{job['array_id']}_[{tasks}]", "_slurm_tasks": tasks})
    return rows


def squeue_lines(rows: list[dict], fields: list[tuple[str, str | None, int, bool]], now: float,
                 header: bool = True) -> list[str]:
    def cell(text: str, width: int, right: bool) -> str:
        if not width:
            return text
        text = text[:width]
        return text.rjust(width) if right else text.ljust(width)

    lines = []
    if header:
        lines.append("".join(lit + (cell(SQUEUE_HEADERS[code], width, right) if code else "")
                             for lit, code, width, right in fields))
    for row in rows:
        lines.append("".join(lit + (cell(squeue_value(code, row, now), width, right) if code else "")
                             for lit, code, width, right in fields))
    return lines


# ---- what a query asks for -------------------------------------------------------------------
# squeue and sacct ask the ``query`` op only for the job-object keys their columns read (its
# ``fields``; issue #21's polling cost: Parsl's ``%i %t`` needs 9 of 50).  Each code's and
# field's keys are what its value above reads, through the helpers it calls; a new read goes
# here too (tests/slurm/test_query_fields.py renders every column from a selection and from the
# whole object, over many job shapes, and records what each reads).

STATE_KEYS = ("state", "reason")  # slurm_state
ELAPSED_KEYS = ("state", "started_at", "finished_at")
DEPENDS_KEYS = ("state", "after", "after_any", "after_not_ok", "singleton")
# pending_reason (and _array_limited: the rows'; partition: PartitionDown, mark_partition_reasons)
REASON_KEYS = (*STATE_KEYS, *DEPENDS_KEYS, "held", "requeues", "partition", "begin")
OWNER_KEYS = ("user", "owner")
# What the commands read of every job whatever the columns: the state filter, array_rows and
# mark_array_limits, never_started (sacct's window), and the labels of -p/-A (partition, label).
ROW_FIELDS = ("id", *STATE_KEYS, "array_id", "array_index", "array_max", "held", "started_at", "attempt", "requeues")
FILTER_FIELDS = ("labels", "partition")
SQUEUE_FIELDS = {
    "i": ("id", "array_id", "array_index"), "A": ("id",), "F": ("id", "array_id"), "K": ("array_id", "array_index"),
    "j": ("name",), "t": STATE_KEYS, "T": STATE_KEYS,
    "u": OWNER_KEYS, "U": OWNER_KEYS, "g": OWNER_KEYS, "G": OWNER_KEYS,
    "B": ("state", "agent"), "p": ("held",), "Q": ("held",), "M": ELAPSED_KEYS, "l": ("time_limit",),
    "L": ("time_limit", *ELAPSED_KEYS), "D": (), "C": ("cpus", "slots"), "c": ("cpus", "slots"), "m": ("mem",),
    "b": ("gpus", "gres"), "N": ("state", "agent"), "R": (*REASON_KEYS, "agent"), "r": REASON_KEYS,
    "P": ("labels", "partition"),
    "Z": ("cwd",), "o": ("command", "script"), "S": ("started_at", "state", "begin"), "V": ("submitted_at",),
    "e": (*ELAPSED_KEYS, "time_limit", "submitted_at"), "E": DEPENDS_KEYS, "a": ("labels",), "k": ("labels",),
    "q": ("labels",), "w": ("labels",), "v": ("labels",), "f": ("labels",), "y": (),
}


def squeue_query_fields(fields: list, filtered: bool = False) -> list[str]:
    """The job-object keys squeue's ``fields`` (parse_squeue_format's) read; ``filtered``: -p or -A."""
    names = dict.fromkeys(ROW_FIELDS + (FILTER_FIELDS if filtered else ()))
    for _, code, _, _ in fields:
        if code is not None and code not in SQUEUE_CONSTANT:
            names.update(dict.fromkeys(SQUEUE_FIELDS[code]))
    return list(names)
