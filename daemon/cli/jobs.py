"""The client commands of `reckon` (submit, jobs, show, cancel, nodes, forget, history, drain, resume): blocking, no trio.

Each is one connection to the controller's `/client` endpoint through
``daemon.blocking.client.SyncClient``.  What they print is a contract (scripts
parse it): ``submit`` prints ids alone, one per line (``--file``: one line
per job, in the file's order); ``--json`` prints the controller's objects
unchanged (``submit --file --json``: the list of ids).
"""

from __future__ import annotations

import sys
import time

from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.blocking.spec import format_size
from reckon.daemon.cli import batch
from reckon.daemon.client_common import (UsageError, client_ssl_context, refuse_unused_ca, request_bytes, resolve_ca,
                                         resolve_auth, resolve_controller)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from reckon.daemon.auth.client import ClientAuth


def _json(value: object) -> str:
    import json  # only --json and the listings that print it pay its import

    return json.dumps(value)


def run_client_command(args: argparse.Namespace) -> int:
    url = resolve_controller(args.controller)
    auth = resolve_auth(args.auth, args.munge_socket, args.token_file)  # munge: a credential per connection
    refuse_unused_ca(url, args.ca)
    tls = client_ssl_context(resolve_ca(args.ca)) if any(u.strip().startswith("wss:") for u in url.split(",")) else None
    out = sys.stdout
    if args.command == "submit":
        return _submit(args, url, auth, tls)
    if args.command == "logs":
        from reckon.daemon.cli.logs import run_logs

        return run_logs(args, url, auth, tls)
    changes = partition_changes(args) if args.command == "partition" and args.partition_command == "set" else []
    with SyncClient(url, auth, timeout=args.timeout, ssl_context=tls) as client:
        if args.command == "jobs":
            jobs = client.call("jobs", state=args.state, user=args.user)["jobs"]
            shown = jobs if args.json or args.expand else batch.fold_arrays(jobs)
            out.write((_json(jobs) if args.json else format_jobs(shown)) + "\n")
        elif args.command == "show":
            job = client.call("show", job=args.job)["job"]
            out.write((_json(job) if args.json else format_job(job)) + "\n")
        elif args.command == "cancel":
            reply = client.call("cancel", job=args.job, array=False if args.job_only else None)
            for job in reply.get("array") or [reply["job"]]:  # an array's id: every job of the array
                batch.write_job_state(out, job)
        elif args.command == "update":
            job = client.call("update", job=args.job, priority=args.priority)["job"]
            out.write(f"job {job['id']}: priority {job.get('priority')} (adjustment {job.get('priority_adjust')})\n")
        elif args.command == "priority":
            factors = client.call("priority", job=args.job)["priority"]
            out.write((_json(factors) if args.json else format_priority(factors)) + "\n")
        elif args.command in ("hold", "release", "requeue"):
            batch.write_job_state(out, client.call(args.command, job=args.job)["job"])
        elif args.command == "signal":
            sig = batch.parse_signal(args.sig)
            job = client.call("signal", job=args.job, signal=sig, batch_only=args.batch,
                              full=not args.batch and not args.steps)["job"]
            which = " (its top process)" if args.batch else " (all but its top process)" if args.steps else ""
            out.write(f"signal {sig} sent to job {job['id']}{which}\n")
        elif args.command == "forget":
            result = client.call("forget", agent=args.node)
            out.write(f"forgot {result['agent']}: {len(result['requeued'])} job(s) requeued, "
                      f"{len(result['cancelled'])} cancel(s) confirmed; its name is free\n")
        elif args.command == "whoami":
            reply = client.call("whoami")
            out.write((_json({"auth": reply["auth"], "caller": reply["caller"]}) if args.json
                       else format_whoami(reply)) + "\n")
        elif args.command == "nodes":
            nodes = client.call("nodes")["nodes"]
            out.write((_json(nodes) if args.json else format_nodes(nodes)) + "\n")
        elif args.command == "history" and args.job is None:  # --user U --since T: past jobs with their usage
            jobs = client.call("history", user=args.user, since=args.since)["jobs"]
            out.write((_json(jobs) if args.json else format_user_history(jobs)) + "\n")
        elif args.command == "history":
            if args.user is not None or args.since is not None:
                raise UsageError("--user and --since list finished jobs: give them without a job id")
            history = client.call("history", job=args.job)["history"]
            out.write((_json(history) if args.json else format_history(history)) + "\n")
        elif args.command == "partition":
            _partition(client, args, out, changes)
        elif args.command in ("drain", "resume"):
            result = client.call(args.command, agent=args.node)
            node = result["node"]
            verb = "drained" if args.command == "drain" else "resumed"
            already = "" if result["changed"] else f" (it already was {'drained' if args.command == 'drain' else 'taking jobs'})"
            out.write(f"{verb} {result['agent']}{already}: now {node['state']}, {node['used']}/{node['slots']} slots used\n")
        else:
            raise AssertionError(f"not a client command: {args.command}")
    return 0


