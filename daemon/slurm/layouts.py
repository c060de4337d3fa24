"""sinfo's and ``scontrol show``'s layouts of reckon's nodes, partition, jobs and configuration.

Pure, like formats.py (jobs' values and squeue's codes) and sacct_fields.py, which it builds on: what
reckon's nodes and jobs read as in Slurm's words (reckon has one partition, ``reckon``, the
default, until #22).
"""

from __future__ import annotations

from reckon.daemon.slurm.argv import UsageProblem
from reckon.daemon.slurm.formats import (CLUSTER, owner_of, PARTITION, array_rows, command_name, compress_indices, date,
                                         dependency, elapsed_seconds, exit_code, gres, label, mark_array_limits,
                                         memory, nodelist, partition, pending_reason, sacct_time, slurm_state,
                                         mark_partition_reasons, eligible_time, waits_to_begin)


def hostlist(names: list[str]) -> str:
    """Slurm's compressed host list: ``a1,a2,a3,b`` -> ``a[1-3],b``."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    order: list[str] = []
    for name in names:
        k = len(name)
        while k > 0 and name[k - 1].isdigit():
            k -= 1
        digits = name[k:]
        if not digits or (len(digits) > 1 and digits[0] == "0"):
            plain.append(name)
            order.append(name)
            continue
        prefix = name[:k]
        if prefix not in groups:
            groups[prefix] = []
            order.append("\0" + prefix)
        groups[prefix].append(int(digits))
    out = []
    for entry in order:
        if not entry.startswith("\0"):
            out.append(entry)
            continue
        prefix = entry[1:]
        numbers = groups[prefix]
        out.append(f"{prefix}{numbers[0]}" if len(set(numbers)) == 1 else f"{prefix}[{compress_indices(numbers)}]")
    return ",".join(out)


# ---- sinfo ---------------------------------------------------------------------------------------

SINFO_DEFAULT = "%#P %.5a %.10l %.6D %.6t %N"
SINFO_NODES_DEFAULT = "%#N %.6D %#P %6t"
SINFO_HEADERS = {"P": "PARTITION", "a": "AVAIL", "l": "TIMELIMIT", "D": "NODES", "t": "STATE", "T": "STATE",
                 "N": "NODELIST", "C": "CPUS(A/I/O/T)", "c": "CPUS", "m": "MEMORY", "G": "GRES", "n": "HOSTNAMES",
                 "R": "PARTITION", "e": "FREE_MEM", "O": "CPU_LOAD", "z": "S:C:T"}
# reckon's node state -> (sinfo's compact, long)
NODE_STATES = {"IDLE": ("idle", "idle"), "MIXED": ("mix", "mixed"), "BUSY": ("alloc", "allocated"),
               "DRAINING": ("drng", "draining"), "DRAINED": ("drain", "drained"), "RECONCILING": ("comp", "completing"),
               "DISCONNECTED": ("down*", "down*"), "LOST": ("down*", "down*")}


def node_state(node: dict, long: bool = False) -> str:
    return NODE_STATES.get(node["state"], ("unk", "unknown"))[1 if long else 0]


def sinfo_groups(nodes: list[dict], node_oriented: bool) -> list[list[dict]]:
    """The lines sinfo prints: a line per node state (per node with -N), in the nodes' order."""
    if node_oriented:
        return [[n] for n in nodes]
    groups: dict[str, list[dict]] = {}
    for node in nodes:
        groups.setdefault(node_state(node), []).append(node)
    return list(groups.values())


# The one partition of a cluster without partitions (issue #22): every node, the default, no limits.
IMPLICIT = {"name": PARTITION, "default": True, "state": "UP", "max_time": None, "default_time": None,
            "max_cpus_per_job": None, "max_mem_per_job": None, "max_gpus_per_job": None, "allow_groups": [],
            "priority_tier": 1}


def partitions_of(reply: dict) -> list[dict]:
    """The ``nodes`` op's partitions, each with ``members`` (its node objects); the implicit one if none."""
    nodes = reply["nodes"]
    parts = reply.get("partitions") or []
    if not parts:
        return [{**IMPLICIT, "members": nodes}]
    by_name = {n["name"]: n for n in nodes}
    return [{**p, "members": [by_name[a] for a in p.get("agents", ()) if a in by_name]} for p in parts]


