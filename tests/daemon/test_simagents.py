"""The agent simulator (daemon/bench/simagents.py) and `reckon bench scale`'s exactly-once check.

A run with faults of every kind against a real controller process must record every job's
outcome exactly once; the check must bite when the record and the simulator's truth differ.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import trio

from reckon.daemon.bench import simagents
from reckon.daemon.bench.scale import ScaleConfig, scale_run
from reckon.daemon.bench.simagents import Durations, Execution, FaultRates, check_exactly_once

pytestmark = pytest.mark.e2e

# Heartbeats fast and the controller's timeout short, so that a 2.5 s freeze costs the agent its
# session (the controller gives it up; it rejoins and its round runs), as a long freeze would.
FAST = dict(heartbeat_interval=0.3, controller_args=("--heartbeat-timeout", "1.5"))


def test_durations_parse_and_draw():
    import random

    rng = random.Random(1)
    assert Durations.parse("0").draw(rng) == 0.0
    assert Durations.parse("fixed:2").draw(rng) == 2.0
    assert 1.0 <= Durations.parse("uniform:1:3").draw(rng) <= 3.0
    assert Durations.parse("exp:5").mean == 5.0
    for bad in ("exp", "uniform:3:1", "fixed:-1", "gauss:1", "fixed:x", "exp:inf"):
        with pytest.raises(ValueError, match="bad duration distribution"):
            Durations.parse(bad)


@pytest.fixture(scope="module")
def faulty_run():
    config = ScaleConfig(agents=20, slots=2, idle=0, jobs=200, latency=6, durations=Durations("uniform", 0.1, 1.0),
                         fail_rate=0.2, seed=7, **FAST,
                         faults=FaultRates(drop=2.0, freeze=1.0, restart=1.0, freeze_for=2.5, down_for=0.5))
    return trio.run(scale_run, config)


def test_a_run_with_faults_records_every_outcome_exactly_once(faulty_run):
    run = faulty_run
    assert run.problems == []
    assert all(run.faults[kind] > 0 for kind in ("drop", "freeze", "restart")), run.faults
    assert len(run.submitted) >= 200 + 32  # the throughput jobs, the fill, the arrivals
    states = {j["state"] for j in run.jobs}
    assert {"COMPLETED", "FAILED"} <= states  # --fail-rate: some exit 1, recorded as failed
    assert all(run.finish_facts[job] == 1 for job in run.submitted)
    figures = run.figures
    assert figures["throughput"]["jobs_per_s"] > 0 and figures["throughput"]["controller_cpu_ms_per_job"] > 0
    assert figures["latency"]["dispatch_s"]["n"] > 0 and figures["latency"]["ack_s"]["n"] > 0


def _recheck(run, truth=None, jobs=None, facts=None):
    return check_exactly_once(run.submitted, run.jobs if jobs is None else jobs,
                              run.finish_facts if facts is None else facts, run.truth if truth is None else truth)


def test_the_check_bites_on_the_runs_own_record(faulty_run):
    run = faulty_run
    done = next(j for j in run.jobs if j["state"] == "COMPLETED")
    # The simulator forgets an execution: the record names one it never ran.
    truth = copy.deepcopy(run.truth)
    truth.executions[done["id"]] = [e for e in truth.executions[done["id"]] if e.agent != done["agent"]
                                    or e.attempt != done["attempt"]]
    assert any("but the simulator ran" in p for p in _recheck(run, truth=truth))
    # The simulator ran the job twice to its end.
    truth = copy.deepcopy(run.truth)
    first = next(e for e in truth.executions[done["id"]] if e.finished is not None and e.signal is None)
    truth.executions[done["id"]].append(dataclasses.replace(first, agent="another-agent"))
    assert any("ran 2 times" in p for p in _recheck(run, truth=truth))
    # The log holds the outcome twice, or not at all.
    for count in (2, 0):
        assert any(f"{count} finish facts" in p for p in _recheck(run, facts={**run.finish_facts, done["id"]: count}))
    # A job the controller lost, and one it never finished.
    assert any("unknown to the controller" in p for p in _recheck(run, jobs=[j for j in run.jobs if j is not done]))
    stuck = [{**j, "state": "RUNNING"} if j is done else j for j in run.jobs]
    assert any("still RUNNING" in p for p in _recheck(run, jobs=stuck))
    # An execution of a job this run never submitted.
    truth = copy.deepcopy(run.truth)
    truth.executions["999999"] = [Execution(job="999999", attempt=1, agent="x", started=1.0)]
    assert any("never submitted" in p for p in _recheck(run, truth=truth))


def test_the_check_bites_on_a_simulator_that_reports_another_exit_code(monkeypatch):
    """Through the real system: one job's exit is reported as 7 while the simulator ran exit 0."""
    real = simagents.SimMachine.finish
    lied: list[str] = []

    def finish(self, key, now, signal=None):
        execution = self.running.get(key)
        if execution is not None and not lied and signal is None and execution.exit_code == 0:
            lied.append(key[0])
            self.running[key] = dataclasses.replace(execution, exit_code=7)
            real(self, key, now, signal)
            execution.finished = now  # the truth keeps exit 0: the record must disagree
            return
        real(self, key, now, signal)

    monkeypatch.setattr(simagents.SimMachine, "finish", finish)
    config = ScaleConfig(agents=3, slots=2, idle=0, jobs=20, latency=0, **FAST)
    run = trio.run(scale_run, config)
    assert len(lied) == 1
    [problem] = run.problems
    assert f"job {lied[0]}: recorded FAILED exit 7" in problem and "exit 0" in problem


def test_the_command_prints_the_controllers_figures_as_json():
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "bench", "scale", "--agents", "3", "--slots", "2",
                           "--idle", "2", "--jobs", "20", "--latency", "1", "--duration", "uniform:0.1:0.3",
                           "--drop-rate", "1", "--json"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    [run] = out["runs"]
    # (3 idle agents for 2 s may cost the controller less than one clock tick: >= 0)
    assert run["idle"]["controller_cpu_pct"] >= 0 and run["idle"]["controller_rss_bytes"] > 10 * 2**20
    assert run["throughput"]["jobs"] == 20 and run["throughput"]["jobs_per_s"] > 0
    assert run["latency"]["dispatch_s"]["n"] > 0 and run["status_round_trip_s"]["n"] > 0
    assert out["jobs_checked"][0] >= 20 + 4  # the throughput jobs, the fill, the arrivals


def test_a_bad_duration_is_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "reckon.daemon.cli", "bench", "scale", "--duration", "gauss:1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "bad duration distribution 'gauss:1'" in proc.stderr and "Traceback" not in proc.stderr
