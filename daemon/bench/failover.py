"""`reckon bench failover`: how long a leader's death or freeze keeps the cluster from serving (issue #12).

The PostgreSQL server is the operator's (``--dsn``: daemon/bench/pgdatabases.py; from a
checkout ``python -m tests.pgserver --durable -- reckon bench failover`` starts a private one),
a fresh database on it per run.  Each run starts two
controllers on it (real processes: ``a`` leads, ``b`` stands by), two agents
that know both URLs, and jobs running on both agents, each waiting on a gate
file; one of them then exits 7, the others 0.

``kill``: SIGKILL ``a``, touch the gate (the jobs end right after the kill), and
measure from the SIGKILL to

  (a) ``b`` serving: a client request answered by it (not "not the leader");
  (b) the gated job recorded with its true exit code, 7, as ``b`` reports it.

``freeze``: the same with SIGSTOP instead of SIGKILL; after (b), SIGCONT ``a``
and check that it steps down (exits 1 saying so) and that no fact of its epoch
was committed after ``b``'s took over.

Every run checks the log itself too: the gated job has exactly one finish fact,
with exit code 7.  Every process (controllers, agents, the jobs, PostgreSQL)
is stopped however the bench ends, Ctrl-C included, and the databases it made are dropped.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from reckon.daemon.bench.pgdatabases import BenchDatabases
from reckon.daemon.client import Client, ClientError
from reckon.daemon.procs import LocalCluster
from reckon.daemon.bench.figures import summary, summary_text

VARIANTS = ("kill", "freeze")
POLL = 0.01  # seconds between two probes of b (each a fresh connection: a standby's answer is final)
HANG_GUARD = 120.0  # seconds: no wait of a run lasts longer
GATE_LIMIT = 600  # seconds a gated job waits at most, so that no job outlives a broken run
# The job polls for the gate in-process (no fork per poll): its exit follows the gate within ~5 ms.
GATED = ("import os, sys, time\nend = time.monotonic() + {limit}\n"
         "while not os.path.exists({gate!r}) and time.monotonic() < end: time.sleep(0.005)\nsys.exit({code})")
_TAKEOVER = re.compile(rb"took over with \d+ jobs after replaying the last (\d+) facts in ([0-9.]+)s")


def _spec(gate: Path, code: int, name: str) -> dict:
    script = GATED.format(limit=GATE_LIMIT, gate=str(gate), code=code)
    return {"name": name, "command": [sys.executable, "-c", script], "cwd": None, "env": [], "slots": 1}


async def _wait(what: str, probe: Any, interval: float = 0.05) -> Any:
    with trio.move_on_after(HANG_GUARD):
        while not (value := await probe()):
            await trio.sleep(interval)
        return value
    raise RuntimeError(f"timed out after {HANG_GUARD:.0f}s waiting for {what}")


async def _ask(url: str, op: str, **fields: Any) -> dict | None:
    """One request on a fresh connection; None if the controller does not serve (yet)."""
    try:
        # Ask this controller only: following a standby's pointer to the frozen leader would
        # spend the connect time-out there on every poll and hide when the standby takes over.
        async with Client(url, None, follow_leader=False) as client:
            return await client.call(op, **fields)
    except ClientError:
        return None


def _log_of(dsn: str) -> list[tuple[int, int, Any]]:
    """(seq, epoch, fact) of every fact in the shared log."""
    import cbor2
    import psycopg

    from reckon.model import facts as F

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT seq, epoch, data FROM fact ORDER BY seq").fetchall()
    return [(seq, epoch, F.decode(cbor2.loads(bytes(data)))) for seq, epoch, data in rows]


async def failover_run(server: BenchDatabases, args: argparse.Namespace, variant: str,
                       cluster: LocalCluster) -> dict[str, float]:
    """One run on a fresh database; its figures (seconds from the signal).  The caller stops
    ``cluster``'s processes (outside trio: whatever interrupted the run)."""
    from reckon.model import facts as F

    dsn = await trio.to_thread.run_sync(server.new_database)
    base = cluster.base
    gate = base / "gate"
    common = ("--lease", f"{args.lease:g}", "--rejoin-grace", "0")
    a = await cluster.start_ha_controller("ctl-a", dsn, *common)
    await _wait("controller a to lead", lambda: _ask(a, "status"))
    b = await cluster.start_ha_controller("ctl-b", dsn, *common)
    await _wait("controller b to stand by",
                lambda: _true("standing by" in cluster.log_path("ctl-b").read_text(errors="replace")))
    for name in ("agent-1", "agent-2"):
        await cluster.start_agent(name, args.slots, controller=f"{a},{b}")

    async def agents_idle() -> bool:
        nodes = await _ask(a, "nodes")
        return nodes is not None and sum(n["state"] == "IDLE" for n in nodes["nodes"]) == 2
    await _wait("both agents to join", agents_idle)
    specs = [_spec(gate, 7, "gated")] + [_spec(gate, 0, f"other-{i}") for i in range(2 * args.slots - 1)]
    reply = await _ask(a, "submit_many", specs=specs)
    if reply is None:
        raise RuntimeError("controller a refused the jobs")
    gated = reply["jobs"][0]

    async def all_running() -> bool:
        counts = (await _ask(a, "status") or {}).get("status", {}).get("jobs", {})
        return counts.get("RUNNING", 0) == len(specs)
    await _wait("every job to run", all_running)

    t0 = time.monotonic()
    if variant == "kill":
        cluster.kill("ctl-a")  # its database session ends with it
    else:
        cluster.signal("ctl-a", signal.SIGSTOP)  # its session stays open: the lease must run out
    gate.touch()  # every job ends right after the signal, while no controller serves
    serving = recorded = None
    with trio.move_on_after(HANG_GUARD):
        while serving is None or recorded is None:
            if serving is None and await _ask(b, "status") is not None:
                serving = time.monotonic() - t0
            if serving is not None:
                job = (await _ask(b, "show", job=gated) or {}).get("job", {})
                if job.get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
                    if job.get("exit_code") != 7:
                        raise RuntimeError(f"the gated job was recorded with exit code {job.get('exit_code')}, "
                                           "not its true 7")
                    recorded = time.monotonic() - t0
                    break
            await trio.sleep(POLL)
    if serving is None or recorded is None:
        raise RuntimeError(f"timed out: b serving after {serving}, the gated job recorded after {recorded}; "
                           f"see the logs in {base} (--keep)")
    epoch_one_at_takeover = sum(1 for _, epoch, _ in await trio.to_thread.run_sync(_log_of, dsn) if epoch == 1)
    figures = {"serving_s": serving, "recorded_s": recorded}
    if variant == "freeze":
        figures["step_down_s"] = await _step_down(cluster)
    log = await trio.to_thread.run_sync(_log_of, dsn)
    finished = [f for _, _, f in log if isinstance(f, F.JobFinished) and f.job == gated]
    if len(finished) != 1 or finished[0].exit_code != 7:
        raise RuntimeError(f"the gated job's finish facts: {finished}, expected one with exit code 7")
    epochs = [epoch for _, epoch, _ in log]
    if epochs != sorted(epochs) or sum(1 for e in epochs if e == 1) != epoch_one_at_takeover:
        raise RuntimeError("a fact of epoch 1 was committed after epoch 2 began")
    took_over = _TAKEOVER.search(cluster.log_path("ctl-b").read_bytes())
    if took_over:
        figures.update(tail_facts=float(took_over.group(1)), tail_replay_s=float(took_over.group(2)))
    return figures


