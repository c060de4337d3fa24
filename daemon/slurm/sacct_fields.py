"""sacct's fields for reckon's jobs: the columns, each job's rows (the job, its ``.batch`` and
``.extern`` steps), and the job-object keys each field reads (the ``query`` op's ``fields``).

Layout as Slurm 22.05's ``print_fields.c`` (see daemon/slurm/formats.py, whose helpers this uses).
The accounting fields (TotalCPU, UserCPU, SystemCPU, MaxRSS, CPUTime) come from the usage the
job's supervisor measured (cgroup, else getrusage): on the job's line and its ``.batch`` step, as
reckon's job is its batch step; the ``.extern`` step used nothing.
"""

from __future__ import annotations

from reckon.daemon.slurm.argv import UsageProblem, split_list
from reckon.daemon.slurm.formats import (CLUSTER, DEPENDS_KEYS, ELAPSED_KEYS, FILTER_FIELDS, OWNER_KEYS, REASON_KEYS,
                                         ROW_FIELDS, STATE_KEYS, date, day_clock, elapsed_seconds, eligible_time,
                                         exit_code, job_id, label, memory, nodelist, not_eligible, owner_of,
                                         partition, pending_reason, sacct_time, slurm_state)

SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
# field (as Slurm spells it) -> default width (negative: left-justified), from sacct.c's table
SACCT_FIELDS = {
    "Account": 10, "AllocCPUS": 10, "AllocNodes": 10, "AllocTRES": 10, "Comment": 14, "Constraints": 19,
    "Elapsed": 10, "ElapsedRaw": 10, "Eligible": 19, "End": 19, "ExitCode": 8, "Group": 9, "GID": 6,
    "JobID": -12, "JobIDRaw": -12, "JobName": 10, "NCPUS": 10, "NNodes": 8, "NodeList": 15, "NTasks": 8,
    "Partition": 10, "QOS": 10, "Reason": 22, "ReqCPUS": 8, "ReqMem": 10, "ReqNodes": 8, "ReqTRES": 10,
    "Reservation": 20, "Restarts": 8, "Start": 19, "State": 10, "StdErr": 20, "StdOut": 20, "Submit": 19,
    "Timelimit": 10, "TimelimitRaw": 10, "UID": 6, "User": 9, "WCKey": 10, "WorkDir": 20, "Cluster": 10,
    "DerivedExitCode": 15, "TotalCPU": 10, "UserCPU": 10, "SystemCPU": 10, "MaxRSS": 10, "CPUTime": 10,
    "CPUTimeRAW": 10,
}
SACCT_NAMES = {name.lower(): name for name in SACCT_FIELDS}


def parse_sacct_format(fmt: str) -> list[tuple[str, int]]:
    """``jobid,state%20`` -> [('JobID', -12), ('State', 20)]: names in any case, ``%N`` sets the width
    (a left-justified field stays left)."""
    out = []
    for part in split_list(fmt):
        name, _, width = part.partition("%")
        canonical = SACCT_NAMES.get(name.lower())
        if canonical is None:
            raise UsageProblem(f"Invalid field requested: \"{name}\"")
        size = SACCT_FIELDS[canonical]
        if width:
            if not width.lstrip("-").isdigit() or int(width) == 0:
                raise UsageProblem(f"invalid width '{width}' of sacct field {canonical}")
            size = -abs(int(width)) if size < 0 or width.startswith("-") else int(width)
        out.append((canonical, size))
    return out


def sacct_rows(job: dict, allocations: bool, now: float) -> list[dict]:
    """The job's line and, unless ``allocations`` (-X), its steps as Slurm records them for a batch
    job that started: ``.batch`` (the script) and ``.extern``."""
    rows = [{"job": job, "step": None}]
    if allocations or job.get("started_at") is None:
        return rows
    rows.append({"job": job, "step": "batch"})
    rows.append({"job": job, "step": "extern"})
    return rows


def _step_state(job: dict) -> tuple[str, str]:
    """(state, exit code) of a job's ``.batch`` step."""
    state = slurm_state(job)
    if state == "TIMEOUT":
        return "CANCELLED", "0:15"
    if state == "CANCELLED":
        return "CANCELLED", exit_code(job) if job.get("signal") else "0:15"
    if state == "FAILED" and job.get("signal"):  # killed by a signal: Slurm records the step CANCELLED
        return "CANCELLED", exit_code(job)
    return state, exit_code(job)


