"""The agent's side of job output (daemon/agent/output.py): --output/--error with real
processes, chunked reads, and retention that never deletes what is not acknowledged."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent.launcher import read_records
from reckon.daemon.agent.output import EXPIRED, OutputFiles
from reckon.daemon.agent.runner import JobRunner
from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from reckon.model.output import OutputStatus, OutputStream

HANG = 30  # seconds: a generous guard, never reached by a passing test
DAY = 86_400.0


def sh(script: str, **kw) -> JobSpec:
    return JobSpec(name="t", command=("/bin/sh", "-c", script), **kw)


@pytest.fixture(autouse=True)
def reaper(tmp_path):
    """Whatever a failing test leaves running dies at teardown."""
    yield
    for run_file in tmp_path.rglob("jobs/*.run"):
        info = (read_records(run_file) or (None, None))[0]
        if info is not None:
            for kill in (lambda: os.killpg(info["job_pid"], signal.SIGKILL),
                         lambda: os.kill(info["supervisor"], signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass


def read(files: OutputFiles, job: str, attempt: int = 1, *, stream=OutputStream.STDOUT, offset: int = 0,
         limit: int = 1 << 20) -> M.OutputChunk:
    return files.read(M.OutputRead(request=1, job=job, attempt=attempt, stream=stream, offset=offset, limit=limit))


# ---- --output / --error with real processes -------------------------------------------------


async def test_output_and_error_patterns_with_real_processes(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    job_spec = sh("echo out; echo err >&2", cwd=str(cwd), output="logs-%j/out.%a", error=str(tmp_path / "e-%j-%a%%"))
    (cwd / "logs-5").mkdir()
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("5", 2, job_spec)
            async for item in runner.exits:
                break
    assert item.exit_code == 0
    assert (cwd / "logs-5" / "out.2").read_text() == "out\n"  # relative: to the job's cwd
    assert (tmp_path / "e-5-2%").read_text() == "err\n"
    files = OutputFiles(tmp_path / "state" / "jobs", held=list, keep_days=None)
    # The agent's reads find them, long after the attempt is forgotten.
    runner.forget("5", 2)
    chunk = read(files, "5", 2)
    assert (chunk.status, chunk.data, chunk.path) == (OutputStatus.DATA, b"out\n", str(cwd / "logs-5" / "out.2"))
    assert read(files, "5", 2, stream=OutputStream.STDERR).data == b"err\n"


async def test_a_read_serves_no_file_put_in_place_of_the_jobs_output(tmp_path):
    """The --output path is the user's: once the job has written it, they may replace it with a
    link to a file only the agent (root) may read, or with a FIFO.  A read serves neither."""
    out = tmp_path / "out.txt"
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh("echo mine", output=str(out)))
            async for item in runner.exits:
                break
    assert item.exit_code == 0
    files = OutputFiles(tmp_path / "state" / "jobs", held=list, keep_days=None)
    assert read(files, "1").data == b"mine\n"
    secret = tmp_path / "secret"  # another uid's file (as root: made so; else root's own)
    if os.geteuid() == 0:
        secret.write_text("not yours\n")
        os.chown(secret, 65534, 65534)
    else:
        secret = Path("/etc/passwd")
    out.unlink()
    out.symlink_to(secret)
    chunk = read(files, "1")
    assert chunk.status == OutputStatus.FAILED and not chunk.data, chunk
    assert f"belongs to uid {secret.stat().st_uid}, not to the job's uid {os.geteuid()}" in chunk.reason
    out.unlink()
    os.mkfifo(out)  # opened without O_NONBLOCK, the read would wait for a writer for ever
    chunk = read(files, "1")
    assert (chunk.status, chunk.reason) == (OutputStatus.FAILED, f"not reading {out}: it is no longer a regular file")
    # A sidecar from before the uid was noted: a link in the output's place is not followed.
    sidecar = tmp_path / "state" / "jobs" / "1.1.out"
    sidecar.write_text(json.dumps({"stdout": str(out), "stderr": None}))
    out.unlink()
    out.symlink_to(secret)
    chunk = read(files, "1")
    assert chunk.status == OutputStatus.FAILED and not chunk.data, chunk


async def test_an_output_file_that_cannot_be_opened_means_the_job_cannot_run(tmp_path):
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", output_wait=0) as runner:
            await runner.start("1", 1, sh("echo never", output=str(tmp_path / "no-such-dir" / "%j.out")))
            async for item in runner.exits:
                break
    assert (item.exit_code, item.signal) == (126, None)
    err = (tmp_path / "state" / "jobs" / "1.1.stderr").read_text()
    assert "cannot open the output file" in err and "no-such-dir" in err


async def test_an_output_directory_made_just_after_the_start_is_waited_for(tmp_path):
    """submitit makes the job's folder once sbatch has printed the id: the job may start first."""
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", output_wait=HANG) as runner:
            await runner.start("1", 1, sh("echo late", output=str(tmp_path / "made-later" / "%j.out")))
            await trio.sleep(0.3)
            (tmp_path / "made-later").mkdir()
            async for item in runner.exits:
                break
    assert (item.exit_code, item.signal) == (0, None)
    assert (tmp_path / "made-later" / "1.out").read_text() == "late\n"