def sinfo_partition_groups(parts: list[dict], node_oriented: bool) -> tuple[list[list[dict]], list[dict]]:
    """sinfo's lines per partition (Slurm prints a partition's nodes by state; a node once per
    partition it is in), and each line's partition."""
    groups: list[list[dict]] = []
    owners: list[dict] = []
    for part in parts:
        found = sinfo_groups(part["members"], node_oriented) or ([] if node_oriented else [[]])
        groups += found
        owners += [part] * len(found)
    return groups, owners


def slurm_time(seconds: float | None) -> str:
    """Slurm's time limit: ``infinite``, ``30:00``, ``1:00:00``, ``1-00:00:00``."""
    if seconds is None:
        return "infinite"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, minutes, secs = rest // 3600, rest % 3600 // 60, rest % 60
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def sinfo_value(code: str, group: list[dict], part: dict = IMPLICIT) -> str:
    if code in ("P", "R"):
        return part["name"] + ("*" if code == "P" and part.get("default") else "")
    if code == "a":
        return {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}.get(part.get("state", "UP"), "up")
    if code == "l":
        return slurm_time(part.get("max_time"))
    if code == "D":
        return str(len(group))
    if code == "t":
        return node_state(group[0]) if group else "n/a"
    if code == "T":
        return node_state(group[0], long=True) if group else "n/a"
    if code in ("N", "n"):
        return hostlist([n["name"] for n in group])
    if code == "C":
        total = sum(n.get("cpus", n.get("slots", 0)) for n in group)
        used = sum(n.get("cpus_used", n.get("used", 0)) for n in group)
        other = sum(n.get("cpus", n.get("slots", 0)) for n in group if n["state"] in ("DISCONNECTED", "LOST",
                                                                                         "DRAINED", "DRAINING"))
        other = max(0, other - sum(n.get("cpus_used", 0) for n in group if n["state"] == "DRAINING"))
        return f"{used}/{max(0, total - used - other)}/{other}/{total}"
    if code == "c":
        counts = sorted({n.get("cpus", n.get("slots", 0)) for n in group})
        return f"{counts[0]}+" if len(counts) > 1 else str(counts[0] if counts else 0)
    if code == "m":
        mems = sorted({(n.get("mem") or 0) >> 20 for n in group})
        return f"{mems[0]}+" if len(mems) > 1 else str(mems[0] if mems else 0)
    if code == "e":
        return "N/A"
    if code == "O":
        return "N/A"
    if code == "z":
        return "1:1:1"
    if code == "G":
        out = set()
        for n in group:
            parts = [f"gpu:{len(n['gpus'])}"] if n.get("gpus") else []
            parts += [f"{name}:{count}" for name, count in n.get("gres") or ()]
            out.add(",".join(parts) or "(null)")
        return ",".join(sorted(out)) if out else "(null)"
    raise AssertionError(code)


def parse_sinfo_format(fmt: str) -> list[tuple[str, str | None, int, bool]]:
    """sinfo's ``%[#][.][width]code`` (``#``: as wide as the longest value, see ``sinfo_lines``)."""
    out: list[tuple[str, str | None, int, bool]] = []
    literal = ""
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            literal += ch
            i += 1
            continue
        i += 1
        if i < len(fmt) and fmt[i] == "%":
            literal, i = literal + "%", i + 1
            continue
        auto = right = False
        while i < len(fmt) and fmt[i] in "#.":
            auto, right = auto or fmt[i] == "#", right or fmt[i] == "."
            i += 1
        start = i
        while i < len(fmt) and fmt[i].isdigit():
            i += 1
        width = -1 if auto else int(fmt[start:i]) if i > start else 0
        if i >= len(fmt) or fmt[i] not in SINFO_HEADERS:
            raise UsageProblem(f"invalid sinfo format field in '{fmt}' (reckon prints "
                               f"{''.join(sorted(SINFO_HEADERS))})")
        out.append((literal, fmt[i], width, right))
        literal = ""
        i += 1
    if literal:
        out.append((literal, None, 0, False))
    return out


