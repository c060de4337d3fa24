"""`reckon bench cli`: the command line as a user's shell drives it (issue #10).

Against a real controller and agent on loopback:

* a loop of N ``reckon submit -- true``, a fresh process each, as ``for i in
  ...; do reckon submit ...; done`` would run them: the median wall time of
  one submit (process start to exit) and submits per second;
* ``reckon show`` and ``reckon jobs`` likewise (median of a few calls);
* N jobs through one bulk submit (``--array 1-N`` if this build has it,
  else ``--file`` of N lines), from the submit's start to all N terminal:
  jobs per second end to end, and the submit call's own time;
* Slurm's commands as the workflow tools call them (``--slurm``: ``sbatch --parsable --wrap
  true``, Parsl's ``squeue --noheader --format='%i %t' --job IDS`` and ``sacct -X --parsable2
  --noheader --format=JobID,State --job IDS``), from the directory ``reckon slurm-commands DIR``
  fills: the median of a few calls each.  One this build does not have (no ``slurm-commands``,
  or no such file in DIR) is skipped, and the summary says so; nothing on ``PATH`` is used, so
  a real Slurm is never timed by mistake.

``--auth munge`` runs the same on a munge cluster: every CLI call gets a credential from munged
(daemon/auth/munge.py) and the controller decodes it; it also times one credential alone, made
and decoded through libmunge and through the ``munge``/``unmunge`` programs (``credential_costs``).
``--auth both`` alternates the two modes run after run, so both see the same machine.

Slurm's figures on the same machine, for comparison, are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from reckon.daemon.auth import munge
from reckon.daemon.auth.client import ClientAuth
from reckon.daemon.bench.figures import summary
from reckon.daemon.client import Client, ClientError
from reckon.daemon.procs import LocalCluster

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
READ_CALLS = 20  # `show` and `jobs` calls per run (at most N)
CREDENTIAL_CALLS = 200  # credentials timed per run and way (libmunge; the programs)
HANG_GUARD = 600.0  # seconds: no wait of a run lasts longer
BULK_MODE = "--array"  # how the bulk run submits its jobs in one `reckon submit` ("--file": a file of lines)
POLLED_IDS = 5  # jobs named in each squeue/sacct poll (as Parsl names its running blocks)


def _slurm_argv(name: str, ids: list[str]) -> list[str]:
    """A call of Slurm command ``name`` as a workflow tool makes it (the module docstring)."""
    joined = ",".join(ids[:POLLED_IDS])
    return {"sbatch": ["--parsable", "--wrap", "true"],
            "squeue": ["--noheader", "--format=%i %t", "--job", joined],
            "sacct": ["-X", "--parsable2", "--noheader", "--format=JobID,State", "--job", joined]}[name]


SLURM_COMMANDS = ("sbatch", "squeue", "sacct")


def slurm_commands(reckon: list[str], names: list[str], where: Path,
                   env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The installed Slurm-style commands among ``names`` (name -> path in ``where``), and a line for
    each one skipped, with why (this build has no ``reckon slurm-commands``, or not that command)."""
    if not names:
        return {}, []
    proc = subprocess.run([*reckon, "slurm-commands", str(where)], capture_output=True, text=True, env=env,
                          timeout=HANG_GUARD)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        if "invalid choice: 'slurm-commands'" in why:
            why = "this build has no `reckon slurm-commands`"
        return {}, [f"{name}: skipped ({why})" for name in names]
    found = {name: str(where / name) for name in names if os.access(where / name, os.X_OK)}
    return found, [f"{name}: skipped (`reckon slurm-commands` made no {name})" for name in names if name not in found]


def reckon_argv() -> list[str]:
    """The installed console script (what a user runs), else ``python -m reckon.daemon.cli``."""
    script = Path(sys.executable).parent / "reckon"
    return [str(script)] if script.exists() else [sys.executable, "-m", "reckon.daemon.cli"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str], cwd: Path, cpu: list[float] | None = None) -> tuple[float, str]:
    """Run one CLI process; its wall time and stdout.  Its CPU time (user + system) goes to ``cpu``.

    The CPU time is what a loaded machine does not inflate much (the wall time
    also counts waiting for a core): both are reported.  The daemons are
    children of this process too, but are reaped only at the end of a run.
    """
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=HANG_GUARD)
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(_children_cpu() - cpu0)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-4:])} exited {proc.returncode}: {proc.stderr.strip()}")
    return elapsed, proc.stdout


async def _terminal(client: Client) -> int:
    counts = (await client.call("status"))["status"]["jobs"]
    return sum(counts.get(s, 0) for s in TERMINAL)


async def _until_terminal(client: Client, total: int) -> None:
    with trio.fail_after(HANG_GUARD):
        while await _terminal(client) < total:
            await trio.sleep(0.02)


