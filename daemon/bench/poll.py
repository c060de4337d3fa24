"""`reckon bench poll`: the controller's job throughput while workflow tools poll it (issue #21).

A controller and N ``--executor null`` agents on loopback run 10,000 jobs twice or more:

* **alone**: the jobs submitted at once, jobs/s until all are terminal (as ``bench throughput``);
* **polled**, once per ``--modes`` entry: the same, while P clients (default 50) poll the
  controller ten times a second each about their own jobs (the jobs are dealt out to the
  clients in turn, so every client has jobs until the end of the run), in the two shapes the
  tools poll Slurm with:

  - Parsl's ``squeue --noheader --format='%i %t' --job IDS``: the ``query`` op with the ids of
    the client's jobs not yet seen terminal (Parsl stops asking about a finished job, and takes
    a job missing from the answer as COMPLETED: a missing one fails the run);
  - Snakemake's ``sacct -X --parsable2 --noheader --format=JobIdRaw,State --starttime ...
    --endtime now --name NAME``: the ``query`` op with the client's run name and a time window,
    every job of the run each time.

  A client stops when all its jobs are terminal, as the tools do.

The polls are real client requests from a separate process (``python -m
reckon.daemon.bench.poll``, one thread per client), not one ``squeue`` process per poll: 500
interpreter starts a second (~40 ms of CPU each, docs/performance.md) would need ten cores, and
this machine has two.  What one poll costs the controller is the same either way: a WebSocket
connection, a request, a reply.  Modes:

* ``fresh``: a new connection (TCP, WebSocket handshake) per poll, as each squeue process makes;
* ``kept``: one connection per client for all its polls (``reckon.Client``, a long-lived tool);
* ``http``: ``GET /api/v1/query`` on a keep-alive HTTP connection (``reckon controller --http``).

The pollers speak the command line's own blocking WebSocket client (daemon/blocking/websocket.py)
but decode replies with cbor2's C decoder rather than the CLI's pure-Python one, so that their
own CPU (on the same two cores) stays small beside the controller's.

Figures: jobs/s alone and polled (the drop), a poll's latency (median, p99: from the request,
or the connection for ``fresh``, to the decoded reply), the polls made, and the controller's
CPU per poll: its CPU in the polled run minus that in the alone run, over the polls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from reckon.daemon.bench.figures import summary, summary_text
from reckon.daemon.client import Client
from reckon.daemon.procs import LocalCluster

MODES = ("fresh", "kept", "http")
SHAPES = ("squeue", "sacct")  # client k polls in shape SHAPES[k % 2]
WINDOW = 2 * 86400.0  # Snakemake's sacct --starttime: two days back
POLL_TIMEOUT = 30.0  # seconds: one poll (connect, request, reply) on a loaded machine
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
HANG_GUARD = 1800.0  # seconds: no run may take longer


def _tool_fields() -> dict[str, list[str]]:
    """The query's ``fields`` the commands send for Parsl's ``squeue --format='%i %t'`` and
    Snakemake's ``sacct --format=JobIdRaw,State`` (daemon/slurm/formats.py's maps)."""
    from reckon.daemon.slurm import formats as S
    from reckon.daemon.slurm import sacct_fields as A

    return {"squeue": S.squeue_query_fields(S.parse_squeue_format("%i %t")),
            "sacct": A.sacct_query_fields(A.parse_sacct_format("JobIdRaw,State"))}


TOOL_FIELDS = _tool_fields()


# ---- the poller process -------------------------------------------------------------------


class _Poller:
    """One client's polls, on one thread: see the module docstring for the shapes."""

    def __init__(self, config: dict[str, Any], plan: dict[str, Any]) -> None:
        self.mode = config["mode"]
        self.ws_url, self.http_url = config["ws"], config.get("http")
        self.shape, self.name = plan["shape"], plan["name"]
        self.active = list(plan["ids"])  # jobs not yet seen terminal
        self.period = 1.0 / config["rate"]
        self.whole = config.get("whole", False)
        self.latencies: list[float] = []
        self.error: str | None = None
        self._ws: Any = None
        self._http: Any = None

    def fields(self) -> dict[str, Any]:
        selected = None if self.whole else TOOL_FIELDS[self.shape]
        if self.shape == "squeue":
            return {"ids": self.active, "names": None, "users": None, "states": None, "fields": selected}
        now = time.time()
        return {"ids": None, "names": [self.name], "users": None, "states": None, "since": now - WINDOW,
                "until": now, "fields": selected}

    def run(self, stop: threading.Event, offset: float) -> None:
        try:
            next_at = time.monotonic() + offset  # the clients' ticks spread over one period
            while self.active:
                if stop.wait(max(0.0, next_at - time.monotonic())) and self.latencies:
                    break  # (every client polls at least once, however short the run)
                t0 = time.perf_counter()
                jobs = self.poll(self.fields())
                self.latencies.append(time.perf_counter() - t0)
                self.seen(jobs)
                next_at = max(next_at + self.period, time.monotonic())  # late: no burst to catch up
        except Exception as exc:  # the run fails with it (a bench of failing polls measures nothing)
            self.error = f"{self.shape} poller {self.name}: {type(exc).__name__}: {exc}"
        finally:
            self.close()

    def seen(self, jobs: list[dict[str, Any]]) -> None:
        states = {j["id"]: j["state"] for j in jobs}
        missing = [i for i in self.active if i not in states]
        if missing:
            raise RuntimeError(f"job(s) {', '.join(missing[:5])} missing from the reply")
        self.active = [i for i in self.active if states[i] not in TERMINAL]

    def poll(self, fields: dict[str, Any]) -> list[dict[str, Any]]:
        if self.mode == "http":
            return self._poll_http(fields)
        import cbor2

        from reckon.daemon.blocking import websocket as ws
        from reckon.daemon.client_common import parse_controller_url

        deadline = time.monotonic() + POLL_TIMEOUT
        if self._ws is None:
            _, host, port = parse_controller_url(self.ws_url)
            self._ws = ws.WebSocket(ws.connect(host, port, timeout=POLL_TIMEOUT))
            self._ws.handshake(f"{host}:{port}", "/client", [], deadline)
        self._ws.send_binary(cbor2.dumps({"op": "query", **fields}), deadline)
        reply = cbor2.loads(self._ws.receive(deadline, 256 * 1024 * 1024))
        if self.mode == "fresh":
            self.close()
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error")))
        return reply["jobs"]

    def _poll_http(self, fields: dict[str, Any]) -> list[dict[str, Any]]:
        import http.client
        from urllib.parse import urlencode, urlsplit

        if self._http is None:
            where = urlsplit(self.http_url)
            self._http = http.client.HTTPConnection(where.hostname, where.port, timeout=POLL_TIMEOUT)
        params = {k: (",".join(v) if isinstance(v, list) else repr(v)) for k, v in fields.items() if v is not None}
        self._http.request("GET", "/api/v1/query?" + urlencode(params))
        response = self._http.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
        return json.loads(body)["jobs"]

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close(time.monotonic() + 1.0)
            self._ws = None
        if self._http is not None:
            self._http.close()
            self._http = None