def sinfo_lines(groups: list[list[dict]], fields: list[tuple[str, str | None, int, bool]],
                header: bool = True, parts: list[dict] | None = None) -> list[str]:
    owners = parts if parts is not None else [IMPLICIT] * len(groups)
    rows = [[sinfo_value(code, g, p) if code else "" for _, code, _, _ in fields] for g, p in zip(groups, owners)]
    widths = []
    for k, (_, code, width, _) in enumerate(fields):
        if width == -1:  # '#': the longest value or the header, whichever is longer
            width = max([len(SINFO_HEADERS[code or "P"])] + [len(r[k]) for r in rows])
        widths.append(width)

    def cell(text: str, width: int, right: bool) -> str:
        if not width:
            return text
        text = text[:width]
        return text.rjust(width) if right else text.ljust(width)

    lines = []
    if header:
        lines.append("".join(lit + (cell(SINFO_HEADERS[code], w, right) if code else "")
                             for (lit, code, _, right), w in zip(fields, widths)))
    for r in rows:
        lines.append("".join(lit + (cell(v, w, right) if code else "")
                             for (lit, code, _, right), w, v in zip(fields, widths, r)))
    return lines


# ---- scontrol ------------------------------------------------------------------------------------


def _null(value: object) -> str:
    return "(null)" if value is None or value == "" else str(value)


def show_job(job: dict, now: float, oneliner: bool = False) -> str:
    """``scontrol show job``: Slurm's Key=Value lines (three spaces before each line after the first)."""
    user, uid, gid = owner_of(job)
    state = slurm_state(job)
    started, finished = job.get("started_at"), job.get("finished_at")
    limit = job.get("time_limit")
    end = finished if job["state"] not in ("PENDING", "RUNNING") else (
        started + limit if started is not None and limit is not None else None)
    first = [f"JobId={job['id']}"]
    if job.get("array_id") is not None:
        first += [f"ArrayJobId={job['array_id']}", f"ArrayTaskId={job.get('_slurm_tasks') or job['array_index']}"]
        if job.get("array_max"):
            first.append(f"ArrayTaskThrottle={job['array_max']}")
    first.append(f"JobName={job['name']}")
    mem = job.get("mem")
    tres = f"cpu={job.get('cpus') or 1}" + (f",mem={memory(mem, exact=True)}" if mem else "") + ",node=1"
    tres += f",billing={job.get('cpus') or 1}"  # Slurm's default billing weight: one per CPU
    if job.get("gpus"):
        tres += f",gres/gpu={job['gpus']}"
    unstarted = started is None and job["state"] not in ("PENDING", "RUNNING")  # cancelled while pending
    if unstarted:
        started = end = finished
    waiting = job["state"] == "PENDING" and (job.get("held") or dependency(job) != "(null)"
                                             or job.get("_array_limited"))
    eligible = None if (waiting or (unstarted and not job.get("_array_limited"))) else eligible_time(job)
    if started is None and waits_to_begin(job):
        started = job["begin"]  # Slurm's StartTime of a job waiting to begin: its begin time
    host = nodelist(job) if job.get("started_at") is not None else ""
    lines = [
        first,
        [f"UserId={user}({uid})", f"GroupId={user}({gid})", "MCS_label=N/A"],
        [f"Priority={0 if job.get('held') else job.get('priority') if job.get('priority') is not None else 1}", "Nice=0", f"Account={_null(label(job, 'account'))}", f"QOS={label(job, 'qos') or 'normal'}"],
        [f"JobState={state}", f"Reason={pending_reason(job)}",
         f"Dependency={dependency(job)}"],
        ["Requeue=1", f"Restarts={job.get('requeues') or 0}", "BatchFlag=1", "Reboot=0", f"ExitCode={exit_code(job)}"],
        [f"RunTime={sacct_time(elapsed_seconds(job, now))}", f"TimeLimit={sacct_time(limit)}", "TimeMin=N/A"],
        [f"SubmitTime={date(job.get('submitted_at'))}", f"EligibleTime={date(eligible)}"],
        [f"AccrueTime={date(job.get('submitted_at'))}"],
        [f"StartTime={date(started)}", f"EndTime={date(end)}", "Deadline=N/A"],
        # reckon neither suspends nor has scheduler passes: Slurm's values for a job never suspended
        ["SuspendTime=None", "SecsPreSuspend=0", f"LastSchedEval={date(job.get('submitted_at'))}",
         "Scheduler=Main"],
        [f"Partition={partition(job)}", f"AllocNode:Sid={_null(job.get('submit_host'))}:0"],
        ["ReqNodeList=(null)", "ExcNodeList=(null)"],
        [f"NodeList={host}"],
        *([[f"BatchHost={host}"]] if host else []),
        ["NumNodes=1", f"NumCPUs={job.get('cpus') or 1}", f"NumTasks={'N/A' if unstarted else 1}",
         f"CPUs/Task={job.get('cpus') or 1}",
         "ReqB:S:C:T=0:0:*:*"],
        [f"TRES={tres}"],
        ["Socks/Node=*", "NtasksPerN:B:S:C=0:0:*:*", "CoreSpec=*"],
        ["MinCPUsNode=1", f"MinMemoryNode={memory(mem)}", "MinTmpDiskNode=0"],
        [f"Features={_null(label(job, 'constraint'))}", "DelayBoot=00:00:00"],
        ["OverSubscribe=OK", "Contiguous=0", "Licenses=(null)", "Network=(null)"],
        [f"Command={command_name(job)}"],
        [f"WorkDir={_null(job.get('cwd'))}"],
    ]
    if label(job, "comment") is not None:
        lines.append([f"Comment={label(job, 'comment')}"])
    lines += [[f"StdErr={_null(job.get('stderr'))}"], ["StdIn=/dev/null"], [f"StdOut={_null(job.get('stdout'))}"]]
    if gres(job) != "N/A":
        lines.append([f"TresPerNode={gres(job)}"])
    lines.append(["Power="])
    if oneliner:
        return " ".join(" ".join(line) for line in lines)
    return "\n".join(("   " if k else "") + " ".join(line) for k, line in enumerate(lines)) + "\n"