def credential_costs(socket: str, calls: int = CREDENTIAL_CALLS) -> dict[str, float]:
    """Median milliseconds of one credential made and one decoded, through libmunge and the programs."""
    def median_ms(encode: Any, decode: Any) -> tuple[float, float]:
        made, read = [], []
        for _ in range(calls):
            t0 = time.perf_counter()
            credential = encode(socket)
            t1 = time.perf_counter()
            decode(credential, socket)
            made.append(t1 - t0)
            read.append(time.perf_counter() - t1)
        return statistics.median(made) * 1e3, statistics.median(read) * 1e3

    lib = median_ms(munge.encode, munge.decode)
    programs = median_ms(munge.encode_with_program, munge.decode_with_program)
    return {"libmunge_encode_ms": lib[0], "libmunge_decode_ms": lib[1],
            "program_encode_ms": programs[0], "program_decode_ms": programs[1]}


async def cli_run(args: argparse.Namespace, base: Path, mode: str, auth: str = "token") -> dict[str, float]:
    """One run on a fresh cluster (``auth``: token or munge); its figures (see the module docstring)."""
    import os

    cluster = LocalCluster(base)
    socket = munge.resolve_socket(args.munge_socket)
    auth_args = ["--auth", "munge", "--munge-socket", socket] if auth == "munge" else []
    try:
        await cluster.start_controller("--rejoin-grace", "0", *auth_args)
        # On a munge cluster the bench's jobs are its caller's: run as root, they need --allow-root-jobs.
        root_jobs = ["--allow-root-jobs"] if auth == "munge" and os.geteuid() == 0 else []
        await cluster.start_agent("agent-1", args.slots, "--executor", args.executor, *auth_args, *root_jobs)
        # As an installed package has it: bytecode compiled once, not on every call (the run's
        # own cache, so a PYTHONDONTWRITEBYTECODE environment or a read-only tree changes nothing).
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RECKON_CONTROLLER=cluster.url, PYTHONPYCACHEPREFIX=str(base / "pycache"))
        if auth == "munge":
            env.update(RECKON_AUTH="munge", RECKON_MUNGE_SOCKET=socket)
        client_auth = ClientAuth(mode="munge", munge_socket=socket) if auth == "munge" else None
        reckon = reckon_argv()
        for warm_up in (["show", "0"], ["submit", "--slots", "0", "--", "true"]):  # fail, submit nothing
            await trio.to_thread.run_sync(
                lambda: subprocess.run([*reckon, *warm_up], capture_output=True, env=env, timeout=HANG_GUARD))
        async with Client(cluster.url, client_auth) as client:
            with trio.fail_after(HANG_GUARD):
                while not any(n["state"] == "IDLE" for n in (await client.call("nodes"))["nodes"]):
                    await trio.sleep(0.02)

            submit_cpu: list[float] = []
            show_cpu: list[float] = []
            jobs_cpu: list[float] = []

            def loop() -> tuple[list[float], float, list[str]]:
                times, ids = [], []
                t0 = time.perf_counter()
                for _ in range(args.jobs):
                    elapsed, out = _timed([*reckon, "submit", "--", "true"], env, base, submit_cpu)
                    times.append(elapsed)
                    ids.append(out.strip())
                return times, time.perf_counter() - t0, ids

            submit_times, loop_s, ids = await trio.to_thread.run_sync(loop)
            reads = min(READ_CALLS, args.jobs)
            show = await trio.to_thread.run_sync(
                lambda: [_timed([*reckon, "show", ids[i]], env, base, show_cpu)[0] for i in range(reads)])
            listing = await trio.to_thread.run_sync(
                lambda: [_timed([*reckon, "jobs"], env, base, jobs_cpu)[0] for _ in range(reads)])
            await _until_terminal(client, args.jobs)

            if mode == "--array":
                bulk = [*reckon, "submit", "--array", f"1-{args.jobs}", "--", "true"]
            else:
                lines = base / "jobs.txt"
                lines.write_text("true\n" * args.jobs)
                bulk = [*reckon, "submit", "--file", str(lines)]
            t0 = time.perf_counter()
            submit_s, _ = await trio.to_thread.run_sync(_timed, bulk, env, base)
            await _until_terminal(client, 2 * args.jobs)
            bulk_s = time.perf_counter() - t0
            failed = (await client.call("status"))["status"]["jobs"].get("FAILED", 0)
            if failed:
                raise RuntimeError(f"{failed} benchmark job(s) failed: see the agent's log in {base}")

            # Last, so that the jobs sbatch adds change none of the counts above.
            found, _ = await trio.to_thread.run_sync(
                slurm_commands, reckon, list(getattr(args, "slurm", SLURM_COMMANDS)), base / "slurm-bin", env)
            slurm: dict[str, tuple[list[float], list[float]]] = {}
            for name, path in found.items():
                cpu: list[float] = []
                argv = [path, *_slurm_argv(name, ids)]
                wall = await trio.to_thread.run_sync(
                    lambda argv=argv, cpu=cpu: [_timed(argv, env, base, cpu)[0] for _ in range(reads)])
                slurm[name] = (wall, cpu)
    finally:
        cluster.stop_all()
    ms = lambda values: statistics.median(values) * 1e3  # noqa: E731
    costs = await trio.to_thread.run_sync(credential_costs, socket) if auth == "munge" else {}
    slurm_figures = {f"{name}_{kind}": ms(values) for name, (wall, cpu) in slurm.items()
                     for kind, values in (("ms", wall), ("cpu_ms", cpu))}
    return {**costs, "submit_ms": ms(submit_times), "submit_cpu_ms": ms(submit_cpu), "submits_per_s": args.jobs / loop_s,
            "show_ms": ms(show), "show_cpu_ms": ms(show_cpu), "jobs_ms": ms(listing), "jobs_cpu_ms": ms(jobs_cpu),
            "bulk_submit_s": submit_s, "bulk_jobs_per_s": args.jobs / bulk_s, **slurm_figures}


