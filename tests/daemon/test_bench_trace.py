"""`reckon bench trace`: the SWF reader, and replays of tiny logs whose figures are known by hand.

The full KTH replay is a benchmark (docs/performance.md, "Scheduling on a real trace"); the one
test of it here is `long` and asserts only that it completes with sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reckon.daemon.bench import swf, trace
from reckon.daemon.cli.main import build_parser
from reckon.daemon.client_common import UsageError
from reckon.model.jobs import JobState
from reckon.model.controller import ControllerConfig

KTH = Path("/work/shared/traces/KTH-SP2-1996-2.swf")

SAMPLE = """\
; Version: 2.2
; Computer: a test machine
; MaxNodes: 4
; MaxProcs: 4
; Note: a comment: with colons
;
  1   0  0 100  4 -1 -1  4 200 -1 1 1 1 -1 -1 -1 -1 -1
  2  10 90  50  2 -1 -1  2 100 -1 1 2 2 -1 -1 -1 -1 -1
  3  20 80  30 -1 -1 -1  2 100 -1 0 1 1 -1 -1 -1 -1 -1
"""


def line(number: int, submit: float, run: float | str, procs: int, req: float, *, user: int | str = 1,
         wait: float = 0, status: int = 1) -> str:
    return f"{number} {submit} {wait} {run} {procs} -1 -1 {procs} {req} -1 {status} {user} 1 -1 -1 -1 -1 -1\n"


# ---- the reader -------------------------------------------------------------------------------


def test_the_reader_reads_fields_headers_and_unknowns():
    t = swf.parse(SAMPLE.splitlines())
    assert (t.max_procs, t.max_nodes, t.header["Computer"], t.unix_start) == (4, 4, "a test machine", 0)
    assert t.header["Note"] == "a comment: with colons"
    assert [j.number for j in t.jobs] == [1, 2, 3]
    first, _, third = t.jobs
    assert (first.submit, first.wait, first.run, first.procs, first.requested_time, first.status, first.user,
            first.line) == (0.0, 0.0, 100.0, 4, 200.0, 1, 1, 7)
    assert third.procs == 2  # allocated unknown (-1): the requested processors
    assert third.status == swf.FAILED


@pytest.mark.parametrize("text, message", [
    ("1 0 0 5\n", "<swf>: line 1: 4 fields, an SWF job line has 18"),
    ("; MaxProcs: 4\n" + line(1, 0, "five", 1, 10),
     "<swf>: line 2: field 4 (run time) is 'five', not a number"),
    (line(1, 0, 5, 1, 10, user="x"), "field 12 (user id) is 'x', not an integer"),
    (line(1, 0, -5, 1, 10), "<swf>: line 1: field 4 (run time) is -5: negative, and not -1 (unknown)"),
    ("; MaxProcs: many\n", "<swf>: line 1: header MaxProcs is 'many', not an integer"),
    ("; MaxNodes: 0\n", "header MaxNodes is 0: it must be positive"),
    (";  UnixStartTime: soon\n", "line 1: header UnixStartTime is 'soon', not an integer"),
    (line(1, -1, 5, 1, 10), "line 1: job 1's submit time is unknown (-1)"),
])
def test_a_malformed_line_is_one_line_naming_it(text, message):
    with pytest.raises(swf.SwfError) as err:
        swf.parse(text.splitlines())
    assert message in str(err.value) and "\n" not in str(err.value)


def test_what_a_replay_leaves_out():
    jobs = swf.parse([line(1, 0, 5, 1, 10), line(2, 0, -1, 1, 10),
                      line(3, 0, 5, 0, 10), line(4, 0, 0, 1, 10, status=5), line(5, 0, 7, 1, 10, status=5),
                      line(6, 0, 7, 1, 10, status=0)]).jobs
    assert [swf.replay_skip(j) for j in jobs] == [None, "run time unknown", "no processors",
                                                  "cancelled before it ran", None, None]


# ---- replays whose figures are known by hand --------------------------------------------------------


def test_three_jobs_on_one_agent_wait_and_use_exactly_as_by_hand():
    # Job 1 takes all 4 CPUs for 100 s; jobs 2 and 3 (2 CPUs each) arrive at 10 and 20 and both
    # start at 100 when it ends: waits 0, 90, 80; ends 100, 150, 130.
    t = swf.parse(SAMPLE.splitlines())
    out = trace.replay(t, agents=1, cpus=4)
    r = out["replayed"]
    assert r["jobs"] == 3 and out["skipped"] == {} and out["timed_out"] == 0
    assert r["mean_wait"] == pytest.approx(170 / 3)
    assert r["mean_bounded_slowdown"] == pytest.approx((1 + 140 / 50 + 110 / 30) / 3)
    assert r["utilization"] == pytest.approx((400 + 100 + 60) / (4 * 150))
    assert r["makespan"] == pytest.approx(150)
    assert (r["worst_user"], r["worst_user_mean_wait"], r["worst_user_jobs"]) == (2, 90, 1)
    # The log's recorded waits are these too: the production figures match.
    assert out["production"]["mean_wait"] == pytest.approx(170 / 3)
    assert out["production"]["utilization"] == pytest.approx(r["utilization"])


def test_the_replay_runs_the_real_controller_model():
    t = swf.parse(SAMPLE.splitlines())
    config, scheduler = trace.setup("fifo", False)
    rep = trace.Replay(1, 4, scheduler=scheduler, config=config, base=1000.0)
    ids = rep.run(t.jobs)
    c = rep.controller
    c.validate_state()
    assert rep.scheduler.view() == c.scheduler_view()
    jobs = [c.state.jobs[j] for j in ids]
    assert [j.state for j in jobs] == [JobState.COMPLETED, JobState.COMPLETED, JobState.FAILED]  # status 0: failed
    assert [(j.submitted_at, j.started_at, j.finished_at) for j in jobs] == [
        (1000.0, 1000.0, 1100.0), (1010.0, 1100.0, 1150.0), (1020.0, 1100.0, 1130.0)]
    assert [(j.owner.uid, j.owner.user) for j in jobs] == [(10001, "user1"), (10002, "user2"), (10001, "user1")]
    assert [j.spec.time_limit for j in jobs] == [200.0, 100.0, 100.0]


def setup_or_skip(kind: str, fairshare: bool):
    try:
        return trace.setup(kind, fairshare)
    except trace.TraceError as exc:  # backfill and fair share are issue #22's other branches
        pytest.skip(str(exc))


# A 4-CPU agent. Job 1 holds 2 CPUs for 100 s; job 2 (all 4 CPUs, 10 s) arrives at 1 and can only
# start when job 1 ends; job 3 (2 CPUs, 200 s) arrives at 2 and fits at once. First fit starts it at
# once, and job 2 waits for it too (to 202); EASY backfill promises job 2 the time 100, which job 3
# would delay, so job 3 waits until job 2 has run (to 110).
WIDE = [line(1, 0, 100, 2, 100), line(2, 1, 10, 4, 10, user=2), line(3, 2, 200, 2, 200, user=3)]


@pytest.mark.parametrize("kind, starts", [("fifo", [0, 202, 2]), ("backfill", [0, 100, 110])])
def test_first_fit_passes_a_wide_job_over_and_backfill_keeps_its_promise(kind, starts):
    config, scheduler = setup_or_skip(kind, False)
    rep = trace.Replay(1, 4, scheduler=scheduler, config=config)
    ids = rep.run(swf.parse(WIDE).jobs)
    assert [rep.controller.state.jobs[j].started_at for j in ids] == starts


@pytest.mark.parametrize("reserve_after, starts", [(0.5, [0, 100, 110]), (50.0, [0, 202, 2])])
def test_backfill_reserves_only_for_a_job_queued_reserve_after(reserve_after, starts):
    """Job 2 is 1 s old when job 3 arrives: reserved for past 0.5 s (job 3 waits, as under EASY);
    not before 50 s, so job 3 starts at once, as under first fit."""
    config, scheduler = trace.setup("backfill", False, ControllerConfig(reserve_after=reserve_after))
    assert scheduler.reserve_after == reserve_after
    rep = trace.Replay(1, 4, scheduler=scheduler, config=config)
    ids = rep.run(swf.parse(WIDE).jobs)
    assert [rep.controller.state.jobs[j].started_at for j in ids] == starts


@pytest.mark.parametrize("kind, fairshare", [("fifo", False), ("fifo", True), ("backfill", False), ("backfill", True)])
def test_every_scheduler_this_build_has_gives_the_hand_figures(kind, fairshare):
    # The three jobs of SAMPLE all wait for job 1 alone: any policy gives the same figures.
    setup_or_skip(kind, fairshare)
    r = trace.replay(swf.parse(SAMPLE.splitlines()), agents=1, cpus=4, scheduler=kind, fairshare=fairshare)
    assert r["replayed"]["mean_wait"] == pytest.approx(170 / 3)


def test_a_job_running_past_its_requested_time_is_stopped_at_it():
    config, scheduler = trace.setup("fifo", False)
    out_rep = trace.Replay(1, 4, scheduler=scheduler, config=config)
    ids = out_rep.run(swf.parse([line(1, 0, 100, 1, 60)]).jobs)
    job = out_rep.controller.state.jobs[next(iter(ids))]
    assert (job.state, job.reason, job.finished_at - job.started_at, out_rep.timed_out) == (
        JobState.FAILED, "timeout", 60.0, 1)


def test_jobs_wider_than_one_agent_are_dropped_and_counted():
    t = swf.parse([line(1, 0, 10, 2, 20), line(2, 0, 10, 4, 20), line(3, 5, 10, 2, 20, user=3)])
    out = trace.replay(t, agents=2, cpus=2)
    # Two agents of 2 CPUs: jobs 1 and 3 run side by side (3 waits for nothing), job 2 cannot run.
    assert out["skipped"] == {"asks more than 2 CPUs (one agent's)": 1}
    assert out["replayed"]["jobs"] == 2 and out["replayed"]["mean_wait"] == 0
    assert out["replayed"]["utilization"] == pytest.approx((20 + 20) / (4 * 15))


def test_the_command_line_and_its_one_line_refusals(tmp_path, capsys):
    log = tmp_path / "tiny.swf"
    log.write_text(SAMPLE)
    args = build_parser().parse_args(["bench", "trace", str(log), "--agents", "1x4", "--limit", "2"])
    figures, lines = trace.run_trace_bench(args)
    assert figures["trace"]["replayed"]["jobs"] == 2
    assert lines[0] == f"log {log}: a test machine"
    assert lines[1].startswith("1 agent(s) x 4 CPUs, scheduler fifo, fair share off: 2 jobs replayed")
    assert any(x.startswith("production log") for x in lines) and any("wall time" in x for x in lines)
    args = build_parser().parse_args(["bench", "trace", str(log), "--agents", "1x4", "--scheduler", "backfill",
                                      "--reserve-after", "16h"])
    figures, lines = trace.run_trace_bench(args)
    assert figures["trace"]["reserve_after"] == 57600.0
    assert "reservations after 57,600 s (16.0 h) queued: 3 jobs replayed" in lines[1]
    for argv, message in [([str(log), "--agents", "4"], "--agents '4': give agents x CPUs each"),
                          ([str(tmp_path / "none.swf")], "none.swf: No such file or directory"),
                          ([str(log), "--limit", "0"], "--limit 0: give a positive number of jobs")]:
        args = build_parser().parse_args(["bench", "trace", *argv])
        with pytest.raises(UsageError, match=message):
            trace.run_trace_bench(args)
    log.write_text(SAMPLE + "4 5 6\n")
    with pytest.raises(UsageError, match=r"tiny.swf: line 10: 3 fields, an SWF job line has 18"):
        trace.run_trace_bench(build_parser().parse_args(["bench", "trace", str(log)]))


def test_reckon_bench_trace_prints_its_figures_and_refuses_a_bad_file_with_status_2(tmp_path):
    log = tmp_path / "tiny.swf"
    log.write_text(SAMPLE)
    run = [sys.executable, "-m", "reckon.daemon.cli", "bench", "trace", "--agents", "1x4"]
    proc = subprocess.run([*run, str(log), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["trace"]["replayed"]["mean_wait"] == pytest.approx(170 / 3)
    log.write_text(SAMPLE.replace(" 100 ", " 1OO ", 1))
    proc = subprocess.run([*run, str(log)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"reckon: {log}: line 7: field 4 (run time) is '1OO', not a number\n"


@pytest.mark.long
def test_the_whole_kth_trace_replays_with_sane_figures():
    if not KTH.exists():
        pytest.skip(f"{KTH} is not on this machine (the workload logs are not in the repository)")
    out = trace.replay(swf.read(KTH), agents=1, cpus=100)
    r = out["replayed"]
    assert r["jobs"] == 28_489 and out["skipped"] == {}
    assert 0 < r["utilization"] <= 1 and r["mean_wait"] >= 0 and r["mean_bounded_slowdown"] >= 1
    p = out["production"]
    assert (round(p["mean_wait"]), round(p["mean_bounded_slowdown"], 1), round(p["utilization"], 3)) == (
        15_390, 193.8, 0.689)  # the archive's figures for this log
