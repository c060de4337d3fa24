"""Slurm's formats of reckon's jobs and nodes (daemon/slurm/formats.py, layouts.py, cmdline.py): pure.

What the workflow tools parse is pinned here line by line: Parsl's ``squeue --noheader --format='%i %t'``
and ``sacct -X --noheader --format=jobid,state%20``, submitit's ``sacct -o JobID,State,NodeList
--parsable2``, Snakemake's ``--format=JobIdRaw,State`` and ``'%i|%T'``, dask-jobqueue's ``sinfo -o %C``.
"""

from __future__ import annotations

import time

import pytest

from reckon.daemon.slurm import cmdline as C
from reckon.daemon.slurm import formats as S
from reckon.daemon.slurm import layouts as L

NOW = 1_000_000.0


def job(id: str = "5", state: str = "RUNNING", **fields) -> dict:
    base = dict(id=id, name="job", state=state, agent="a1" if state != "PENDING" else None, attempt=1,
                exit_code=None, signal=None, submitted_at=NOW - 100,
                started_at=None if state == "PENDING" else NOW - 50,
                finished_at=None, slots=1, command=["run.sh"], cwd="/w", cancel_requested=False, requeues=0,
                reason=None, held=False, retries=0, retried=0, time_limit=None, after=[], array_id=None,
                array_index=None, user="alice", owner={"uid": 1000, "gid": 1000, "user": "alice"}, cpus=1,
                mem=None, gpus=0, gres=[], gpu_ids=[], usage=None, labels={}, array_max=None,
                stdout="/w/o", stderr="/w/e")
    base.update(fields)
    return base


def test_states_as_slurm_names_them():
    assert S.slurm_state(job(state="FAILED", reason="timeout")) == "TIMEOUT"
    assert S.slurm_state(job(state="FAILED", reason="oom")) == "OUT_OF_MEMORY"
    assert S.slurm_state(job(state="FAILED", exit_code=3)) == "FAILED"
    assert [S.STATE_CODES[s] for s in ("PENDING", "RUNNING", "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL")] == [
        "PD", "R", "CD", "CA", "TO", "NF"]


def test_times_memory_and_lists():
    assert [S.squeue_time(s) for s in (0, 65, 3725, 90061)] == ["0:00", "1:05", "1:02:05", "1-01:01:01"]
    assert [S.sacct_time(s) for s in (5, 3725, 90061, None)] == ["00:00:05", "01:02:05", "1-01:01:01", "UNLIMITED"]
    assert [S.memory(m) for m in (None, 500 << 20, 4 << 30, 3 << 29)] == ["0", "500M", "4G", "1.50G"]
    assert S.compress_indices([5, 1, 2, 3, 9, 10]) == "1-3,5,9-10"
    assert S.hostlist(["a1", "a2", "a3", "b", "a5"]) == "a[1-3,5],b"
    assert S.date(None) == "Unknown" and S.date(NOW) == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW))


def test_squeue_default_format_and_collapsed_pending_array():
    jobs = [job("5"), job("6", "PENDING", array_id="6", array_index=1, array_max=2),
            job("7", "PENDING", array_id="6", array_index=2, array_max=2),
            job("8", "PENDING", array_id="6", array_index=3, array_max=2)]
    lines = S.squeue_lines(S.array_rows(jobs, expand=False), S.parse_squeue_format(S.SQUEUE_DEFAULT), NOW)
    assert lines == [
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
        "                 5    reckon      job    alice  R       0:50      1 a1",
        "         6_[1-3%2]    reckon      job    alice PD       0:00      1 (Resources)",
    ]
    expanded = S.squeue_lines(S.array_rows(jobs, expand=True), S.parse_squeue_format("%i %t %A %F %K"), NOW,
                              header=False)
    assert expanded == ["5 R 5 5 N/A", "6_1 PD 6 6 1", "6_2 PD 7 6 2", "6_3 PD 8 6 3"]


def test_squeue_what_parsl_and_snakemake_parse():
    jobs = [job("5", "COMPLETED", exit_code=0, finished_at=NOW), job("6", "PENDING")]
    assert S.squeue_lines(jobs, S.parse_squeue_format("%i %t"), NOW, header=False) == ["5 CD", "6 PD"]
    assert S.squeue_lines(jobs, S.parse_squeue_format("%i|%T"), NOW, header=False) == ["5|COMPLETED", "6|PENDING"]


