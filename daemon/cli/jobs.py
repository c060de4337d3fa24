"""The client commands of `reckon` (submit, jobs, show, cancel, nodes, forget): blocking, no trio.

Each is one connection to the controller's `/client` endpoint through
``daemon.cli.client.SyncClient``.  What they print is a contract (scripts
parse it): ``submit`` prints ids alone, one per line; ``--json`` prints the
controller's objects unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from daemon.cli.client import SyncClient, UsageError, client_ssl_context, resolve_ca, resolve_controller, resolve_token


def run_client_command(args: argparse.Namespace) -> int:
    url = resolve_controller(args.controller)
    token = resolve_token(args.token_file)
    tls = client_ssl_context(resolve_ca(args.ca)) if url.startswith("wss:") else None
    out = sys.stdout
    if args.command == "submit":
        spec = _job_spec(args)
        with SyncClient(url, token, timeout=args.timeout, ssl_context=tls) as client:
            job = client.call("submit", spec=spec)["job"]
        out.write((json.dumps(job) if args.json else job["id"]) + "\n")
        return 0
    with SyncClient(url, token, timeout=args.timeout, ssl_context=tls) as client:
        if args.command == "jobs":
            jobs = client.call("jobs", state=args.state)["jobs"]
            out.write((json.dumps(jobs) if args.json else format_jobs(jobs)) + "\n")
        elif args.command == "show":
            job = client.call("show", job=args.job)["job"]
            out.write((json.dumps(job) if args.json else format_job(job)) + "\n")
        elif args.command == "cancel":
            job = client.call("cancel", job=args.job)["job"]
            out.write(f"{job['id']} {job['state']}"
                      f"{' (cancel requested)' if job['state'] == 'RUNNING' else ''}\n")
        elif args.command == "forget":
            result = client.call("forget", agent=args.node)
            out.write(f"forgot {result['agent']}: {len(result['requeued'])} job(s) requeued, "
                      f"{len(result['cancelled'])} cancel(s) confirmed; its name is free\n")
        elif args.command == "nodes":
            nodes = client.call("nodes")["nodes"]
            out.write((json.dumps(nodes) if args.json else format_nodes(nodes)) + "\n")
        else:
            raise AssertionError(f"not a client command: {args.command}")
    return 0


def _job_spec(args: argparse.Namespace) -> dict:
    """The job spec of `reckon submit`, checked here (the model's own checks) before it is sent."""
    from model.jobs import JobSpec

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise UsageError("no command given: reckon submit [OPTIONS] -- CMD [ARG ...]")
    try:
        spec = JobSpec(name=args.name or Path(argv[0]).name, command=tuple(argv), cwd=args.cwd,
                       env=tuple(args.env), slots=args.slots)
    except ValueError as exc:
        raise UsageError(f"invalid job: {exc}") from None
    return spec.to_dict()


# ---- output ---------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def format_jobs(jobs: list[dict]) -> str:
    rows = [("ID", "NAME", "STATE", "AGENT", "ATTEMPT", "EXIT", "SIGNAL", "FINISHED")]
    for j in jobs:
        rows.append((j["id"], j["name"][:24], j["state"], j["agent"] or "-", str(j["attempt"]),
                     "-" if j["exit_code"] is None else str(j["exit_code"]),
                     "-" if j["signal"] is None else str(j["signal"]), _when(j["finished_at"])))
    return _table(rows)


def format_nodes(nodes: list[dict]) -> str:
    rows = [("NAME", "STATE", "SLOTS", "USED")]
    rows += [(n["name"], n["state"], str(n["slots"]), str(n["used"])) for n in nodes]
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_job(job: dict) -> str:
    keys = ("id", "name", "state", "agent", "attempt", "exit_code", "signal", "submitted_at", "started_at",
            "finished_at", "command", "cwd", "slots", "stdout", "stderr")
    lines = []
    for key in keys:
        value = job.get(key)
        if key.endswith("_at") and value is not None:
            value = f"{value:.3f} ({_when(value)})"
        elif key == "command":
            value = " ".join(value)
        lines.append(f"{key + ':':14}{'-' if value is None else value}")
    return "\n".join(lines)
