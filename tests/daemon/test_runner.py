"""reckon.daemon.agent.runner / daemon.agent.launcher with real processes.

Every test runs under a hang guard (``trio.fail_after``) and waits on
conditions, never on fixed sleeps.  The autouse ``reaper`` fixture SIGKILLs
whatever a test leaves behind: every job process group and supervisor named
by a pid record under ``tmp_path``, and the extra processes a test registers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent.launcher import append_record, read_records
from reckon.daemon.agent.attempts import AlreadyLaunched, ExitStatus, JobLost, LaunchError, check_key
from reckon.daemon.agent.null_runner import NullRunner
from reckon.daemon.agent.runner import JobRunner
from reckon.model import messages as M
from reckon.model.jobs import JobSpec

HANG = 30  # seconds: a generous guard, never reached by a passing test
ROOT = Path(__file__).resolve().parents[2]


# ---- helpers ---------------------------------------------------------------------


def spec(*command: str, cwd: str | Path | None = None, env: dict[str, str] | None = None) -> JobSpec:
    return JobSpec(name="t", command=tuple(command), cwd=None if cwd is None else str(cwd),
                   env=tuple((env or {}).items()))


def sh(script: str, **kw) -> JobSpec:
    return spec("/bin/sh", "-c", script, **kw)


def start_time(pid: int) -> int | None:
    """/proc start time of a live (non-zombie) process, else None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def alive(pid: int) -> bool:
    return start_time(pid) is not None


def run_records(jobs_dir: Path, job: str, attempt: int = 1) -> tuple[dict | None, dict | None]:
    """The (pid, status) records of an attempt's .run file."""
    return read_records(jobs_dir / f"{job}.{attempt}.run") or (None, None)


def read_pid_file(runner: JobRunner, job: str, attempt: int = 1) -> dict | None:
    return run_records(runner.jobs_dir, job, attempt)[0]


async def wait_until(predicate, interval: float = 0.01) -> None:
    """Poll a condition (the caller's fail_after bounds it)."""
    while not predicate():
        await trio.sleep(interval)