def test_squeue_widths_cut_and_justify():
    fields = S.parse_squeue_format("%5j|%.5j|%%|%j")
    assert S.squeue_lines([job(name="abcdefgh")], fields, NOW, header=False) == ["abcde|abcde|%|abcdefgh"]
    assert S.squeue_lines([job(name="ab")], fields, NOW) == ["NAME | NAME|%|NAME", "ab   |   ab|%|ab"]
    long = S.parse_squeue_long_format("JobID:6,State:.10")
    assert S.squeue_lines([job()], long, NOW, header=False) == ["5         RUNNING "]
    for bad in ("%", "%Y", "%.3"):
        with pytest.raises(C.UsageProblem):
            S.parse_squeue_format(bad)


def test_sacct_columns_steps_and_parsable():
    done = job("5", "COMPLETED", exit_code=0, finished_at=NOW - 10)
    cancelled = job("6", "CANCELLED", started_at=None, agent=None)
    rows = [r for j in (done, cancelled) for r in S.sacct_rows(j, allocations=False, now=NOW)]
    assert S.sacct_lines(rows, S.parse_sacct_format("JobID,JobName,State,ExitCode,Elapsed"), NOW, header=True,
                         parsable=None) == [
        "JobID           JobName      State ExitCode    Elapsed ",
        "------------ ---------- ---------- -------- ---------- ",
        "5                   job  COMPLETED      0:0   00:00:40 ",
        "5.batch           batch  COMPLETED      0:0   00:00:40 ",
        "5.extern         extern  COMPLETED      0:0   00:00:40 ",
        "6                   job CANCELLED+      0:0   00:00:00 ",
    ]
    # submitit: header, '|' between fields, steps with a dot (it skips them)
    assert S.sacct_lines(rows, S.parse_sacct_format("JobID,State,NodeList"), NOW, header=True, parsable="|2") == [
        "JobID|State|NodeList", "5|COMPLETED|a1", "5.batch|COMPLETED|a1", "5.extern|COMPLETED|a1",
        "6|CANCELLED by 1000|None assigned"]
    assert S.sacct_lines(rows[:1], S.parse_sacct_format("JobID,State"), NOW, header=False, parsable="|") == [
        "5|COMPLETED|"]


def test_sacct_what_parsl_and_snakemake_parse():
    jobs = [job("5", "FAILED", exit_code=2, finished_at=NOW), job("7", "RUNNING", array_id="6", array_index=2)]
    rows = [r for j in jobs for r in S.sacct_rows(j, allocations=True, now=NOW)]
    assert S.sacct_lines(rows, S.parse_sacct_format("jobid,state%20"), NOW, header=False, parsable=None) == [
        "5                          FAILED ", "6_2                       RUNNING "]
    assert S.sacct_lines(rows, S.parse_sacct_format("JobIdRaw,State"), NOW, header=False, parsable="|2") == [
        "5|FAILED", "7|RUNNING"]
    assert S.sacct_value("ExitCode", rows[0], NOW) == "2:0"
    with pytest.raises(C.UsageProblem, match='Invalid field requested: "Nope"'):
        S.parse_sacct_format("JobID,Nope")


def test_sacct_times():
    assert C.parse_time("now", NOW) == NOW
    assert C.parse_time("now-1hour", NOW) == NOW - 3600
    assert C.parse_time("now+2days", NOW) == NOW + 2 * 86400
    assert C.parse_time("2026-12-01T17:00", NOW) == time.mktime((2026, 12, 1, 17, 0, 0, 0, 0, -1))
    assert C.parse_time("2026-12-01", NOW) == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))
    local = time.localtime(NOW)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    assert C.parse_time("midnight", NOW) == midnight and C.parse_time("noon", NOW) == midnight + 43200
    assert C.parse_time("10:30", NOW) == midnight + 37800
    for bad in ("yesterday", "now-", "now-3fortnights", "2026-13-45x"):
        with pytest.raises(C.UsageProblem):
            C.parse_time(bad, NOW)