def partition_changes(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """``reckon partition set``'s words, checked before it connects (a bad one: exit status 2)."""
    from reckon.daemon.cli.partitions import parse_assignments

    try:
        return parse_assignments(args.assignments)
    except ValueError as exc:
        raise UsageError(f"partition {args.name}: {exc}") from None


def _partition(client: SyncClient, args: argparse.Namespace, out: Any, changes: list) -> None:
    """``reckon partition list | set NAME KEY=VALUE ... | remove NAME``."""
    if args.partition_command == "list":
        parts = client.call("partitions")["partitions"]
        out.write((_json(parts) if args.json else format_partitions(parts)) + "\n")
        return
    if args.partition_command == "remove":
        client.call("partition_set", name=args.name, remove=True)
        out.write(f"removed partition {args.name}\n")
        return
    reply = client.call("partition_set", name=args.name, changes=[list(c) for c in changes])
    already = "" if reply["changed"] else " (it already was so)"
    out.write(f"partition {args.name} set{already}\n{format_partitions([reply['partition']])}\n")


def format_partitions(parts: list[dict]) -> str:
    """One row per partition: state, limits, and the agents it holds now."""
    if not parts:
        return "no partitions (every agent takes every job)"
    rows = [("NAME", "STATE", "DEFAULT", "MAX_TIME", "DEFAULT_TIME", "MAX_CPUS", "MAX_MEM", "MAX_GPUS", "TIER",
             "GROUPS", "NODES", "AGENTS")]
    for p in parts:
        rows.append((p["name"], p["state"].lower(), "yes" if p["default"] else "-", _duration(p["max_time"]),
                     _duration(p["default_time"]), str(p["max_cpus_per_job"] or "-"),
                     format_size(p["max_mem_per_job"]), "-" if p["max_gpus_per_job"] is None else str(p["max_gpus_per_job"]),
                     str(p["priority_tier"]), ",".join(p["allow_groups"]) or "-", ",".join(p["nodes"]) or "-",
                     ",".join(p["agents"]) or "-"))
    return _table(rows)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _submit(args: argparse.Namespace, url: str, auth: ClientAuth, tls: object) -> int:
    """One job from the command line, or every line of ``--file`` in one request (one group commit)."""
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    cwd = submit_cwd(args.cwd)
    extra = {"queue_anyway": True} if args.queue_anyway else {}
    if args.hold:
        extra["hold"] = True
    if args.file is None:
        if not argv:
            raise UsageError("no command given: reckon submit [OPTIONS] -- CMD [ARG ...] (or --file FILE)")
        spec = job_spec(argv, args, cwd)
        if args.array is not None:  # every id, one per line (the contract); the first names the array
            batch.check_array(args.array)
            with SyncClient(url, auth, timeout=args.timeout, ssl_context=tls) as client:
                ids = client.call("submit_array", spec=spec, array=args.array, **extra)["jobs"]
                if args.json:
                    wanted = set(ids)
                    jobs = [j for j in client.call("jobs")["jobs"] if j["id"] in wanted]
            sys.stdout.write(_json(jobs) + "\n" if args.json else "".join(f"{i}\n" for i in ids))
            return 0
        with SyncClient(url, auth, timeout=args.timeout, ssl_context=tls) as client:
            job = client.call("submit", spec=spec, **extra)["job"]
        sys.stdout.write((_json(job) if args.json else job["id"]) + "\n")
        return 0
    if argv:
        raise UsageError("give a command or --file, not both")
    if args.array is not None:
        raise UsageError("give --array or --file, not both")
    specs = [job_spec(command, args, cwd) for command in read_command_file(args.file)]
    from reckon.daemon.wire import MAX_AGENT_MESSAGE  # a --file's submit may pay cbor2's import

    size = len(request_bytes("submit_many", {"specs": specs, **extra}))
    if size > MAX_AGENT_MESSAGE:
        raise UsageError(f"{args.file}: {len(specs)} jobs make a request of {size >> 20} MiB, over the "
                         f"controller's limit of {MAX_AGENT_MESSAGE >> 20} MiB: split the file")
    with SyncClient(url, auth, timeout=args.timeout, ssl_context=tls) as client:
        ids = client.call("submit_many", specs=specs, **extra)["jobs"]
    sys.stdout.write(_json(ids) + "\n" if args.json else "".join(f"{i}\n" for i in ids))
    return 0


def format_whoami(reply: dict) -> str:
    """``reckon whoami``: one line."""
    caller = reply.get("caller")
    if caller is None:
        return "token mode: a single-user cluster, every caller is an operator and jobs run as the agent's user"
    role = "an operator" if caller["operator"] else "not an operator"
    return f"{caller['user']} (uid {caller['uid']}, gid {caller['gid']}), {role}: authenticated by {reply['auth']}"


def submit_cwd(cwd: str | None) -> str:
    """The job's working directory, absolute: ``--cwd`` against the submitter's, or the submitter's own.

    As with sbatch, a job runs where it was submitted from unless told otherwise;
    the directory must exist on the agent that runs it (if not, the job ends
    FAILED with exit code 127 and the reason in its stderr).
    """
    import os

    try:
        here = os.getcwd()
    except FileNotFoundError:
        if cwd is not None and os.path.isabs(cwd):
            return os.path.normpath(cwd)
        raise UsageError("the current directory no longer exists: give --cwd DIR (absolute)") from None
    if cwd is None or not os.path.isabs(cwd):
        try:
            here.encode("utf-8")
        except UnicodeEncodeError:  # as refuse_non_utf8 (main.py) refuses such an argument
            raise UsageError(f"the current directory is not UTF-8 text: {os.fsencode(here)!r}; names, commands "
                             "and paths go to the controller as UTF-8: give --cwd DIR (absolute)") from None
    return os.path.normpath(os.path.join(here, cwd)) if cwd is not None else here


def job_spec(argv: list[str], args: argparse.Namespace, cwd: str) -> dict:
    """A job spec's wire dict, its cheap checks made here (daemon/blocking/spec.py), the rest by the controller."""
    from reckon.daemon.blocking.spec import job_spec as wire_job_spec

    try:
        return wire_job_spec(argv, name=args.name or None, cwd=cwd, env=args.env, cpus=args.slots, output=args.output,
                             error=args.error, **batch.spec_fields(args))
    except ValueError as exc:
        raise UsageError(f"invalid job: {exc}") from None


def read_command_file(name: str) -> list[list[str]]:
    """The commands of a ``--file`` (``-``: stdin): one shell-quoted command line per line.

    Blank lines and lines starting with ``#`` are skipped; a line that does
    not parse names its number, and nothing is submitted.
    """
    import shlex

    try:
        if name == "-":
            text = sys.stdin.read()
        else:
            with open(name, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    commands = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"{name}, line {number}: {exc}") from None
        if argv:
            commands.append(argv)
    if not commands:
        raise UsageError(f"{name} holds no command (one shell-quoted command line per line)")
    return commands


# ---- output ---------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def _since(ts: float | None, now: float | None = None) -> str:
    """A node's state since when: the time of day if today, else the date and time (a node drained for days)."""
    if ts is None:
        return "-"
    today = time.strftime("%Y-%m-%d", time.localtime(time.time() if now is None else now))
    day = time.strftime("%Y-%m-%d", time.localtime(ts))
    return time.strftime("%H:%M:%S" if day == today else "%Y-%m-%d %H:%M", time.localtime(ts))


def format_priority(f: dict) -> str:
    """``reckon priority JOB``: sprio's row, each factor with its weight and what it adds."""
    rows = [("JOBID", "USER", "PRIORITY", "AGE", "FAIRSHARE", "PARTITION", "JOBSIZE", "NICE", "ADJUST")]
    w = f["weights"]
    rows.append((f["job"], f.get("user") or "-", str(f["priority"]),
                 *(f"{int(w[k] * f[k])} ({f[k]:.3f})" for k in ("age", "fairshare", "partition", "jobsize")),
                 str(f["nice"]), str(f["adjust"])))
    return _table(rows)


def format_jobs(jobs: list[dict]) -> str:
    # USER last: the columns before it keep their places for the scripts that read them.
    rows = [("ID", "NAME", "STATE", "AGENT", "ATTEMPT", "CPUS", "MEM", "GPUS", "EXIT", "SIGNAL", "FINISHED", "USER")]
    for j in jobs:
        rows.append((j["id"], j["name"][:24], j["state"], j["agent"] or "-", str(j["attempt"]),
                     str(j.get("cpus") or j.get("slots") or "-"), format_size(j.get("mem")), _gpus(j),
                     "-" if j["exit_code"] is None else str(j["exit_code"]),
                     "-" if j["signal"] is None else str(j["signal"]), _when(j["finished_at"]), j.get("user") or "-"))
    if any(j.get("priority") for j in jobs):  # issue #22: pending jobs' priorities, when any is not 0
        rows = [row + (("PRIORITY",) if i == 0 else (_priority(jobs[i - 1]),)) for i, row in enumerate(rows)]
    if any(j.get("partition") for j in jobs):  # issue #22: a last column, only on a cluster with partitions
        rows = [row + (("PARTITION",) if i == 0 else (jobs[i - 1].get("partition") or "-",))
                for i, row in enumerate(rows)]
    if any(j.get("pending_code") for j in jobs):  # issue #22: why each PENDING job waits, as Slurm names it
        rows = [row + (("REASON",) if i == 0 else (jobs[i - 1].get("pending_code") or "-",))
                for i, row in enumerate(rows)]
    return _table(rows)


def _priority(job: dict) -> str:
    priority = job.get("priority")
    return "-" if priority is None else str(priority)


def _gpus(job: dict) -> str:
    """``2 (0,1)``: the count asked, and the indices given when there are some."""
    count = job.get("gpus") or 0
    if not count:
        return "-"
    ids = job.get("gpu_ids") or []
    return f"{count} ({','.join(map(str, ids))})" if ids else str(count)


def _used_of(used: Any, total: Any, size: bool = False) -> str:
    if total is None:
        return "-"
    show = format_size if size else str
    return f"{show(used) if used else 0}/{show(total)}"


def format_nodes(nodes: list[dict]) -> str:
    """One row per agent: what it offers and what is in use, in every dimension; how it enforces it."""
    rows = [("NAME", "STATE", "CPUS", "MEM", "GPUS", "GRES", "ENFORCER", "SINCE")]
    if any(n.get("partitions") for n in nodes):  # issue #22: a last column, on a cluster with partitions
        rows = [rows[0] + ("PARTITIONS",)]
    notes = []
    for n in nodes:
        gres_used = dict(map(tuple, n.get("gres_used") or []))
        gres = ",".join(f"{k}:{gres_used.get(k, 0)}/{v}" for k, v in n.get("gres") or []) or "-"
        gpus = n.get("gpus") or []
        rows.append((n["name"], n["state"], f"{n['used']}/{n['slots']}",
                     _used_of(n.get("mem_used"), n.get("mem"), size=True),
                     f"{len(n.get('gpus_used') or [])}/{len(gpus)}" if gpus else "-", gres,
                     n.get("enforcer") or "-", _since(n.get("since")))
                    + ((",".join(n.get("partitions") or ()) or "-",) if len(rows[0]) > 8 else ()))
        if n.get("unenforced"):
            notes.append(f"{n['name']}: cannot enforce: {', '.join(n['unenforced'])}")
    return "\n".join([_table(rows), *notes])


def _usage(usage: dict | None) -> str:
    """``cpu 1.20s (user 1.00s, sys 0.20s), peak 52M, wall 2.0s (cgroup)``."""
    if not usage:
        return "-"
    cpu = usage["cpu_user"] + usage["cpu_system"]
    peak = format_size(usage["max_rss"]) if usage.get("max_rss") is not None else "-"
    return (f"cpu {cpu:.2f}s (user {usage['cpu_user']:.2f}s, sys {usage['cpu_system']:.2f}s), peak {peak}, "
            f"wall {usage['wall']:.1f}s ({usage['source']})")


def _outcome(exit_code: int | None, signal: int | None) -> str:
    if signal is not None:
        return f"signal {signal}"
    return "-" if exit_code is None else f"exit {exit_code}"


def format_history(history: dict) -> str:
    """One line per attempt, then the requeues and cancels with their reasons."""
    record = history["record"]
    lines = [f"job {history['job']} ({record['name']}): {record['state']}"
             + (f", why pending: {_why(record)}" if record.get("pending_reason") else "")]
    if history["compacted"]:
        lines.append("(older history was compacted by a controller snapshot: attempts before it are not shown)")
    else:
        lines.append(f"submitted {_when(history['submitted_at'])}")
    rows = [("ATTEMPT", "AGENT", "STARTED", "FINISHED", "OUTCOME", "VIA", "ENDED", "CPU", "PEAK MEM", "REASON")]
    for a in history["attempts"]:
        placed = a["agent"] or "-"
        if a["placed"] == "adopted":
            placed += " (adopted)"
        if a.get("gpus"):
            placed += f" gpu {','.join(map(str, a['gpus']))}"
        usage = a.get("usage") or {}
        cpu = f"{usage['cpu_user'] + usage['cpu_system']:.2f}s" if usage else "-"
        peak = format_size(usage.get("max_rss")) if usage else "-"
        rows.append((str(a["attempt"]), placed, _when(a["started_at"]), _when(a["finished_at"]),
                     _outcome(a["exit_code"], a["signal"]), a["via"] or "-", a["ended"], cpu, peak,
                     a["reason"] or "-"))
    lines.append(_table(rows))
    for e in history["events"]:
        attempt = "" if e["attempt"] is None else f" attempt {e['attempt']}"
        at = f" at {_when(e['at'])}" if e.get("at") is not None else ""
        lines.append(f"{e['event']}{attempt}{at}: {e['reason']}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def format_user_history(jobs: list[dict]) -> str:
    """``history --user U --since T``: one line per finished job, with its latest attempt's usage
    (``-`` where the agent measured none: an older agent, or a job that never ran)."""
    rows = [("ID", "NAME", "USER", "STATE", "FINISHED", "WALL", "CPU-USER", "CPU-SYS", "MAX-RSS", "REASON")]
    for j in jobs:
        usage = j.get("usage") or {}
        rss = usage.get("max_rss")
        rows.append((j["id"], j["name"][:24], j.get("user") or "-", j["state"],
                     _since(j["finished_at"]) if j["finished_at"] is not None else "-",
                     _seconds(usage.get("wall")), _seconds(usage.get("cpu_user")), _seconds(usage.get("cpu_system")),
                     "-" if rss is None else f"{rss / (1 << 20):.1f}M", j.get("reason") or "-"))
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _why(job: dict) -> str:
    """``CODE: words`` (Slurm's reason code first, as squeue prints it); the words alone from a
    controller that sends no code."""
    code = job.get("pending_code")
    return f"{code}: {job['pending_reason']}" if code else job["pending_reason"]


def format_job(job: dict) -> str:
    keys = ("id", "name", "user", "state", "pending_reason", "expected_start", "agent", "attempt", "exit_code", "signal", "submitted_at",
            "started_at", "finished_at", "command", "cwd", "cpus", "mem", "gpus", "gres", "gpu_ids", "usage",
            "stdout", "stderr", "reason", "held", "time_limit", "retries", "retried", "after", "array_id",
            "array_index")
    lines = []
    for key in keys:
        value = job.get(key)
        if key in ("pending_reason", "expected_start") and value is None:
            continue  # only a PENDING job waits for something; only the reserved one has a promised start
        if key.endswith("_at") and value is not None:
            value = f"{value:.3f} ({_when(value)})"
        elif key == "pending_reason":
            value = _why(job)
        elif key == "expected_start":
            value = f"{value:.3f} ({_when(value)}) on {job.get('expected_agent')}"
        elif key in ("command", "after") and value is not None:
            value = " ".join(value) if key == "command" else ",".join(value) or None
        elif key == "cpus" and value is None:
            value = job.get("slots")  # a controller older than protocol 6
        elif key == "mem" and value is not None:
            value = format_size(value)
        elif key in ("gpus", "gres", "gpu_ids", "usage") and not value:
            continue  # asked none, given none, not measured: no line
        elif key == "gres":
            value = ",".join(f"{k}:{v}" for k, v in value)
        elif key == "gpu_ids":
            value = ",".join(map(str, value))
        elif key == "usage":
            value = _usage(value)
        # Why a PENDING job waits; by when backfill promised to start it.
        label = {"pending_reason": "why pending", "expected_start": "starts by"}.get(key, key)
        lines.append(f"{label + ':':14}{'-' if value is None else value}")
    return "\n".join(lines)