def poller_main() -> int:
    """The poller process: its plan as one JSON line on stdin, then polls until ``stop`` (or
    end of input); one JSON line of results on stdout."""
    import resource

    config = json.loads(sys.stdin.readline())
    pollers = [_Poller(config, plan) for plan in config["clients"]]
    stop = threading.Event()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    threads = [threading.Thread(target=p.run, args=(stop, k * (1.0 / config["rate"]) / len(pollers)), daemon=True)
               for k, p in enumerate(pollers)]
    for t in threads:
        t.start()
    sys.stdin.readline()  # "stop", or the bench ended
    stop.set()
    for t in threads:
        t.join(POLL_TIMEOUT + 5)
    elapsed = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    latencies = sorted(x for p in pollers for x in p.latencies)
    errors = [p.error for p in pollers if p.error is not None]
    print(json.dumps({
        "polls": len(latencies), "seconds": elapsed, "errors": errors,
        "median_s": statistics.median(latencies) if latencies else None,
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None,
        "client_cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)}), flush=True)
    return 0


# ---- one run ------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _wait(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 900.0) -> None:
    with trio.move_on_after(timeout):
        while not await predicate():
            await trio.sleep(0.05)
        return
    raise RuntimeError(f"timed out waiting for {what}")


async def _terminal(client: Client) -> int:
    counts = (await client.call("status"))["status"]["jobs"]
    return sum(counts.get(s, 0) for s in TERMINAL)


def _plans(ids: list[str], clients: int) -> list[dict[str, Any]]:
    """Client k's jobs are every ``clients``-th id from k (named ``poll-k`` at submit)."""
    return [{"shape": SHAPES[k % len(SHAPES)], "name": f"poll-{k}", "ids": ids[k::clients]}
            for k in range(clients)]


async def _http_url(cluster: LocalCluster) -> str:
    """The HTTP API's base URL, from the controller's second line (``--http``)."""
    line = await trio.to_thread.run_sync(cluster.procs["controller"].stdout.readline)
    text = line.decode()
    if "HTTP API on " not in text:
        raise RuntimeError(f"controller did not start its HTTP API: {line!r}")
    return text.split("HTTP API on ", 1)[1].split("/api/v1/", 1)[0]


async def poll_run(args: argparse.Namespace, mode: str | None) -> dict[str, Any]:
    """One run of ``args.jobs`` jobs, polled in ``mode`` (None: alone); its figures."""
    async def body(cluster: LocalCluster) -> dict[str, Any]:
        await cluster.start_controller(*(["--http", "127.0.0.1:0"] if mode == "http" else []))
        http = await _http_url(cluster) if mode == "http" else None
        for i in range(args.agents):
            await cluster.start_agent(f"agent-{i}", args.slots, "--executor", "null")
        poller = None
        try:
            async with Client(cluster.url, None) as client:
                async def all_joined() -> bool:
                    nodes = (await client.call("nodes"))["nodes"]
                    return sum(n["state"] == "IDLE" for n in nodes) == args.agents
                await _wait(all_joined, "agents to join")
                specs = [{"name": f"poll-{i % args.clients}", "command": ["true"], "cwd": None, "env": [],
                          "slots": 1} for i in range(args.jobs)]
                if mode is not None:  # started (interpreter, imports) before the clock
                    with open(cluster.log_path("pollers"), "ab") as log:
                        poller = subprocess.Popen([sys.executable, "-m", "reckon.daemon.bench.poll"],
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
                pid = cluster.pid("controller")
                cpu0 = _cpu_seconds(pid)
                t0 = time.perf_counter()
                ids = (await client.call("submit_many", specs=specs))["jobs"]
                if poller is not None:
                    config = {"mode": mode, "ws": cluster.url, "http": http, "rate": args.rate, "whole": args.whole,
                              "clients": _plans(ids, args.clients)}
                    assert poller.stdin is not None
                    poller.stdin.write(json.dumps(config).encode() + b"\n")
                    poller.stdin.flush()

                async def done() -> bool:
                    return await _terminal(client) >= args.jobs
                await _wait(done, "all jobs to finish")
                elapsed = time.perf_counter() - t0
                figures: dict[str, Any] = {"jobs_per_s": args.jobs / elapsed,
                                           "controller_cpu_s": _cpu_seconds(pid) - cpu0}
                failed = (await client.call("status"))["status"]["jobs"].get("FAILED", 0)
                if failed:
                    raise RuntimeError(f"{failed} benchmark job(s) failed: see the agents' logs")
            if poller is not None:
                out, _ = await trio.to_thread.run_sync(lambda: poller.communicate(b"stop\n", timeout=120))
                result = json.loads(out)
                if result["errors"]:
                    raise RuntimeError(f"{len(result['errors'])} poller(s) failed, first: {result['errors'][0]}")
                if not result["polls"]:
                    raise RuntimeError("no poll was made")
                figures.update(result)
            return figures
        finally:
            if poller is not None and poller.poll() is None:
                poller.kill()
                poller.wait()
    base = Path(tempfile.mkdtemp(prefix="reckon-bench-poll-"))
    cluster = LocalCluster(base)
    try:
        with trio.fail_after(HANG_GUARD):
            return await body(cluster)
    finally:
        cluster.stop_all()
        if args.keep:
            print(f"(kept {base})", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


# ---- the bench ----------------------------------------------------------------------------


def run_poll_bench(args: argparse.Namespace, quiet: bool) -> tuple[dict[str, Any], list[str]]:
    """(figures, summary lines) of ``reckon bench poll``."""
    modes = list(dict.fromkeys(args.modes))
    runs: list[dict[str, Any]] = []

    async def all_runs() -> None:
        for i in range(args.runs):  # alone and each mode in turn: every repetition sees the same machine
            one = {"alone": await poll_run(args, None)}
            for mode in modes:
                one[mode] = await poll_run(args, mode)
            runs.append(one)
            if not quiet:
                print(f"  run {i + 1}/{args.runs}: alone {one['alone']['jobs_per_s']:.0f} jobs/s; " + "; ".join(
                    f"{m} {one[m]['jobs_per_s']:.0f} jobs/s, {one[m]['polls']} polls, median "
                    f"{one[m]['median_s'] * 1e3:.1f} ms" for m in modes), file=sys.stderr, flush=True)
    trio.run(all_runs)

    alone = summary([r["alone"]["jobs_per_s"] for r in runs])
    out: dict[str, Any] = {"jobs": args.jobs, "agents": args.agents, "slots": args.slots, "clients": args.clients,
                           "rate": args.rate, "whole": args.whole, "alone_jobs_per_s": alone, "modes": {}}
    lines = [f"poll, null executor, {args.agents} agents x {args.slots} slots, {args.jobs} jobs, "
             f"{args.clients} clients x {args.rate:g} polls/s (half squeue --job IDS, half sacct --name; "
             f"{'whole objects' if args.whole else 'the fields those commands ask for'})",
             f"alone: {summary_text(alone, 'jobs/s', digits=0)}"]
    for mode in modes:
        rows = [r[mode] for r in runs]
        figures = {
            "jobs_per_s": summary([r["jobs_per_s"] for r in rows]),
            "drop": summary([1 - r[mode]["jobs_per_s"] / r["alone"]["jobs_per_s"] for r in runs]),
            "polls_per_s": summary([r["polls"] / r["seconds"] for r in rows]),
            "latency_median_s": summary([r["median_s"] for r in rows]),
            "latency_p99_s": summary([r["p99_s"] for r in rows]),
            "controller_cpu_per_poll_s": summary(
                [(r[mode]["controller_cpu_s"] - r["alone"]["controller_cpu_s"]) / r[mode]["polls"] for r in runs]),
            "client_cpu_per_poll_s": summary([r["client_cpu_s"] / r["polls"] for r in rows]),
        }
        out["modes"][mode] = figures
        lines.append(f"{mode}: {summary_text(figures['jobs_per_s'], 'jobs/s', digits=0)}; drop "
                     f"{figures['drop']['median'] * 100:.1f} % (target < 20 %)")
        lines.append(f"  {figures['polls_per_s']['median']:.0f} polls/s; latency median "
                     f"{figures['latency_median_s']['median'] * 1e3:.1f} ms (target < 100 ms), p99 "
                     f"{figures['latency_p99_s']['median'] * 1e3:.1f} ms; controller CPU per poll "
                     f"{figures['controller_cpu_per_poll_s']['median'] * 1e3:.2f} ms, the pollers' "
                     f"{figures['client_cpu_per_poll_s']['median'] * 1e3:.2f} ms")
    return out, lines


if __name__ == "__main__":
    sys.exit(poller_main())