def test_the_command_line_spellings():
    options = {"-j": ("jobs", True), "--jobs": ("jobs", True), "-h": ("noheader", False),
               "--noheader": ("noheader", False), "-X": ("x", False)}
    assert C.parse_argv(["-j", "1,2", "-hX"], options) == ({"jobs": "1,2", "noheader": True, "x": True}, [])
    assert C.parse_argv(["-j1", "--noh", "rest"], options) == ({"jobs": "1", "noheader": True}, ["rest"])
    assert C.parse_argv(["--jobs=3"], options)[0] == {"jobs": "3"}
    for bad, text in ((["-q"], "invalid option -- 'q'"), (["--jobs"], "requires an argument"),
                      (["--nope"], "unrecognized option '--nope'"), (["--noheader=1"], "doesn't allow")):
        with pytest.raises(C.UsageProblem, match=text):
            C.parse_argv(bad, options)
    assert C.split_list("1,2 3") == ["1", "2", "3"]


def test_sinfo_default_and_cpus():
    nodes = [{"name": "a1", "state": "MIXED", "cpus": 4, "cpus_used": 2, "mem": 8 << 30, "gpus": [], "gres": []},
             {"name": "a2", "state": "IDLE", "cpus": 4, "cpus_used": 0, "mem": 8 << 30, "gpus": [], "gres": []},
             {"name": "a3", "state": "IDLE", "cpus": 4, "cpus_used": 0, "mem": 8 << 30, "gpus": [0], "gres": []}]
    assert L.sinfo_lines(L.sinfo_groups(nodes, False), L.parse_sinfo_format(L.SINFO_DEFAULT)) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "reckon*      up   infinite      1    mix a1",
        "reckon*      up   infinite      2   idle a[2-3]",
    ]
    assert L.sinfo_lines([nodes], L.parse_sinfo_format("%C"), header=False) == ["2/10/0/12"]
    assert L.sinfo_lines([nodes], L.parse_sinfo_format("%P %c %m %G"), header=False) == ["reckon* 4 8192 (null),gpu:1"]


def test_scontrol_show_job_and_config():
    text = L.show_job(job("7", "PENDING", array_id="6", array_index=2, held=True), NOW)
    lines = text.splitlines()
    assert lines[0] == "JobId=7 ArrayJobId=6 ArrayTaskId=2 JobName=job"
    assert all(line.startswith("   ") for line in lines[1:])
    assert "   JobState=PENDING Reason=JobHeldUser Dependency=(null)" in lines
    assert "   StdOut=/w/o" in lines
    one = L.show_job(job(), NOW, oneliner=True)
    assert "\n" not in one and one.startswith("JobId=5 JobName=job UserId=alice(1000)")
    config = L.show_config(NOW, "ws://127.0.0.1:7420", 2).splitlines()
    assert config[0].startswith("Configuration data as of ")
    assert "ClusterName             = reckon" in config and any(c.startswith("MaxArraySize ") for c in config)


def test_sacct_collapses_an_arrays_pending_members_as_submitit_reads_them():
    jobs = [job("6", "RUNNING", array_id="6", array_index=1, array_max=2),
            job("7", "PENDING", array_id="6", array_index=2, array_max=2),
            job("8", "PENDING", array_id="6", array_index=3, array_max=2),
            job("9", "PENDING", array_id="6", array_index=5, array_max=2, held=True)]
    rows = [r for j in S.array_rows(jobs, expand=False) for r in S.sacct_rows(j, allocations=True, now=NOW)]
    assert S.sacct_lines(rows, S.parse_sacct_format("JobID,JobIDRaw,State"), NOW, header=False, parsable="|2") == [
        "6_1|6|RUNNING", "6_[2-3%2]|7|PENDING", "6_5|9|PENDING"]


def test_repeated_list_options_add_up():
    options = {"-j": ("jobs", True), "-o": ("format", True)}
    assert C.parse_argv(["-j", "1", "-j", "2,3", "-o", "a", "-o", "b"], options, frozenset({"jobs"}))[0] == {
        "jobs": "1,2,3", "format": "b"}
