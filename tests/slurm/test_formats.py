"""Slurm's formats of reckon's jobs and nodes (daemon/slurm/formats.py, layouts.py) and the query
commands' lines (argv.parse_keyed, values.parse_when): pure.

What the workflow tools parse is pinned here line by line: Parsl's ``squeue --noheader --format='%i %t'``
and ``sacct -X --noheader --format=jobid,state%20``, submitit's ``sacct -o JobID,State,NodeList
--parsable2``, Snakemake's ``--format=JobIdRaw,State`` and ``'%i|%T'``, dask-jobqueue's ``sinfo -o %C``.
"""

from __future__ import annotations

import time

import pytest

from reckon.daemon.slurm import argv as C
from reckon.daemon.slurm import formats as S
from reckon.daemon.slurm import sacct_fields as A
from reckon.daemon.slurm import layouts as L
from reckon.daemon.slurm import values as V
from reckon.daemon.slurm.argv import UsageProblem

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
    assert L.hostlist(["a1", "a2", "a3", "b", "a5"]) == "a[1-3,5],b"
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
    for bad in ("%", "%!", "%.3"):
        with pytest.raises(C.UsageProblem):
            S.parse_squeue_format(bad)


def test_sacct_columns_steps_and_parsable():
    done = job("5", "COMPLETED", exit_code=0, finished_at=NOW - 10)
    cancelled = job("6", "CANCELLED", started_at=None, agent=None)
    rows = [r for j in (done, cancelled) for r in A.sacct_rows(j, allocations=False, now=NOW)]
    assert A.sacct_lines(rows, A.parse_sacct_format("JobID,JobName,State,ExitCode,Elapsed"), NOW, header=True,
                         parsable=None) == [
        "JobID           JobName      State ExitCode    Elapsed ",
        "------------ ---------- ---------- -------- ---------- ",
        "5                   job  COMPLETED      0:0   00:00:40 ",
        "5.batch           batch  COMPLETED      0:0   00:00:40 ",
        "5.extern         extern  COMPLETED      0:0   00:00:40 ",
        "6                   job CANCELLED+      0:0   00:00:00 ",
    ]
    # submitit: header, '|' between fields, steps with a dot (it skips them)
    assert A.sacct_lines(rows, A.parse_sacct_format("JobID,State,NodeList"), NOW, header=True, parsable="|2") == [
        "JobID|State|NodeList", "5|COMPLETED|a1", "5.batch|COMPLETED|a1", "5.extern|COMPLETED|a1",
        "6|CANCELLED by 1000|None assigned"]
    assert A.sacct_lines(rows[:1], A.parse_sacct_format("JobID,State"), NOW, header=False, parsable="|") == [
        "5|COMPLETED|"]


def test_sacct_what_parsl_and_snakemake_parse():
    jobs = [job("5", "FAILED", exit_code=2, finished_at=NOW), job("7", "RUNNING", array_id="6", array_index=2)]
    rows = [r for j in jobs for r in A.sacct_rows(j, allocations=True, now=NOW)]
    assert A.sacct_lines(rows, A.parse_sacct_format("jobid,state%20"), NOW, header=False, parsable=None) == [
        "5                          FAILED ", "6_2                       RUNNING "]
    assert A.sacct_lines(rows, A.parse_sacct_format("JobIdRaw,State"), NOW, header=False, parsable="|2") == [
        "5|FAILED", "7|RUNNING"]
    assert A.sacct_value("ExitCode", rows[0], NOW) == "2:0"
    with pytest.raises(C.UsageProblem, match='Invalid field requested: "Nope"'):
        A.parse_sacct_format("JobID,Nope")


def test_sacct_times():
    assert V.parse_when("now", NOW) == NOW
    assert V.parse_when("now-1hour", NOW) == NOW - 3600
    assert V.parse_when("now+2days", NOW) == NOW + 2 * 86400
    assert V.parse_when("2026-12-01T17:00", NOW) == time.mktime((2026, 12, 1, 17, 0, 0, 0, 0, -1))
    assert V.parse_when("2026-12-01", NOW) == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))