def sacct_value(name: str, row: dict, now: float) -> str | None:
    """One field of one sacct line (None: unset, printed as blank)."""
    job, step = row["job"], row["step"]
    state = slurm_state(job)
    if name in ("JobID", "JobIDRaw"):
        base = (job.get("_slurm_id") or job_id(job)) if name == "JobID" else job["id"]
        return base if step is None else f"{base}.{step}"
    if name == "JobName":
        return job["name"] if step is None else step
    if name == "State":
        if step == "extern":
            return "RUNNING" if job["state"] == "RUNNING" else "COMPLETED"
        if step == "batch":
            return _step_state(job)[0]
        if state == "CANCELLED":
            owner = job.get("owner") or {}
            return f"CANCELLED by {owner.get('uid', 0)}"
        return state
    if name == "ExitCode":
        if step == "extern":
            return "0:0"
        if step == "batch":
            return _step_state(job)[1]
        if state in ("CANCELLED", "TIMEOUT"):  # Slurm: the job line 0:0, the signal on .batch
            return "0:0"
        return exit_code(job)
    if name == "DerivedExitCode":  # the highest exit of the job's srun steps: reckon's jobs have none
        return "0:0" if step is None else None
    if name in ("Elapsed", "ElapsedRaw"):
        seconds = elapsed_seconds(job, now)
        return sacct_time(seconds) if name == "Elapsed" else str(seconds)
    if name == "Start":  # a job that ended before it started: None (Slurm's start time 0)
        if job.get("started_at") is None and job["state"] not in ("PENDING", "RUNNING"):
            return "None"
        return date(job.get("started_at"))
    if name == "End":
        return date(job.get("finished_at")) if job["state"] not in ("PENDING", "RUNNING") else "Unknown"
    if name == "Submit":
        return date(job.get("submitted_at"))
    if name == "Eligible":
        return date(eligible_time(job))
    if name == "NodeList":
        return nodelist(job) or "None assigned"
    if name in ("AllocCPUS", "NCPUS", "ReqCPUS"):
        # Slurm: the CPUs asked for until it starts (NCPUS too); AllocCPUS 0 only once it ended unstarted
        return str(job.get("cpus") or 1)
    if name in ("NNodes", "AllocNodes", "ReqNodes", "NTasks"):
        if name == "NTasks":
            return "1" if step is not None else None
        return "1" if name == "ReqNodes" or job.get("started_at") is not None else "0"
    if name == "ReqMem":
        return memory(job.get("mem"), none="0") if step is None else None
    if name in ("AllocTRES", "ReqTRES"):
        parts = [f"cpu={job.get('cpus') or 1}"]
        if job.get("mem"):
            parts.append(f"mem={memory(job['mem'])}")
        parts.append("node=1")
        if job.get("gpus"):
            parts.append(f"gres/gpu={job['gpus']}")
        return ",".join(parts) if name == "ReqTRES" or job.get("started_at") is not None else None
    if name == "User":
        return owner_of(job)[0] if step is None else None
    if name in ("UID", "GID"):
        return str(owner_of(job)[1 if name == "UID" else 2]) if step is None else None
    if name == "Group":
        return None
    if name == "Partition":
        return partition(job) if step is None else None
    if name in ("Account", "Comment", "WCKey", "QOS", "Reservation", "Constraints"):
        key = {"Account": "account", "Comment": "comment", "WCKey": "wckey", "QOS": "qos",
               "Reservation": "reservation", "Constraints": "constraint"}[name]
        value = label(job, key)
        if name == "QOS" and value is None and step is None:
            return "normal"
        return value if (step is None or name == "Account") else None
    if name in ("Timelimit", "TimelimitRaw"):
        if step is not None:
            return None
        limit = job.get("time_limit")
        if limit is None and job.get("started_at") is None and not_eligible(job):
            return "Partition_Limit"  # Slurm fills in the partition's limit when the job starts
        if name == "TimelimitRaw":
            return str(int(limit // 60)) if limit is not None else "UNLIMITED"
        return sacct_time(limit)
    if name == "Reason":
        return pending_reason(job) if step is None else None
    if name == "Restarts":
        return str(job.get("requeues") or 0) if step is None else None
    if name in ("StdOut", "StdErr"):
        return job.get("stdout" if name == "StdOut" else "stderr") if step is None else None
    if name == "WorkDir":
        return job.get("cwd") if step is None else None
    if name in ("TotalCPU", "UserCPU", "SystemCPU"):
        usage = _usage(job) if step != "extern" else None
        if usage is None:
            return "00:00:00"
        seconds = {"TotalCPU": usage["cpu_user"] + usage["cpu_system"], "UserCPU": usage["cpu_user"],
                   "SystemCPU": usage["cpu_system"]}[name]
        return cpu_time(seconds)
    if name == "MaxRSS":  # a step's (the job's line has none, as Slurm's)
        if step is None:
            return None
        usage = _usage(job) if step == "batch" else None
        return _bytes(usage["max_rss"] if usage is not None and usage.get("max_rss") else 0)
    if name in ("CPUTime", "CPUTimeRAW"):  # elapsed times the CPUs allocated
        seconds = elapsed_seconds(job, now) * (job.get("cpus") or 1)
        return sacct_time(seconds) if name == "CPUTime" else str(seconds)
    if name == "Cluster":
        return CLUSTER
    raise AssertionError(name)  # parse_sacct_format admits only the fields above


def _usage(job: dict) -> dict | None:
    """What the job's last attempt used, once it ended (a running or requeued job's is an earlier
    attempt's: Slurm shows nothing until a step ends)."""
    if job["state"] in ("PENDING", "RUNNING"):
        return None
    return job.get("usage")


def cpu_time(seconds: float) -> str:
    """sacct's TotalCPU, UserCPU and SystemCPU (print.c's _elapsed_time): ``MM:SS.mmm`` under an
    hour, ``HH:MM:SS`` under a day, ``D-HH:MM:SS``; a whole number of seconds ``00:MM:SS``."""
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1_000_000)) // 1000
    days, hours, minutes, secs = day_clock(whole)
    if days or hours:  # as Elapsed then
        return sacct_time(whole)
    if millis:
        return f"{minutes:02d}:{secs:02d}.{millis:03d}"
    return f"00:{minutes:02d}:{secs:02d}"