# ---- reads ----------------------------------------------------------------------------------


def test_reads_come_in_chunks_at_offsets(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "3.1.stdout").write_bytes(b"0123456789")
    files = OutputFiles(jobs, held=list, keep_days=None)
    assert read(files, "3", offset=0, limit=4).data == b"0123"
    chunk = read(files, "3", offset=8, limit=4)
    assert (chunk.data, chunk.size) == (b"89", 10)
    assert read(files, "3", offset=10, limit=4).data == b""  # at the end for now


def test_reads_name_unknown_missing_and_expired(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    files = OutputFiles(jobs, held=list, keep_days=3)
    assert read(files, "9").status is OutputStatus.UNKNOWN
    (tmp_path / "secret.1.stdout").write_text("not a job's")
    outside = read(files, "../secret")  # a job id is a file name in jobs/, never a path out of it
    assert outside.status is OutputStatus.UNKNOWN and outside.data == b""
    (jobs / "9.1.stdout").write_bytes(b"")  # launched, and its stderr file deleted by someone
    missing = read(files, "9", stream=OutputStream.STDERR)
    assert missing.status is OutputStatus.MISSING and "not by retention" in missing.reason
    (jobs / f"9.1{EXPIRED}").write_text("0\n")
    expired = read(files, "9")
    assert expired.status is OutputStatus.EXPIRED and "--keep-output 3 days" in expired.reason


# ---- retention ------------------------------------------------------------------------------


def _finished_attempt(jobs: Path, job: str, *, age_days: float, run_record: bool = False) -> None:
    old = time.time() - age_days * DAY
    for suffix, text in ((".stdout", "out\n"), (".stderr", "err\n")):
        path = jobs / f"{job}.1{suffix}"
        path.write_text(text)
        os.utime(path, (old, old))
    if run_record:
        (jobs / f"{job}.1.run").write_text("")


async def test_retention_deletes_old_acknowledged_output_only(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    _finished_attempt(jobs, "old", age_days=10)  # acknowledged and forgotten: goes
    _finished_attempt(jobs, "young", age_days=1)  # too young
    _finished_attempt(jobs, "unacked", age_days=10)  # the model holds it: outcome not acknowledged
    _finished_attempt(jobs, "recorded", age_days=10, run_record=True)  # not forgotten by the agent yet
    files = OutputFiles(jobs, held=lambda: [("unacked", 1)], keep_days=7)
    assert await files.sweep() == 1
    assert (jobs / "old.1.stdout").read_text() == ""  # kept, empty: the launch claim
    assert not (jobs / "old.1.stderr").exists() and (jobs / f"old.1{EXPIRED}").exists()
    for job in ("young", "unacked", "recorded"):
        assert (jobs / f"{job}.1.stdout").read_text() == "out\n"
        assert (jobs / f"{job}.1.stderr").read_text() == "err\n"
    assert read(files, "old").status is OutputStatus.EXPIRED
    assert await files.sweep() == 0  # done once


async def test_retention_never_is_the_default_and_deletes_nothing(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    _finished_attempt(jobs, "old", age_days=1000)
    assert await OutputFiles(jobs, held=list, keep_days=None).sweep() == 0
    assert (jobs / "old.1.stdout").read_text() == "out\n"