def test_begin_times_look_ahead_as_slurms_parse_time_does() -> None:
    """sbatch --begin (parse_time with past=0): a time of day already past is tomorrow's."""
    now = time.mktime((2026, 12, 1, 16, 0, 30, 0, 0, -1))
    at = lambda *t: time.mktime((*t, 0, 0, -1))  # noqa: E731
    assert V.parse_when("now+60", now, future=True) == now + 60
    assert V.parse_when("now+1hour", now, future=True) == now + 3600
    assert V.parse_when("16:00", now, future=True) == at(2026, 12, 2, 16, 0, 0)  # 16:00 has begun
    assert V.parse_when("16:00", now) == at(2026, 12, 1, 16, 0, 0)  # sacct looks back: today's
    assert V.parse_when("17:30", now, future=True) == at(2026, 12, 1, 17, 30, 0)
    assert V.parse_when("teatime", now, future=True) == at(2026, 12, 2, 16, 0, 0)
    assert V.parse_when("noon", now, future=True) == at(2026, 12, 2, 12, 0, 0)
    assert V.parse_when("midnight", now, future=True) == at(2026, 12, 2, 0, 0, 0)
    assert V.parse_when("tomorrow", now, future=True) == at(2026, 12, 2, 0, 0, 0)
    assert V.parse_when("today", now, future=True) == at(2026, 12, 1, 0, 0, 0)
    assert V.parse_when("2026-12-02T10:00", now, future=True) == at(2026, 12, 2, 10, 0, 0)
    assert V.parse_when("11/30", now, future=True) == at(2027, 11, 30, 0, 0, 0)  # past: next year's
    assert V.parse_when("12/24-18:00", now, future=True) == at(2026, 12, 24, 18, 0, 0)
    assert V.parse_when("uts1800000000", now, future=True) == 1800000000.0
    for bad in ("soon", "now+", "now+5fortnights", "25:00"):
        with pytest.raises(UsageProblem):
            V.parse_when(bad, now, future=True)
    local = time.localtime(NOW)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    assert V.parse_when("midnight", NOW) == midnight and V.parse_when("noon", NOW) == midnight + 43200
    assert V.parse_when("10:30", NOW) == midnight + 37800
    for bad in ("yesterday", "now-", "now-3fortnights", "2026-13-45x"):
        with pytest.raises(C.UsageProblem):
            V.parse_when(bad, NOW)


def test_the_command_line_spellings():
    options = {"-j": ("jobs", True), "--jobs": ("jobs", True), "-h": ("noheader", False),
               "--noheader": ("noheader", False), "-X": ("x", False)}
    assert C.parse_keyed(["-j", "1,2", "-hX"], options) == ({"jobs": "1,2", "noheader": True, "x": True}, [])
    assert C.parse_keyed(["-j1", "--noh", "rest"], options) == ({"jobs": "1", "noheader": True}, ["rest"])
    assert C.parse_keyed(["--jobs=3"], options)[0] == {"jobs": "3"}
    for bad, text in ((["-q"], "invalid option -- 'q'"), (["--jobs"], "requires an argument"),
                      (["--nope"], "unrecognized option '--nope'"), (["--noheader=1"], "doesn't allow")):
        with pytest.raises(C.UsageProblem, match=text):
            C.parse_keyed(bad, options)
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
    assert "SchedulerType           = sched/builtin" in config  # first in, first out
    assert "SchedulerType           = sched/backfill" in L.show_config(NOW, "ws://127.0.0.1:7420", 2, "backfill")


def test_an_oom_kill_reads_as_slurms_out_of_memory_0_125():
    oom = job("11", "FAILED", reason="oom", exit_code=137, finished_at=NOW - 1)  # the shell's 128+9
    rows = A.sacct_rows(oom, allocations=False, now=NOW)
    assert A.sacct_lines(rows, A.parse_sacct_format("JobID,State,ExitCode"), NOW, header=False, parsable="|2") == [
        "11|OUT_OF_MEMORY|0:125", "11.batch|OUT_OF_MEMORY|0:125", "11.extern|COMPLETED|0:0"]
    assert "ExitCode=0:125" in L.show_job(oom, NOW)


def test_sacct_accounting_fields_as_snakemakes_efficiency_report_reads_them():
    """TotalCPU, UserCPU, SystemCPU in print.c's _elapsed_time form, MaxRSS on the steps only (bytes
    in the largest unit that divides), CPUTime as elapsed x CPUs; nothing measured yet: zeros."""
    usage = {"cpu_user": 3.25, "cpu_system": 0.5, "max_rss": 3 * 4096 * 100, "wall": 40.0, "source": "cgroup"}
    done = job("9", "COMPLETED", exit_code=0, finished_at=NOW - 10, cpus=2, usage=usage)
    rows = A.sacct_rows(done, allocations=False, now=NOW)
    fmt = A.parse_sacct_format("JobID,JobName,Elapsed,TotalCPU,UserCPU,SystemCPU,NCPUS,MaxRSS,CPUTime,CPUTimeRAW")
    assert A.sacct_lines(rows, fmt, NOW, header=False, parsable="|2") == [
        "9|job|00:00:40|00:03.750|00:03.250|00:00.500|2||00:01:20|80",
        "9.batch|batch|00:00:40|00:03.750|00:03.250|00:00.500|2|1200K|00:01:20|80",
        "9.extern|extern|00:00:40|00:00:00|00:00:00|00:00:00|2|0|00:01:20|80"]
    running = job("10", "RUNNING", usage=usage)  # an earlier attempt's usage is not this one's
    assert A.sacct_value("TotalCPU", {"job": running, "step": None}, NOW) == "00:00:00"
    assert [A.cpu_time(s) for s in (0, 59.0, 61.25, 3725.9, 90061)] == [
        "00:00:00", "00:00:59", "01:01.250", "01:02:05", "1-01:01:01"]