def _limit_time(seconds: float | None, none: str) -> str:
    return none if seconds is None else slurm_time(seconds)


def show_partition(nodes: list[dict], jobs_total: int | None = None, oneliner: bool = False,
                   part: dict = IMPLICIT) -> str:
    cpus = sum(n.get("cpus", n.get("slots", 0)) for n in nodes)
    mem = sum(n.get("mem") or 0 for n in nodes)
    max_mem = part.get("max_mem_per_job")
    lines = [
        [f"PartitionName={part['name']}"],
        [f"AllowGroups={','.join(part.get('allow_groups') or ()) or 'ALL'}", "AllowAccounts=ALL", "AllowQos=ALL"],
        ["AllocNodes=ALL", f"Default={'YES' if part.get('default') else 'NO'}", "QoS=N/A"],
        [f"DefaultTime={_limit_time(part.get('default_time'), 'NONE')}", "DisableRootJobs=NO", "ExclusiveUser=NO",
         "GraceTime=0", "Hidden=NO"],
        ["MaxNodes=1", f"MaxTime={_limit_time(part.get('max_time'), 'UNLIMITED')}", "MinNodes=0", "LLN=NO",
         f"MaxCPUsPerNode={part.get('max_cpus_per_job') or 'UNLIMITED'}"],
        [f"Nodes={hostlist([n['name'] for n in nodes]) or '(null)'}"],
        ["PriorityJobFactor=1", f"PriorityTier={part.get('priority_tier', 1)}", "RootOnly=NO", "ReqResv=NO",
         "OverSubscribe=NO"],
        ["OverTimeLimit=NONE", "PreemptMode=OFF"],
        [f"State={part.get('state', 'UP')}", f"TotalCPUs={cpus}", f"TotalNodes={len(nodes)}",
         "SelectTypeParameters=NONE"],
        ["JobDefaults=(null)"],
        ["DefMemPerNode=UNLIMITED", f"MaxMemPerNode={max_mem >> 20 if max_mem else 'UNLIMITED'}"],
        [f"TRES=cpu={cpus},mem={memory(mem, exact=True)},node={len(nodes)},billing={cpus}"],
    ]
    if oneliner:
        return " ".join(" ".join(line) for line in lines)
    return "\n".join(("   " if k else "") + " ".join(line) for k, line in enumerate(lines)) + "\n"