def run_cli_bench(args: argparse.Namespace, quiet: bool) -> tuple[dict[str, Any], list[str]]:
    """Every run's figures summarised (min / median / max) by authentication mode, and the human
    summary's lines.  The first mode's figures are also the output's top-level keys (as before
    ``--auth``); each mode's are under ``by_auth``."""
    import shutil
    import tempfile

    mode = BULK_MODE
    auths = ["token", "munge"] if args.auth == "both" else [args.auth]
    if "munge" in auths:  # no munged: one line now, not a cluster that cannot start
        try:
            socket = munge.resolve_socket(args.munge_socket)
            munge.decode(munge.encode(socket), socket)
        except munge.MungeError as exc:
            raise ClientError(f"bench cli --auth {args.auth} needs a munged: {exc}") from None
    runs: dict[str, list[dict[str, float]]] = {auth: [] for auth in auths}
    for i in range(args.runs):
        for auth in auths:  # alternated run after run: both modes see the same machine
            base = Path(tempfile.mkdtemp(prefix="reckon-bench-cli-"))
            try:
                runs[auth].append(trio.run(cli_run, args, base, mode, auth))
            finally:
                if args.keep:
                    print(f"(kept {base})", file=sys.stderr)
                else:
                    shutil.rmtree(base, ignore_errors=True)
            if not quiet:
                r = runs[auth][-1]
                print(f"  cli run {i + 1}/{args.runs} ({auth}): submit {r['submit_ms']:.0f} ms, "
                      f"{r['submits_per_s']:.1f}/s; bulk {r['bulk_jobs_per_s']:.1f} jobs/s", file=sys.stderr,
                      flush=True)
    by_auth = {auth: {key: summary([r[key] for r in rs]) for key in rs[0]} for auth, rs in runs.items()}
    wanted = list(getattr(args, "slurm", SLURM_COMMANDS))
    skipped = [name for name in wanted if f"{name}_ms" not in runs[auths[0]][0]]
    out = {"jobs": args.jobs, "slots": args.slots, "executor": args.executor, "bulk": mode, "auth": args.auth,
           **by_auth[auths[0]], "by_auth": by_auth, "slurm_skipped": skipped}
    lines = []
    for auth, s in by_auth.items():
        tag = f"[{auth}] " if len(auths) > 1 or auth != "token" else ""
        lines += [
            f"{tag}`reckon submit -- true` in a loop, a process each ({args.jobs} per run): median "
            f"{s['submit_ms']['median']:.0f} ms a submit (runs: min {s['submit_ms']['min']:.0f}, max "
            f"{s['submit_ms']['max']:.0f}), CPU {s['submit_cpu_ms']['median']:.0f} ms; "
            f"{s['submits_per_s']['median']:.1f} submits/s",
            f"{tag}`reckon show`: median {s['show_ms']['median']:.0f} ms (CPU {s['show_cpu_ms']['median']:.0f} ms); "
            f"`reckon jobs`: median {s['jobs_ms']['median']:.0f} ms (CPU {s['jobs_cpu_ms']['median']:.0f} ms)",
            f"{tag}{args.jobs} jobs in one `reckon submit {mode}`, submit to all terminal ({args.executor} executor, "
            f"{args.slots} slots): {s['bulk_jobs_per_s']['median']:.1f} jobs/s (the submit itself: "
            f"{s['bulk_submit_s']['median'] * 1e3:.0f} ms)",
        ]
        timed = [name for name in wanted if f"{name}_ms" in s]
        if timed:
            lines.append(f"{tag}Slurm's commands (median of {min(READ_CALLS, args.jobs)} calls each): " + "; ".join(
                f"`{name}` {s[name + '_ms']['median']:.0f} ms (CPU {s[name + '_cpu_ms']['median']:.0f} ms)"
                for name in timed))
        if auth == "munge":
            lines.append(
                f"{tag}one credential ({CREDENTIAL_CALLS} per run, medians): libmunge makes one in "
                f"{s['libmunge_encode_ms']['median']:.2f} ms and decodes one in "
                f"{s['libmunge_decode_ms']['median']:.2f} ms; the munge/unmunge programs take "
                f"{s['program_encode_ms']['median']:.1f} ms and {s['program_decode_ms']['median']:.1f} ms")
    if skipped:
        lines.append(f"not timed: {', '.join(skipped)} (`reckon slurm-commands` of this build has no such command, "
                     "or this build has no `reckon slurm-commands`)")
    return out, lines