def test_sacct_collapses_an_arrays_pending_members_as_submitit_reads_them():
    jobs = [job("6", "RUNNING", array_id="6", array_index=1, array_max=2),
            job("7", "PENDING", array_id="6", array_index=2, array_max=2),
            job("8", "PENDING", array_id="6", array_index=3, array_max=2),
            job("9", "PENDING", array_id="6", array_index=5, array_max=2, held=True)]
    rows = [r for j in S.array_rows(jobs, expand=False) for r in A.sacct_rows(j, allocations=True, now=NOW)]
    assert A.sacct_lines(rows, A.parse_sacct_format("JobID,JobIDRaw,State"), NOW, header=False, parsable="|2") == [
        "6_1|6|RUNNING", "6_[2-3%2]|7|PENDING", "6_5|9|PENDING"]


def test_repeated_list_options_add_up():
    options = {"-j": ("jobs", True), "-o": ("format", True)}
    assert C.parse_keyed(["-j", "1", "-j", "2,3", "-o", "a", "-o", "b"], options, frozenset({"jobs"}))[0] == {
        "jobs": "1,2,3", "format": "b"}


# ---- what Slurm 22.05 prints (issue #21: tests/slurmref's goldens, here as unit cases) ------------


def test_squeue_all_is_every_field_bar_separated():
    fields = S.parse_squeue_format("%all")
    header = S.squeue_lines([], fields, NOW)[0].split("|")
    assert len(header) == 52 and header[:3] == ["ACCOUNT", "TRES_PER_NODE", "MIN_CPUS"]
    assert header[18:20] == ["", "ST"] and header[-1] == "WORK_DIR"
    row = S.squeue_lines([job(), job("6", "PENDING", held=True)], fields, NOW, header=False)
    running, held = (r.split("|") for r in row)
    assert running[4] == "NONE" and running[27] == "a1" and held[4] == "N/A" and held[27] == "n/a"
    assert held[15] == "0.00000000000000" and held[17] == "JobHeldUser"


def test_reasons_dependencies_and_array_limits():
    jobs = [job("1", array_id="1", array_index=0, array_max=1),
            job("2", "PENDING", array_id="1", array_index=1, array_max=1),
            job("3", "PENDING", after=["9"])]
    marked = S.mark_array_limits(jobs)
    assert [S.pending_reason(j) for j in marked] == ["None", "JobArrayTaskLimit", "Dependency"]
    assert S.dependency(marked[2]) == "afterok:9(unfulfilled)" and S.dependency(job(after=["9"])) == "(null)"
    assert S.pending_reason(S.mark_array_limits([job("2", "PENDING", array_id="1", array_index=1,
                                                     array_max=1)])[0]) == "Resources"


def test_the_controllers_reason_and_priority_win_over_the_record():
    """Issue #22: a code from the controller (common.mark_pending) is printed as it is; without
    one (an older controller) the reason is derived from the job's record as before."""
    waiting = job("3", "PENDING", after=["9"])
    assert S.pending_reason(waiting) == "Dependency"
    ranked = {**job("4", "PENDING"), "pending_code": "Priority", "priority": 4211}
    fields = S.parse_squeue_format("%r %R %Q")
    assert S.squeue_lines([ranked], fields, NOW, header=False) == ["Priority (Priority) 4211"]
    assert S.squeue_lines([job("4", "PENDING")], fields, NOW, header=False) == ["Resources (Resources) 1"]
    assert "Priority=4211 " in L.show_job(ranked, NOW) and "Reason=Priority " in L.show_job(ranked, NOW)


class _OlderController:
    """A controller from before the ``pending`` op: it refuses the op by name."""

    def call(self, op: str, **request: object) -> dict:
        from reckon.daemon.client_common import ClientError

        raise ClientError(f"unknown op {op!r}")


class _Controller:
    def __init__(self) -> None:
        self.asked: list[object] = []

    def call(self, op: str, **request: object) -> dict:
        assert op == "pending"
        self.asked.append(request["ids"])
        return {"reasons": {"4": "Priority"}, "priorities": {"4": 7}}