def show_node(node: dict, oneliner: bool = False) -> str:
    cpus, used = node.get("cpus", node.get("slots", 0)), node.get("cpus_used", node.get("used", 0))
    mem = (node.get("mem") or 0) >> 20
    state = node_state(node, long=True).upper().replace("ALLOCATED", "ALLOCATED").replace("*", "")
    if node["state"] in ("DISCONNECTED", "LOST"):
        state = "DOWN*"
    elif node["state"] in ("DRAINED", "DRAINING"):
        state = ("MIXED" if used else "IDLE") + "+DRAIN"
    gres_parts = [f"gpu:{len(node['gpus'])}"] if node.get("gpus") else []
    gres_parts += [f"{name}:{count}" for name, count in node.get("gres") or ()]
    lines = [
        [f"NodeName={node['name']}", "Arch=x86_64", "CoresPerSocket=1"],
        [f"CPUAlloc={used}", f"CPUEfctv={cpus}", f"CPUTot={cpus}", "CPULoad=N/A"],
        ["AvailableFeatures=(null)"],
        ["ActiveFeatures=(null)"],
        [f"Gres={','.join(gres_parts) or '(null)'}"],
        [f"NodeAddr={node['name']}", f"NodeHostName={node['name']}"],
        [f"RealMemory={mem}", f"AllocMem={(node.get('mem_used') or 0) >> 20}", "FreeMem=N/A", f"Sockets={cpus}",
         "Boards=1"],
        [f"State={state}", "ThreadsPerCore=1", "TmpDisk=0", "Weight=1", "Owner=N/A", "MCS_label=N/A"],
        [f"Partitions={','.join(node.get('partitions') or ()) or PARTITION}"],
        [f"LastBusyTime={date(node.get('since'))}"],
        [f"CfgTRES=cpu={cpus},mem={mem}M,billing={cpus}"],
        [f"AllocTRES={'cpu=' + str(used) if used else ''}"],
    ]
    if oneliner:
        return " ".join(" ".join(line) for line in lines)
    return "\n".join(("   " if k else "") + " ".join(line) for k, line in enumerate(lines)) + "\n"


def show_config(now: float, controller: str, nodes: int, scheduler: str = "fifo") -> str:
    """``scontrol show config``: ``Key = Value`` lines, the keys padded to 23 as Slurm does; what
    workflow tools read (the cluster's name, array and job limits, the version). ``scheduler`` is
    the controller's policy: Slurm's sched/backfill for backfill, sched/builtin (first in, first
    out) for fifo."""
    pairs = [
        ("AccountingStorageType", "accounting_storage/none"), ("ClusterName", CLUSTER),
        ("ControlMachine", controller), ("DefMemPerNode", "UNLIMITED"), ("EnforcePartLimits", "NO"),
        ("InactiveLimit", "0 sec"), ("JobAcctGatherType", "jobacct_gather/none"), ("KillWait", "5 sec"),
        ("MaxArraySize", "1000001"), ("MaxJobCount", "10000000"), ("MaxStepCount", "1"), ("MinJobAge", "300 sec"),
        ("MpiDefault", "none"), ("PrivateData", "none"), ("ProctrackType", "proctrack/cgroup"),
        ("SchedulerType", "sched/backfill" if scheduler == "backfill" else "sched/builtin"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_CPU_MEMORY"), ("SLURM_VERSION", "22.05.8"),
        ("SlurmctldHost[0]", controller), ("TaskPlugin", "task/cgroup"), ("TmpFS", "/tmp"),
        ("NodeCount", str(nodes)),
    ]
    head = f"Configuration data as of {date(now)}"
    lines = [f"{key:<23} = {value}" for key, value in sorted(pairs, key=lambda p: p[0].lower())]
    return head + "\n" + "\n".join(lines) + "\n"