class Exits:
    """Collects a runner's exits by key, checking each arrives only once."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.seen: dict[tuple[str, int], ExitStatus | JobLost] = {}

    async def get(self, job: str, attempt: int = 1) -> ExitStatus | JobLost:
        key = (job, attempt)
        while key not in self.seen:
            item = await self.runner.exits.receive()
            k = (item.job, item.attempt)
            assert k not in self.seen, f"{k} delivered twice"
            self.seen[k] = item
        return self.seen[key]

    def assert_no_more(self) -> None:
        with pytest.raises(trio.WouldBlock):
            item = self.runner.exits.receive_nowait()
            pytest.fail(f"unexpected extra exit {item}")


@pytest.fixture(autouse=True)
def reaper(tmp_path):
    """Processes a test registers here (and every job found on disk) die at teardown."""
    extra: list[int] = []
    yield extra
    for pid in extra:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for run_file in tmp_path.rglob("jobs/*.run"):
        info = (read_records(run_file) or (None, None))[0]
        if info is None:
            continue
        if start_time(info["job_pid"]) == info["job_start"]:
            try:
                os.killpg(info["job_pid"], signal.SIGKILL)
            except OSError:
                pass
        if start_time(info["supervisor"]) == info["supervisor_start"]:
            try:
                os.kill(info["supervisor"], signal.SIGKILL)
            except OSError:
                pass


# ---- outcomes ----------------------------------------------------------------------


async def test_exit_code_zero(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            started_at = await runner.start("1", 1, spec("true"))
            e = await Exits(runner).get("1")
    assert e == ExitStatus(job="1", attempt=1, exit_code=0, signal=None, started_at=started_at,
                           finished_at=e.finished_at)
    assert started_at <= e.finished_at


async def test_exit_code_three(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh("exit 3"))
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.signal) == (3, None)


@pytest.mark.parametrize("script, sig", [("kill -KILL $$", 9), ("kill -TERM $$", 15)])
async def test_killed_by_a_signal(tmp_path, script, sig):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh(script))
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.signal) == (None, sig)


async def test_stdout_and_stderr_go_to_files(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("7", 2, sh("echo out; echo err >&2; echo more"))
            e = await Exits(runner).get("7", 2)
            out, err = runner.log_paths("7", 2)
    assert e.exit_code == 0
    assert out == tmp_path / "state" / "jobs" / "7.2.stdout"
    assert err == tmp_path / "state" / "jobs" / "7.2.stderr"
    # What the agent tells the controller at join names the same files (`reckon show`).
    assert M.output_paths(str(runner.jobs_dir), "flat", "7", 2) == (str(out), str(err))
    assert out.read_text() == "out\nmore\n"
    assert err.read_text() == "err\n"


async def test_cwd_and_env_are_honoured(tmp_path, monkeypatch):
    # The agent's own variables are not inherited (daemon/agent/jobenv.py); the job's pairs are.
    monkeypatch.setenv("RECKON_AGENT_VAR", "from-agent")
    monkeypatch.setenv("RECKON_OVERRIDDEN", "agent-value")
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh('pwd; echo "$RECKON_JOB_VAR|$RECKON_AGENT_VAR|$RECKON_OVERRIDDEN"',
                                          cwd=workdir, env={"RECKON_JOB_VAR": "from-job",
                                                            "RECKON_OVERRIDDEN": "job-value"}))
            e = await Exits(runner).get("1")
            out = runner.log_paths("1", 1)[0].read_text().splitlines()
    assert e.exit_code == 0
    assert out == [str(workdir), "from-job||job-value"]


async def test_path_of_the_job_env_is_searched(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "only-here"
    tool.write_text("#!/bin/sh\necho found\nexit 5\n")
    tool.chmod(0o755)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec("only-here", env={"PATH": f"{bindir}:/usr/bin:/bin"}))
            e = await Exits(runner).get("1")
            assert runner.log_paths("1", 1)[0].read_text() == "found\n"
    assert e.exit_code == 5


async def test_commands_that_cannot_run_finish_like_in_a_shell(tmp_path):
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\nexit 0\n")
    noexec.chmod(0o644)
    cases = {
        "notfound": (spec("reckon-no-such-command-xyz"), 127, "command not found"),
        "badpath": (spec("/nonexistent/dir/tool"), 127, "No such file or directory"),
        "noexec": (spec("./noexec.sh", cwd=tmp_path), 126, "ermission denied"),
        "isdir": (spec("/tmp"), 126, "is a directory"),
        "badcwd": (spec("true", cwd=tmp_path / "missing"), 127, "cannot change to directory"),
        "nul": (spec("echo", "a\0b"), 126, "null"),
    }
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            exits = Exits(runner)
            for job, (s, _, _) in cases.items():
                await runner.start(job, 1, s)
            for job, (_, code, text) in cases.items():
                e = await exits.get(job)
                assert (e.exit_code, e.signal) == (code, None), job
                err = runner.log_paths(job, 1)[1].read_text()
                assert text in err and err.startswith("reckon: "), (job, err)
            # The launcher is unharmed: the next job runs.
            await runner.start("after", 1, spec("true"))
            assert (await exits.get("after")).exit_code == 0


# ---- time --------------------------------------------------------------------------------


async def test_finish_time_is_the_real_end_time(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            before = time.time()
            started_at = await runner.start("1", 1, spec("sleep", "0.5"))
            e = await Exits(runner).get("1")
            after = time.time()
    assert before <= started_at == e.started_at
    assert e.finished_at - e.started_at >= 0.5
    assert e.finished_at <= after


# ---- cancel --------------------------------------------------------------------------------


async def test_kill_a_job_that_exits_on_sigterm(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            exits = Exits(runner)
            # Killed at once (maybe before the supervisor wrote its pid file) ...
            await runner.start("early", 1, spec("sleep", "30"))
            await runner.kill("early", 1, grace=20)
            # ... and once it surely runs.
            await runner.start("late", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(runner, "late") is not None)
            await runner.kill("late", 1, grace=20)
            for job in ("early", "late"):
                e = await exits.get(job)
                assert (e.exit_code, e.signal) == (None, signal.SIGTERM), job


async def test_kill_escalates_to_sigkill_after_the_grace(tmp_path):
    grace = 0.5
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh("trap '' TERM; echo ready; exec sleep 30"))
            out = runner.log_paths("1", 1)[0]
            await wait_until(lambda: out.exists() and out.read_text() == "ready\n")
            asked = time.time()
            await runner.kill("1", 1, grace=grace)
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.signal) == (None, signal.SIGKILL)
    assert e.finished_at - asked >= grace * 0.9


async def test_kill_of_a_job_that_is_not_running_is_a_no_op(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.kill("never", 1, grace=0)
            await runner.start("1", 1, spec("true"))
            exits = Exits(runner)
            assert (await exits.get("1")).exit_code == 0
            await runner.kill("1", 1, grace=0)
            await runner.start("2", 1, spec("true"))
            assert (await exits.get("2")).exit_code == 0
            exits.assert_no_more()


async def test_sigterm_to_the_supervisor_is_a_cancel(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(runner, "1") is not None)
            supervisor = read_pid_file(runner, "1")["supervisor"]
            os.killpg(supervisor, signal.SIGTERM)  # the supervisor's own group: it alone
            e = await Exits(runner).get("1")
    assert (e.exit_code, e.signal) == (None, signal.SIGTERM)


async def test_processes_left_in_the_job_group_are_killed_at_its_end(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh("sleep 30 & echo $!; exit 4"))
            e = await Exits(runner).get("1")
            background = int(runner.log_paths("1", 1)[0].read_text())
            await wait_until(lambda: not alive(background))
    assert e.exit_code == 4


# ---- isolation ------------------------------------------------------------------------------


async def test_jobs_and_supervisors_inherit_no_descriptors(tmp_path):
    r, w = os.pipe()
    os.dup2(r, 100, inheritable=True)  # an inheritable descriptor of the "agent"
    try:
        with trio.fail_after(HANG):
            async with JobRunner(tmp_path / "state") as runner:
                await runner.start("1", 1, spec(sys.executable, "-c",
                                                "import os; print(sorted(os.listdir('/proc/self/fd'), key=int))"))
                await runner.start("2", 1, spec("sleep", "30"))
                exits = Exits(runner)
                assert (await exits.get("1")).exit_code == 0
                job_fds = runner.log_paths("1", 1)[0].read_text().strip()

                await wait_until(lambda: read_pid_file(runner, "2") is not None)
                supervisor = read_pid_file(runner, "2")["supervisor"]
                sup_fds = {int(fd): os.readlink(f"/proc/{supervisor}/fd/{fd}")
                           for fd in os.listdir(f"/proc/{supervisor}/fd")}
                launcher_fds = {int(fd) for fd in os.listdir(f"/proc/{runner._proc.pid}/fd")}
                await runner.kill("2", 1)
                assert (await exits.get("2")).signal == signal.SIGTERM
    finally:
        os.close(100)
        os.close(r)
        os.close(w)
    assert job_fds == "['0', '1', '2', '3']"  # 3: the listdir itself
    # Its own .run file (held for its records), no pipe of the launcher or the agent.
    assert set(sup_fds.values()) == {"/dev/null", str(tmp_path / "state" / "jobs" / "2.1.run")}, sup_fds
    assert 100 not in launcher_fds


async def test_jobs_start_with_default_signal_dispositions_and_an_empty_mask(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec("grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"))
            assert (await Exits(runner).get("1")).exit_code == 0
            lines = runner.log_paths("1", 1)[0].read_text().split()
    assert lines[:3] == ["SigBlk:", "0000000000000000", "SigIgn:"]
    # Signals 32 and 33 are glibc's own (thread cancellation, setxid): glibc refuses
    # to change them, and every threaded program re-arms them.  A parent spawned by
    # GNU make's posix_spawn (as `make test` is) passes them down ignored, so they
    # are the one thing a job may inherit; every other signal must be at its default.
    glibc_internal = (1 << 31) | (1 << 32)
    ours = _ignored(Path("/proc/self/status"))
    assert int(lines[3], 16) & ~(ours & glibc_internal) == 0, f"job starts with ignored signals {lines[3]}"


def _ignored(status: Path) -> int:
    line = next(l for l in status.read_text().splitlines() if l.startswith("SigIgn:"))
    return int(line.split()[1], 16)


async def test_job_ids_become_safe_directory_names(tmp_path):
    for bad in ("", "a/b", "..", "x..y", ".hidden", "a\0b", "x" * 201):
        with pytest.raises(ValueError):
            check_key(bad, 1)
    for bad_attempt in (0, -1, True, "1"):
        with pytest.raises(ValueError):
            check_key("17", bad_attempt)
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            with pytest.raises(ValueError):
                await runner.start("../escape", 1, spec("true"))
            with pytest.raises(ValueError):
                runner.log_paths("a/b", 1)
    assert not (tmp_path / "escape.1").exists()


async def test_an_attempt_is_launched_once(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec("true"))
            assert (await Exits(runner).get("1")).exit_code == 0
            with pytest.raises(AlreadyLaunched):
                await runner.start("1", 1, spec("true"))
        async with JobRunner(tmp_path / "state") as again:  # after a restart too
            with pytest.raises(AlreadyLaunched):
                await again.start("1", 1, spec("true"))


async def test_forget_drops_status_and_pid_but_keeps_logs(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh("echo hello"))
            await Exits(runner).get("1")
            assert runner.on_disk() == [("1", 1)]
            runner.forget("1", 1)
            assert runner.on_disk() == []
            assert sorted(p.name for p in runner.jobs_dir.iterdir()) == ["1.1.stderr", "1.1.stdout"]
            assert runner.log_paths("1", 1)[0].read_text() == "hello\n"


# ---- throughput -------------------------------------------------------------------------------


async def test_launch_200_true_jobs(tmp_path):
    n = 200
    with trio.fail_after(120):
        async with JobRunner(tmp_path / "state") as runner:
            exits = Exits(runner)
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(runner.start, str(i), 1, spec("true"))
            launched = time.perf_counter()
            for i in range(n):
                assert (await exits.get(str(i))).exit_code == 0
            done = time.perf_counter()
            exits.assert_no_more()
    print(f"\n{n} `true` jobs: launched at {n / (launched - t0):.0f} jobs/s, "
          f"all exits collected at {n / (done - t0):.0f} jobs/s")


# ---- restarts ---------------------------------------------------------------------------------

CRASHING_AGENT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import trio
    from reckon.daemon.agent.runner import JobRunner
    from reckon.model.jobs import JobSpec

    async def main(state, jobs):
        async with JobRunner(Path(state)) as runner:
            started = {}
            for job, command, cwd in jobs:
                started[job] = await runner.start(job, 1, JobSpec(name=job, command=tuple(command), cwd=cwd))
            print(json.dumps({"started": started, "launcher": runner._proc.pid}), flush=True)
            await trio.sleep_forever()

    trio.run(main, sys.argv[1], json.loads(sys.argv[2]))
""")