def test_mark_pending_asks_for_the_pending_jobs_and_an_older_controller_is_no_error():
    from reckon.daemon.slurm.common import mark_pending

    jobs = [job("1"), job("4", "PENDING"), job("5", "PENDING")]  # 5 started since the query: no code
    controller = _Controller()
    assert mark_pending(controller, jobs) is True and controller.asked == [["4", "5"]]
    assert (jobs[1]["pending_code"], jobs[1]["priority"]) == ("Priority", 7) and "pending_code" not in jobs[2]
    assert mark_pending(controller, [job("1")]) is True and len(controller.asked) == 1  # none PENDING: no call
    older = [job("4", "PENDING")]
    assert mark_pending(_OlderController(), older) is False and S.pending_reason(older[0]) == "Resources"


def test_sacct_exit_codes_and_unstarted_jobs():
    fields = A.parse_sacct_format("JobID,State,ExitCode,DerivedExitCode,ReqMem,AllocCPUS,Timelimit,Start")

    def lines(j: dict) -> list[str]:
        return A.sacct_lines(A.sacct_rows(j, False, NOW), fields, NOW, header=False, parsable="|2")

    cancelled = job(state="CANCELLED", signal=15, finished_at=NOW)
    assert lines(cancelled)[0] == "5|CANCELLED by 1000|0:0|0:0|0|1|UNLIMITED|" + S.date(NOW - 50)
    assert lines(cancelled)[1].split("|")[:5] == ["5.batch", "CANCELLED", "0:15", "", ""]  # no ReqMem
    signalled = job(state="FAILED", signal=9, finished_at=NOW)
    assert lines(signalled)[1].split("|")[1:3] == ["CANCELLED", "0:9"]
    timeout = job(state="FAILED", reason="timeout", signal=15, finished_at=NOW, time_limit=60)
    assert lines(timeout)[0].split("|")[1:4] == ["TIMEOUT", "0:0", "0:0"]
    held = job("6", "PENDING", held=True)
    assert lines(held) == ["6|PENDING|0:0|0:0|0|1|Partition_Limit|Unknown"]
    gone = job("7", "CANCELLED", started_at=None, agent=None)
    assert lines(gone)[0].split("|")[-2:] == ["Partition_Limit", "None"]
    assert S.never_started(held) and not S.never_started(job("8", "PENDING", requeues=1))


def test_scontrol_show_job_pending_and_partition_tres():
    held = L.show_job(job("6", "PENDING", held=True, command=["sbatch"], script=True, submit_host="h1",
                          after=["5"]), NOW)
    for word in ("EligibleTime=Unknown", "Command=(null)", "AllocNode:Sid=h1:0", "NodeList=\n",
                 "Dependency=afterok:5(unfulfilled)", "SuspendTime=None", "TRES=cpu=1,node=1,billing=1"):
        assert word.replace("\\n", "\n") in held + "\n", word
    assert "BatchHost" not in held and held.rstrip().endswith("Power=")
    assert "BatchHost=a1" in L.show_job(job(), NOW)
    rows = S.array_rows(S.mark_array_limits([job("1", array_id="1", array_index=0, array_max=1)] + [
        job(str(i), "PENDING", array_id="1", array_index=i - 1, array_max=1) for i in (2, 3, 4)]), expand=False)
    assert "ArrayTaskId=1-3%1" in L.show_job(rows[1], NOW) and "Reason=JobArrayTaskLimit" in L.show_job(rows[1], NOW)
    part = L.show_partition([{"name": "n1", "cpus": 8, "mem": 4000 << 20}])
    assert "TRES=cpu=8,mem=4000M,node=1,billing=8" in part


def test_query_commands_parse_with_argv():
    opts, rest = C.parse_keyed(["-j1", "--jobs", "2", "-hX", "x", "--name=a"], {
        "-j": ("jobs", True), "--jobs": ("jobs", True), "-h": ("noheader", False), "-X": ("alloc", False),
        "--name": ("names", True)}, frozenset({"jobs"}))
    assert opts == {"jobs": "1,2", "noheader": True, "alloc": True, "names": "a"} and rest == ["x"]
    with pytest.raises(C.UsageProblem, match="unrecognized option '--nope'"):
        C.parse_keyed(["--nope"], {"--name": ("names", True)})


def test_begin_singleton_and_a_cancelled_hold_as_slurm_shows_them() -> None:
    later = time.time() + 3600
    waiting = job("7", "PENDING", begin=later, started_at=None)
    assert S.pending_reason(waiting) == "BeginTime"
    assert S.squeue_value("S", waiting, time.time()) == S.date(later)
    assert S.pending_reason(job("7", "PENDING", begin=later - 7200, started_at=None)) == "Resources"
    solo = job("8", "PENDING", singleton=True, started_at=None)
    assert S.pending_reason(solo) == "Dependency" and S.dependency(solo) == "singleton(unfulfilled)"
    assert S.pending_reason(job("9", "CANCELLED", held=True, started_at=None)) == "JobHeldUser"
