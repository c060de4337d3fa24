"""`reckon bench` at small N: every benchmark runs end to end and reports sane figures.

Figures themselves are never asserted against targets here (shared, noisy machines):
only that each benchmark measures what it says and cleans up after itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from reckon.daemon.bench.plot import line_plot

pytestmark = pytest.mark.e2e


def bench(*args: str, timeout: float = 180) -> dict:
    proc = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "bench", *args, "--runs", "1", "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _sane(summary: dict) -> None:
    assert summary["runs"] == 1 and 0 < summary["min"] <= summary["median"] <= summary["max"]


def test_throughput_null_executor():
    out = bench("throughput", "--jobs", "60", "--agents", "2", "--slots", "4", "--executor", "null")
    assert (out["jobs"], out["agents"], out["executor"]) == (60, 2, "null")
    _sane(out["jobs_per_s"])
    cpu = out["cpu_seconds_per_job"]  # measured from /proc: the controller works for every job
    assert set(cpu) == {"controller", "agents"} and cpu["controller"]["median"] > 0
    assert all(c["runs"] == 1 and 0 <= c["min"] <= c["max"] for c in cpu.values())


def test_throughput_process_executor():
    out = bench("throughput", "--jobs", "20", "--agents", "1", "--slots", "4")
    _sane(out["jobs_per_s"])


def test_launch_path_alone():
    out = bench("launch", "--jobs", "30", "--concurrency", "8")
    assert (out["jobs"], out["concurrency"]) == (30, 8)
    _sane(out["jobs_per_s"])
    _sane(out["cpu_seconds_per_job"])  # the launcher, supervisors and jobs are reaped, so they count


def test_resync_stages_time_every_stage_of_one_round():
    out = bench("resync-stages", "--jobs", "50")
    (one,) = out["rounds"]
    assert one["jobs"] == 50 and len(one["per_job_seconds"]) == 8
    for s in one["per_job_seconds"].values():
        _sane(s)
    assert one["total_per_job_seconds"]["median"] == pytest.approx(
        sum(s["median"] for s in one["per_job_seconds"].values()))


@pytest.mark.long  # about 10 s; test_resync_stages_... runs the resync bench in `make test`
def test_resync_with_plot(tmp_path):
    plot = tmp_path / "resync.svg"
    out = bench("resync", "--jobs", "10", "40", "--plot", str(plot))
    assert [r["jobs"] for r in out["rounds"]] == [10, 40]
    for r in out["rounds"]:
        _sane(r["seconds"])
        assert r["per_job_seconds"]["median"] == pytest.approx(r["seconds"]["median"] / r["jobs"])
    assert ET.parse(plot).getroot().tag.endswith("svg")


def test_recovery_short_outage():
    out = bench("recovery", "--outages", "0.5")
    assert out["outages"][0]["outage_s"] == 0.5
    _sane(out["outages"][0]["recovery_s"])


def test_restart_with_history():
    out = bench("restart", "--facts", "3000")
    h = out["histories"][0]
    assert h["facts"] == 3000 and h["facts_written"] == 3000 and 0 < h["jobs"] <= 3000
    _sane(h["restart_s"])


def test_memory_per_job():
    out = bench("memory", "--jobs", "2000")
    _sane(out["sizes"][0]["bytes_per_job"])


def test_plot_rejects_a_single_point():
    with pytest.raises(ValueError):
        line_plot([(1, 1.0)], title="t", xlabel="x", ylabel="y")
    svg = line_plot([(1_000, 0.1), (100_000, 2.0)], title="a<b", xlabel="x", ylabel="y")
    root = ET.fromstring(svg)
    assert len([e for e in root.iter() if e.tag.endswith("circle")]) == 2


@pytest.mark.long  # about 9 s; the munge cluster's run below covers `bench cli` in `make test`
def test_cli_bench():
    out = bench("cli", "--jobs", "4", "--slots", "4")
    assert out["jobs"] == 4 and out["bulk"] in ("--file", "--array")
    for key in ("submit_ms", "submit_cpu_ms", "submits_per_s", "show_ms", "jobs_ms", "bulk_submit_s",
                "bulk_jobs_per_s"):
        _sane(out[key])
    for name in ("sbatch", "squeue", "sacct"):  # timed when this build has them, else said to be skipped
        assert (name in out["slurm_skipped"]) != (f"{name}_ms" in out), out
        if name not in out["slurm_skipped"]:
            _sane(out[f"{name}_ms"])


def test_the_cli_bench_skips_a_slurm_command_it_cannot_find(tmp_path):
    from reckon.daemon.bench.cli import reckon_argv, slurm_commands

    found, skipped = slurm_commands(reckon_argv(), ["sbatch", "squeue"], tmp_path / "bin", dict(os.environ))
    assert sorted([*found, *(line.split(":")[0] for line in skipped)]) == ["sbatch", "squeue"]
    assert all("skipped" in line for line in skipped)
    assert slurm_commands(reckon_argv(), [], tmp_path / "bin", {}) == ({}, [])


def test_cli_bench_on_a_munge_cluster_times_the_credential_too(munged):
    out = bench("cli", "--jobs", "3", "--slots", "4", "--auth", "munge", "--munge-socket", munged.socket)
    assert out["auth"] == "munge" and set(out["by_auth"]) == {"munge"}
    for key in ("submit_ms", "bulk_jobs_per_s", "libmunge_encode_ms", "libmunge_decode_ms", "program_encode_ms",
                "program_decode_ms"):
        _sane(out[key])


def test_cli_bench_without_munged_says_so_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "bench", "cli", "--auth", "both",
                           "--munge-socket", str(tmp_path / "none"), "--runs", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"reckon: bench cli --auth both needs a munged: munged at {tmp_path / 'none'} cannot be "
                           "reached (is munged running there? --munge-socket names another): "), line


def test_poll_alone_and_polled_in_every_mode():
    """The one end-to-end check of `bench poll`: each mode polls (squeue and sacct shapes), no poll
    fails or misses a job (the bench raises), and the figures are there."""
    out = bench("poll", "--jobs", "60", "--agents", "1", "--slots", "8", "--clients", "4", "--rate", "5")
    assert (out["jobs"], out["clients"]) == (60, 4)
    _sane(out["alone_jobs_per_s"])
    assert set(out["modes"]) == {"fresh", "kept", "http"}
    for figures in out["modes"].values():
        for key in ("jobs_per_s", "polls_per_s", "latency_median_s", "latency_p99_s", "client_cpu_per_poll_s"):
            _sane(figures[key])
        assert figures["latency_median_s"]["median"] <= figures["latency_p99_s"]["median"]


def test_poll_plans_deal_the_jobs_out_and_a_missing_job_fails_the_poller():
    from reckon.daemon.bench.poll import _Poller, _plans

    plans = _plans([str(i) for i in range(1, 11)], 3)
    assert [p["ids"] for p in plans] == [["1", "4", "7", "10"], ["2", "5", "8"], ["3", "6", "9"]]
    assert [p["shape"] for p in plans] == ["squeue", "sacct", "squeue"]
    poller = _Poller({"mode": "kept", "ws": "ws://127.0.0.1:1", "rate": 10.0}, plans[0])
    poller.seen([{"id": "1", "state": "COMPLETED"}, {"id": "4", "state": "RUNNING"},
                 {"id": "7", "state": "PENDING"}, {"id": "10", "state": "FAILED"}])
    assert poller.active == ["4", "7"]  # Parsl asks no more about a finished job
    assert poller.fields()["ids"] == ["4", "7"]
    assert {"id", "state"} <= set(poller.fields()["fields"])  # what squeue --format='%i %t' asks for
    with pytest.raises(RuntimeError, match="7"):  # Parsl would take it as COMPLETED
        poller.seen([{"id": "4", "state": "RUNNING"}])