async def test_jobs_survive_an_agent_crash_and_are_adopted(tmp_path, reaper):
    state = tmp_path / "state"
    script = tmp_path / "agent.py"
    script.write_text(CRASHING_AGENT)
    jobs = [  # A last: it is started just before the crash, so it surely ends during the outage
        ("B", ["sleep", "30"], None),
        ("C", ["/bin/sh", "-c", "while [ ! -e go ]; do sleep 0.02; done; exit 4"], str(tmp_path)),
        ("A", ["/bin/sh", "-c", "sleep 1; exit 7"], None),
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with trio.fail_after(60):
        agent = await trio.lowlevel.open_process([sys.executable, str(script), str(state), json.dumps(jobs)],
                                                 stdout=-1, env=env)
        reaper.append(agent.pid)
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await agent.stdout.receive_some(4096)
                assert chunk, "the agent died before launching"
                line += chunk
            hello = json.loads(line)
            crashed_at = time.time()
            agent.kill()  # SIGKILL: no cleanup at all
            await agent.wait()
        finally:
            with trio.CancelScope(shield=True):
                agent.kill()
                await agent.wait()
                await agent.stdout.aclose()
        # The orphaned launcher sees EOF and goes; the supervisors stay.
        await wait_until(lambda: not alive(hello["launcher"]))
        # A ends while no agent is running.
        await wait_until(lambda: run_records(state / "jobs", "A")[1] is not None)
        restarted_at = time.time()

        async with JobRunner(state) as runner:
            exits = Exits(runner)
            answer = await runner.adopt([("A", 1), ("B", 1), ("C", 1)])
            a = answer[("A", 1)]
            assert isinstance(a, ExitStatus)
            assert (a.exit_code, a.signal) == (7, None)
            assert a.started_at == hello["started"]["A"]
            assert crashed_at <= a.finished_at <= restarted_at  # its true end, during the outage
            assert a.finished_at - a.started_at >= 1.0
            assert answer[("B", 1)] == "running"
            assert answer[("C", 1)] == "running"

            (tmp_path / "go").touch()  # C ends on its own under the new agent
            c = await exits.get("C")
            assert (c.exit_code, c.signal, c.started_at) == (4, None, hello["started"]["C"])

            await runner.kill("B", 1)
            b = await exits.get("B")
            assert (b.exit_code, b.signal, b.started_at) == (None, signal.SIGTERM, hello["started"]["B"])
            assert b.finished_at > restarted_at
            exits.assert_no_more()
            assert "A" not in {k[0] for k in exits.seen}  # returned by adopt() only


async def test_jobs_survive_a_clean_runner_exit(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(HANG):
        async with JobRunner(state) as first:
            started_at = await first.start("1", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(first, "1") is not None)
        info = run_records(state / "jobs", "1")[0]
        assert alive(info["supervisor"]) and alive(info["job_pid"])
        async with JobRunner(state) as second:
            assert await second.adopt([("1", 1)]) == {("1", 1): "running"}
            assert await second.adopt([("1", 1)]) == {("1", 1): "running"}  # watched once
            await second.kill("1", 1)
            exits = Exits(second)
            e = await exits.get("1")
            exits.assert_no_more()
    assert (e.signal, e.started_at) == (signal.SIGTERM, started_at)


async def test_adopt_reports_what_nobody_can_know_as_lost(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(HANG):
        async with JobRunner(state) as first:
            await first.start("orphan", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(first, "orphan") is not None)
        info = run_records(state / "jobs", "orphan")[0]
        os.kill(info["supervisor"], signal.SIGKILL)  # the supervisor dies, its job runs on unwatched
        await wait_until(lambda: not alive(info["supervisor"]))
        (state / "jobs" / "empty.1.stdout").touch()  # claimed, but no supervisor ever wrote a record
        async with JobRunner(state) as second:
            answer = await second.adopt([("orphan", 1), ("empty", 1), ("never", 1)])
            assert answer == {("orphan", 1): "lost", ("empty", 1): "lost", ("never", 1): "lost"}
            # A job reported lost does not go on running unsupervised.
            await wait_until(lambda: not alive(info["job_pid"]))


# A stand-in for a supervisor of an agent before the flat layout: it runs as
# its own process group, and on SIGTERM records the signal in its attempt's
# directory (tmp + rename, as those supervisors did) and exits.
OLD_SUPERVISOR = """
import json, os, signal, sys, time
d = sys.argv[1]
def end(signum, frame):
    with open(d + "/status.tmp", "w") as f:
        json.dump({"v": 1, "job": "live", "attempt": 1, "exit_code": None, "signal": signum,
                   "started_at": 7.0, "finished_at": time.time(), "job_pid": os.getpid()}, f)
    os.rename(d + "/status.tmp", d + "/status")
    os._exit(0)
signal.signal(signal.SIGTERM, end)
open(d + "/ready", "w").close()
while True:
    signal.pause()
"""


async def test_attempts_left_in_the_directory_layout_by_an_upgrade_are_still_run_to_their_end(tmp_path, reaper):
    """Agents before the flat layout kept ``pid`` and ``status`` files in
    ``jobs/<job>.<attempt>/``.  After an upgrade their attempts are adopted,
    read, signalled, watched to their end and forgotten; none is lost and none
    is launched again."""
    from reckon.daemon.agent import launcher

    jobs = tmp_path / "state" / "jobs"
    done = jobs / "old.1"
    done.mkdir(parents=True)
    (done / "stdout").write_text("old output\n")
    (done / "status").write_text(json.dumps({"v": 1, "job": "old", "attempt": 1, "exit_code": 3, "signal": None,
                                             "started_at": 5.0, "finished_at": 6.0, "job_pid": 1}))
    live = jobs / "live.1"
    live.mkdir()
    with trio.fail_after(HANG):
        old = await trio.lowlevel.open_process([sys.executable, "-c", OLD_SUPERVISOR, str(live)],
                                               start_new_session=True)
        reaper.append(old.pid)
        await wait_until((live / "ready").exists)
        start = start_time(old.pid)
        (live / "pid").write_text(json.dumps({"v": 1, "supervisor": old.pid, "supervisor_start": start,
                                              "job_pid": old.pid, "job_start": start,
                                              "boot_id": launcher.boot_id(), "started_at": 7.0}))
        async with JobRunner(tmp_path / "state") as runner:
            answer = await runner.adopt([("old", 1), ("live", 1)])
            assert answer == {("old", 1): ExitStatus(job="old", attempt=1, exit_code=3, signal=None,
                                                     started_at=5.0, finished_at=6.0),
                              ("live", 1): "running"}
            assert sorted(runner.on_disk()) == [("live", 1), ("old", 1)]
            assert runner.log_paths("old", 1)[0].read_text() == "old output\n"
            with pytest.raises(AlreadyLaunched):
                await runner.start("old", 1, spec("true"))
            await runner.kill("live", 1)
            e = await Exits(runner).get("live")
            await old.wait()
            assert (e.exit_code, e.signal, e.started_at) == (None, signal.SIGTERM, 7.0)
            runner.forget("old", 1)
            runner.forget("live", 1)
            assert runner.on_disk() == []
    assert (done / "stdout").read_text() == "old output\n"  # the logs stay


def test_a_half_written_record_reads_as_not_written(tmp_path):
    """A crash or a full disk can cut an append short: only whole lines are records."""
    run = tmp_path / "1.1.run"
    pid = {"v": 1, "kind": "pid", "supervisor": 12}
    run.write_bytes(json.dumps(pid).encode() + b"\n" + b'{"v": 1, "kind": "status", "exit_code": 0')
    assert read_records(run) == (pid, None)
    run.write_bytes(b'{"v": 1, "kind": "status", "exit_code": 0, "signal": null, "finished_at": 1.0}')  # no newline
    assert read_records(run) == (None, None)
    run.write_bytes(b"garbage\n[1, 2]\n" + json.dumps(pid).encode() + b"\n")
    assert read_records(run) == (pid, None)
    assert read_records(tmp_path / "2.1.run") is None


def test_a_record_after_a_cut_short_one_is_still_read(tmp_path):
    """A pid record cut short (a full disk, a file size limit) must not swallow
    the status record appended after it: that outcome is known and fsynced."""
    run = tmp_path / "1.1.run"
    run.write_bytes(b'{"v": 1, "kind": "pid", "supervisor": 12, "supervisor_st')  # the failed pid append
    status = {"v": 1, "kind": "status", "exit_code": 0, "signal": None, "finished_at": 2.0}
    fd = os.open(run, os.O_WRONLY | os.O_APPEND)
    try:
        append_record(fd, str(tmp_path), status, durable=True)
    finally:
        os.close(fd)
    assert read_records(run) == (None, status)


async def test_a_supervisor_killed_under_a_running_runner_gives_job_lost(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(runner, "1") is not None)
            info = read_pid_file(runner, "1")
            os.kill(info["supervisor"], signal.SIGKILL)
            e = await Exits(runner).get("1")
            assert isinstance(e, JobLost)
            await wait_until(lambda: not alive(info["job_pid"]))


async def test_the_runner_outlives_its_launcher(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            exits = Exits(runner)
            await runner.start("1", 1, spec("sleep", "30"))
            await wait_until(lambda: read_pid_file(runner, "1") is not None)
            old = runner._proc
            old.kill()
            await wait_until(lambda: runner._proc is not old)
            await runner.start("2", 1, sh("exit 2"))
            assert (await exits.get("2")).exit_code == 2
            await runner.kill("1", 1)
            assert (await exits.get("1")).signal == signal.SIGTERM
            exits.assert_no_more()


# A launcher that forks a supervisor and dies before it answers; the
# supervisor stalls (a slow exec, memory pressure) until the test says go.
STALLED_LAUNCH = """
import json, os, sys, time
sys.path.insert(0, {root!r})
import reckon.daemon.agent.launcher as L
req = json.loads(sys.stdin.readline())
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_RDWR), 1)  # the agent now sees the launcher's EOF
    while not os.path.exists({go!r}):
        time.sleep(0.01)
    L._run_supervisor(req, time.time(), L.boot_id())
with open({pidfile!r} + ".tmp", "w") as f:
    f.write(str(pid))
os.rename({pidfile!r} + ".tmp", {pidfile!r})
os._exit(137)
"""


class StalledFirstLaunch(JobRunner):
    """A runner whose first launcher is STALLED_LAUNCH; the ones after it are real."""

    def __init__(self, state_dir: Path, go: Path, pidfile: Path) -> None:
        super().__init__(state_dir)
        self.go, self.pidfile, self.stalled = go, pidfile, False

    def _launcher_command(self) -> list[str]:
        if self.stalled:
            return super()._launcher_command()
        self.stalled = True
        return [sys.executable, "-c", STALLED_LAUNCH.format(root=str(ROOT), go=str(self.go), pidfile=str(self.pidfile))]


async def test_a_launch_given_up_on_never_runs_late(tmp_path, reaper):
    """The launcher died before it said whether it launched the job, and no
    supervisor spoke up in time: start() fails (the agent reports the attempt
    lost).  A supervisor that turns up after that must run nothing, and the
    attempt is never launched again."""
    ran = tmp_path / "ran"
    with trio.fail_after(HANG):
        async with StalledFirstLaunch(tmp_path / "state", tmp_path / "go", tmp_path / "supervisor") as runner:
            with pytest.raises(LaunchError, match="died before it launched"):
                await runner.start("1", 1, sh(f"touch {ran}"))
            await wait_until((tmp_path / "supervisor").exists)
            late = int((tmp_path / "supervisor").read_text())
            reaper.append(late)
            (tmp_path / "go").touch()  # the stalled supervisor goes on now
            await wait_until(lambda: not alive(late))
            with pytest.raises(AlreadyLaunched):
                await runner.start("1", 1, sh(f"touch {ran}"))
            runner.forget("1", 1)
            with pytest.raises(AlreadyLaunched):  # forgetting it does not make it launchable either
                await runner.start("1", 1, sh(f"touch {ran}"))
    assert not ran.exists()
    assert run_records(tmp_path / "state" / "jobs", "1") == (None, None)


# ---- NullRunner -----------------------------------------------------------------------------


async def test_null_runner_completes_everything_at_once(tmp_path):
    with trio.fail_after(HANG):
        async with NullRunner(tmp_path / "state") as runner:
            started_at = await runner.start("1", 1, spec("false"))
            e = await runner.exits.receive()
            assert e == ExitStatus(job="1", attempt=1, exit_code=0, signal=None, started_at=started_at,
                                   finished_at=started_at)
            await runner.kill("1", 1)
            assert await runner.adopt([("1", 1)]) == {("1", 1): "lost"}
            with pytest.raises(AlreadyLaunched):
                await runner.start("1", 1, spec("true"))
            runner.forget("1", 1)
            assert runner.log_paths("1", 1)[0].name == "1.1.stdout"
    assert not (tmp_path / "state").exists()


async def test_an_attempt_adopt_calls_lost_is_never_run_by_a_late_supervisor(tmp_path):
    """Issue #9 8d: the agent died after asking for a launch, before any supervisor
    claimed the attempt.  After the restart adopt() calls the attempt lost, so a
    supervisor that turns up later (the launch request outlived the agent) must run nothing."""
    state = tmp_path / "state"
    ran = tmp_path / "ran"
    (state / "jobs").mkdir(parents=True)
    (state / "jobs" / "late.1.stdout").touch()  # the agent's claim before its launch request
    with trio.fail_after(HANG):
        async with JobRunner(state) as runner:
            assert await runner.adopt([("late", 1)]) == {("late", 1): "lost"}
    request = {"k": ["late", 1], "base": str(state / "jobs" / "late.1"), "cmd": ["/bin/sh", "-c", f"touch {ran}"],
               "cwd": None, "env": []}
    late_supervisor = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from reckon.daemon.agent.launcher import boot_id, supervise
        sys.exit(supervise({request!r}, time.time(), boot_id()))
    """)
    import subprocess

    subprocess.run([sys.executable, "-c", late_supervisor], timeout=HANG, check=True)
    assert not ran.exists()
    assert run_records(state / "jobs", "late") == (None, None)  # no pid, no status: nothing ran