def _bytes(count: int) -> str:
    """MaxRSS as sacct prints bytes (convert_num_unit, CONVERT_NUM_UNIT_EXACT): a larger unit only
    while it divides, ``2612K``, ``64M``; ``0`` for nothing measured."""
    value, unit = int(count), 0
    while value and value % 1024 == 0 and unit < 5:
        value //= 1024
        unit += 1
    return f"{value}{' KMGTP'[unit].strip()}"


def sacct_lines(rows: list[dict], fields: list[tuple[str, int]], now: float, *, header: bool,
                parsable: str | None) -> list[str]:
    """``parsable``: None (columns), ``"|"`` after each field (-p) or ``"|2"`` between fields (-P)."""
    def columns(values: list[str | None]) -> str:
        out = []
        for (_, size), value in zip(fields, values):
            width = abs(size)
            if value is None:
                value = " "
            elif len(value) > width:
                value = value[:width - 1] + "+"
            out.append((value.ljust(width) if size < 0 else value.rjust(width)) + " ")
        return "".join(out)

    def joined(values: list[str | None]) -> str:
        text = "|".join("" if v is None else v for v in values)
        return text + "|" if parsable == "|" else text

    lines = []
    render = columns if parsable is None else joined
    if header:
        lines.append(render([name for name, _ in fields]))
        if parsable is None:
            lines.append("".join("-" * abs(size) + " " for _, size in fields))
    for row in rows:
        lines.append(render([sacct_value(name, row, now) for name, _ in fields]))
    return lines



_EXIT = (*STATE_KEYS, "exit_code", "signal")
SACCT_KEYS = {
    "JobID": ("id", "array_id", "array_index"), "JobIDRaw": ("id",), "JobName": ("name",),
    "State": (*_EXIT, "owner"), "ExitCode": _EXIT, "DerivedExitCode": (), "Elapsed": ELAPSED_KEYS,
    "ElapsedRaw": ELAPSED_KEYS, "Start": ("state", "started_at"), "End": ("state", "finished_at"),
    "Submit": ("submitted_at",), "Eligible": ("submitted_at", "begin"), "NodeList": ("agent",), "AllocCPUS": ("cpus",),
    "NCPUS": ("cpus",), "ReqCPUS": ("cpus",), "NNodes": ("started_at",), "AllocNodes": ("started_at",),
    "ReqNodes": ("started_at",), "NTasks": (), "ReqMem": ("mem",), "AllocTRES": ("cpus", "mem", "gpus", "started_at"),
    "ReqTRES": ("cpus", "mem", "gpus", "started_at"),
    "User": OWNER_KEYS, "UID": OWNER_KEYS, "GID": OWNER_KEYS, "Group": (),
    "Partition": ("labels", "partition"), "Account": ("labels",), "Comment": ("labels",), "WCKey": ("labels",),
    "QOS": ("labels",), "Reservation": ("labels",), "Constraints": ("labels",),
    "Timelimit": ("time_limit", "started_at", *DEPENDS_KEYS, "held"),
    "TimelimitRaw": ("time_limit", "started_at", *DEPENDS_KEYS, "held"), "Reason": REASON_KEYS,
    "Restarts": ("requeues",), "StdOut": ("stdout",), "StdErr": ("stderr",), "WorkDir": ("cwd",), "Cluster": (),
    "TotalCPU": ("state", "usage"), "UserCPU": ("state", "usage"), "SystemCPU": ("state", "usage"),
    "MaxRSS": ("state", "usage"), "CPUTime": (*ELAPSED_KEYS, "cpus"), "CPUTimeRAW": (*ELAPSED_KEYS, "cpus"),
}


def sacct_query_fields(fields: list, filtered: bool = False) -> list[str]:
    """The job-object keys sacct's ``fields`` (parse_sacct_format's) read; ``filtered``: -r or -A."""
    names = dict.fromkeys(ROW_FIELDS + (FILTER_FIELDS if filtered else ()))
    for name, _ in fields:
        names.update(dict.fromkeys(SACCT_KEYS[name]))
    return list(names)