async def _true(value: bool) -> bool:
    return value


async def _step_down(cluster: LocalCluster) -> float:
    """SIGCONT the frozen leader; seconds until it exited 1 saying it stepped down."""
    proc = cluster.procs["ctl-a"]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGCONT)
    await _wait("the old leader to exit", lambda: _true(proc.poll() is not None), interval=0.01)
    took = time.monotonic() - t0
    log = cluster.log_path("ctl-a").read_text(errors="replace")
    if proc.returncode != 1 or "stepping down" not in log:
        raise RuntimeError(f"the old leader exited {proc.returncode} without stepping down; its log:\n{log[-2000:]}")
    cluster.procs.pop("ctl-a")
    return took


def run_failover_bench(args: argparse.Namespace, quiet: bool) -> tuple[dict[str, Any], list[str]]:
    """Every variant's figures summarised (min / median / max), and the human summary's lines."""
    out: dict[str, Any] = {"lease_s": args.lease, "slots": args.slots}
    lines: list[str] = []
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    with BenchDatabases(args.dsn) as server:
        for variant in variants:
            runs: list[dict[str, float]] = []
            for i in range(args.runs):
                base = Path(tempfile.mkdtemp(prefix=f"reckon-bench-failover-{variant}-"))
                cluster = LocalCluster(base)
                try:
                    runs.append(trio.run(failover_run, server, args, variant, cluster))
                finally:
                    # Here, not in the trio run: a Ctrl-C (or SIGTERM) may have broken that run anywhere.
                    (base / "gate").touch()  # no job waits on past the run
                    cluster.stop_all()  # (SIGCONTs a frozen controller first)
                    if args.keep:
                        print(f"(kept {base})", file=sys.stderr)
                    else:
                        shutil.rmtree(base, ignore_errors=True)
                if not quiet:
                    r = runs[-1]
                    print(f"  {variant} run {i + 1}/{args.runs}: serving {r['serving_s']:.2f} s, recorded "
                          f"{r['recorded_s']:.2f} s", file=sys.stderr, flush=True)
            s = {key: summary([r[key] for r in runs if key in r]) for key in runs[0]}
            out[variant] = s
            signal_name = "SIGKILL" if variant == "kill" else "SIGSTOP"
            target = 3.0 if variant == "kill" else args.lease + 3.0
            lines.append(f"{signal_name} of the leader (lease {args.lease:g} s), {2 * args.slots} jobs on 2 agents:")
            lines.append(f"  (a) new leader serving: {summary_text(s['serving_s'], 's')}")
            lines.append(f"  (b) completion recorded: {summary_text(s['recorded_s'], 's')} (target < {target:g} s: "
                         f"{'met' if s['recorded_s']['median'] < target else 'MISSED'})")
            if "tail_facts" in s:
                lines.append(f"  takeover replayed a tail of median {s['tail_facts']['median']:.0f} facts in "
                             f"{s['tail_replay_s']['median'] * 1e3:.0f} ms")
            if "step_down_s" in s:
                lines.append(f"  the old leader, continued after (b), stepped down and committed nothing "
                             f"(it exited median {s['step_down_s']['median']:.2f} s after its SIGCONT)")
    return out, lines
