"""Jobs as real OS processes: the agent's side of the launcher and supervisors.

``JobRunner`` starts one launcher (``daemon/agent/launcher.py``, a fork server) and
talks to it over its stdin/stdout pipes.  Each job runs under its own
supervisor process (forked by the launcher, its own session) which records the
job's end durably in ``state_dir/jobs/<job>.<attempt>.run``; the agent only
ever *reads* outcomes, so an outcome exists on disk whether or not the agent is
alive when the job ends.

Files of one attempt, in ``state_dir/jobs/`` (``daemon/agent/launcher.py`` has the
details):

``<job>.<attempt>.stdout``, ``<job>.<attempt>.stderr``
    the job's output (kept when the attempt is forgotten).  The agent creates
    ``.stdout`` before the launch: the claim that the attempt was launched.
``<job>.<attempt>.run``
    JSON lines: the ``pid`` record (supervisor pid and /proc start time, job
    pid (= its process group) and start time, boot id, started_at), then the
    ``status`` record (exit_code or signal, started_at, finished_at), appended
    and fsynced with ``jobs/``.

Agents before the flat layout kept the same records as ``pid`` and ``status``
files in a directory ``<job>.<attempt>/``; attempts left that way by an
upgrade are still read, signalled and forgotten.

How an exit reaches ``exits``:

* jobs started by this runner: the launcher reaps the supervisor and says so;
  the runner reads the ``status`` record;
* jobs taken over by ``adopt()`` (not our children): the runner waits on a
  pidfd of the supervisor (or polls, where pidfd_open is unavailable) and then
  reads the ``status`` record;
* a supervisor that ended without a ``status`` record (SIGKILLed, disk failure) gives
  a ``JobLost`` item instead: nobody can know the outcome, and none is made up.
  If the job's process group is still there it is SIGKILLed first, so a job
  reported lost does not go on running unsupervised.

Every finished (job, attempt) a runner knows of is delivered at most once on
``exits`` (exactly once while the runner stays open).  For the model:
``ExitStatus`` becomes ``events.ProcessExited``, ``JobLost`` and an
``adopt()`` answer of ``"lost"`` become ``events.ProcessLost``.

Other rules worth knowing:

* the end of a job is the end of its main process; whatever is left in its
  process group then is SIGKILLed by the supervisor;
* ``kill()`` signals the job's process group (never the supervisor, which must
  live to record the signal); it is a no-op for an attempt this runner does
  not know as running (so call ``adopt()`` first after a restart);
* if the launcher dies under an open runner, the runner watches the running
  supervisors itself and starts a new launcher; the jobs are not affected;
* leaving the runner (``__aexit__``) stops the launcher, the watchers and any
  pending kill escalation, never a job.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence, Union

import trio

from model import messages as M
from model.jobs import JobSpec

from daemon.agent.output import custom_outputs, note_custom_outputs

from daemon.agent import launcher as _launcher
from daemon.agent.jobenv import base_environment, job_environment
from daemon.store.filemodes import OUTPUT_MODE, private_dir

__all__ = ["ExitStatus", "JobLost", "RunnerError", "LaunchError", "AlreadyLaunched", "JobRunner", "NullRunner",
           "check_key"]

Key = tuple[str, int]

MAX_JOB_ID_LEN = 200
ADOPT_POLL_INTERVAL = 0.25  # seconds, only where pidfd_open is unavailable
PID_FILE_WAIT = 2.0  # seconds a supervisor may take to write its pid record (launcher death mid-launch only)
CLAIMED_WAIT = 30.0  # more seconds for one that has claimed the attempt (it is starting the job)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a job ended, as its supervisor recorded it."""

    job: str
    attempt: int
    exit_code: int | None  # None when killed by a signal
    signal: int | None  # None when it exited
    started_at: float | None
    finished_at: float
    timed_out: bool = False  # the supervisor stopped it at the job's time limit


@dataclass(frozen=True, slots=True)
class JobLost:
    """A supervisor ended without recording an outcome: the outcome is unknown."""

    job: str
    attempt: int
    reason: str


Outcome = Union[ExitStatus, JobLost]


class RunnerError(Exception):
    """Misuse of the runner or a failure of its machinery."""


class LaunchError(RunnerError):
    """The launch failed before anything ran (fork failed, launcher gone)."""


class AlreadyLaunched(LaunchError):
    """This (job, attempt) was launched before (its files exist): it is not run twice."""


def check_key(job: str, attempt: int) -> None:
    """Job ids become file names: refuse anything that is not a plain name."""
    if not isinstance(job, str) or not job:
        raise ValueError("job id must be a non-empty string")
    if (len(job) > MAX_JOB_ID_LEN or "/" in job or "\0" in job or ".." in job or job.startswith(".")
            or "\n" in job):
        raise ValueError(f"job id {job!r} cannot be used as a file name")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValueError(f"attempt must be an integer >= 1, got {attempt!r}")


def _read_json(path: Path) -> dict | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _status_from(key: Key, obj: dict) -> ExitStatus | None:
    try:
        exit_code, sig, finished_at = obj["exit_code"], obj["signal"], obj["finished_at"]
        started_at = obj.get("started_at")
    except KeyError:
        return None
    if (exit_code is None) == (sig is None) or not isinstance(finished_at, (int, float)):
        return None
    if not isinstance(started_at, (int, float)) or isinstance(started_at, bool):
        started_at = None  # a start time we cannot read is unknown, not an error
    return ExitStatus(job=key[0], attempt=key[1], exit_code=exit_code, signal=sig,
                      started_at=None if started_at is None else float(started_at), finished_at=float(finished_at),
                      timed_out=obj.get("timed_out") is True)


_BOOT_ID = _launcher.boot_id()


def _proc_alive(pid: object, start: object) -> bool:
    """``pid`` is still the process that started at ``start`` and has not exited."""
    if not isinstance(pid, int) or pid <= 0 or not isinstance(start, int):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[19]) == start and fields[0] not in (b"Z", b"X", b"x")
    except (OSError, ValueError, IndexError):
        return False


def _pidinfo_current(info: dict | None) -> bool:
    return bool(info) and info.get("boot_id") == _BOOT_ID


@dataclass(slots=True)
class _Running:
    supervisor: int | None  # from the launcher's answer (ours); None when adopted
    adopted: bool  # watched through its pid record, not through the launcher
    escalation: trio.CancelScope | None = None  # the pending SIGKILL of a kill in progress
    escalate_at: float = math.inf  # its trio time


@dataclass(slots=True)
class _Waiter:
    event: trio.Event
    started_at: float | None = None
    error: str | None = None


class JobRunner:
    """Runs jobs under supervisors; see the module docstring."""

    def __init__(self, state_dir: Path | str, *, kill_grace: float = 10.0, output_mode: int = OUTPUT_MODE) -> None:
        self.kill_grace = kill_grace  # the supervisor's SIGTERM-to-SIGKILL wait at a job's time limit
        self.state_dir = Path(state_dir).absolute()
        self.jobs_dir = self.state_dir / "jobs"
        self.output_mode = output_mode  # of the jobs' .stdout/.stderr files
        self._job_env_base = base_environment()  # daemon/agent/jobenv.py: what every job gets
        self._send_exit, self._recv_exit = trio.open_memory_channel[Outcome](math.inf)
        self._running: dict[Key, _Running] = {}
        self._waiters: dict[Key, _Waiter] = {}
        self._requests: list[bytes] = []
        self._request_ready = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._nursery_cm = None
        self._proc: trio.Process | None = None
        self._closing = False
        self._launcher_restarts = 0

    # ---- lifetime ----------------------------------------------------------------

    async def __aenter__(self) -> "JobRunner":
        if self._nursery_cm is not None:
            raise RunnerError("a JobRunner can be entered once")
        private_dir(self.jobs_dir)
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        try:
            await self._nursery.start(self._launcher_task)
        except BaseException:
            self._nursery.cancel_scope.cancel()
            await self._nursery_cm.__aexit__(*sys.exc_info())
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        """Stop the launcher; running jobs go on (their supervisors are independent)."""
        assert self._nursery is not None and self._nursery_cm is not None
        self._closing = True
        # Shielded: a cancelled agent still stops its launcher cleanly.
        with trio.CancelScope(shield=True):
            proc = self._proc
            if proc is not None:
                with trio.move_on_after(5):
                    if proc.stdin is not None:
                        await proc.stdin.aclose()  # EOF: the launcher exits
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        # Watchers and kill escalations stop here; the jobs do not.
        self._nursery.cancel_scope.cancel()
        await self._nursery_cm.__aexit__(None, None, None)
        for waiter in self._waiters.values():
            waiter.error = "the runner closed"
            waiter.event.set()
        self._send_exit.close()
        return False

    # ---- the launcher ------------------------------------------------------------

    def _launcher_command(self) -> list[str]:
        # -I -S: no site, no PYTHON* variables, no cwd on sys.path (the
        # launcher imports nothing outside the standard library).  The path
        # is given explicitly so this works whatever the agent's cwd is.
        root = str(Path(_launcher.__file__).resolve().parents[2])
        return [sys.executable, "-I", "-S", "-c",
                f"import sys; sys.path.insert(0, {root!r}); from daemon.agent.launcher import main; main()"]

    async def _launcher_task(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            proc = await trio.lowlevel.open_process(
                self._launcher_command(), stdin=-1, stdout=-1, stderr=None,
                close_fds=True, start_new_session=True, env=self._job_env_base,
            )
            self._proc = proc
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, proc)
                    if not started:
                        started = True
                        task_status.started()
                    await self._reader(proc)
                    nursery.cancel_scope.cancel()
            finally:
                if self._closing or proc.returncode is None:
                    with trio.CancelScope(shield=True):
                        if not self._closing:
                            proc.kill()
                        await proc.wait()
            if self._closing:
                return
            # The launcher died under us (killed, OOM): our jobs are unharmed.
            await self._launcher_died()
            self._launcher_restarts += 1
            if self._launcher_restarts > 20:
                raise RunnerError("the launcher keeps dying")
            await trio.sleep(min(0.05 * self._launcher_restarts, 1.0))

    async def _writer(self, proc: trio.Process) -> None:
        assert proc.stdin is not None
        while True:
            await self._request_ready.wait()
            self._request_ready = trio.Event()
            batch, self._requests = b"".join(self._requests), []
            if batch:
                try:
                    await proc.stdin.send_all(batch)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the reader sees the EOF and deals with it

    async def _reader(self, proc: trio.Process) -> None:
        assert proc.stdout is not None
        buf = b""
        while True:
            try:
                data = await proc.stdout.receive_some(1 << 16)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                return
            buf += data
            if b"\n" not in data:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line:
                    self._on_launcher_message(json.loads(line))

    def _on_launcher_message(self, msg: dict) -> None:
        kind = msg["t"]
        key = tuple(msg["k"]) if msg.get("k") is not None else None
        if kind == "S":
            self._running[key] = _Running(supervisor=msg["pid"], adopted=False)
            waiter = self._waiters.pop(key, None)
            if waiter is not None:
                waiter.started_at = msg["at"]
                waiter.event.set()
        elif kind == "F":
            run = self._running.get(key)
            if run is not None and not run.adopted:
                self._done(key)
                self._collect(key, f"the supervisor ended (wait status {msg['ws']:#x}) without recording an outcome")
        elif kind == "E":
            waiter = self._waiters.pop(key, None) if key is not None else None
            if waiter is None:
                print(f"reckon launcher: {msg.get('err')}", file=sys.stderr)
                return
            waiter.error = msg["err"]  # nothing was forked: nothing runs
            waiter.event.set()

    async def _launcher_died(self) -> None:
        """Carry on after an unexpected launcher exit: watch our supervisors ourselves."""
        assert self._nursery is not None
        inflight = list(self._waiters.items())
        self._waiters.clear()
        self._requests.clear()  # never sent, or sent to the dead launcher: settled below
        for key, run in list(self._running.items()):
            if not run.adopted:
                run.adopted = True
                self._nursery.start_soon(self._watch, key)
        for key, waiter in inflight:
            self._nursery.start_soon(self._settle_inflight, key, waiter)

    async def _settle_inflight(self, key: Key, waiter: _Waiter) -> None:
        """A launch the dead launcher never answered: did its supervisor start?"""
        found = await self._wait_for_record(key, PID_FILE_WAIT)
        if found is None and not self._withdraw(key):
            # A supervisor claimed the attempt before we could withdraw it:
            # it is starting the job, and will say so.
            found = await self._wait_for_record(key, CLAIMED_WAIT)
        started_at = found.get("started_at") if found is not None else None
        if isinstance(started_at, (int, float)):
            self._running[key] = _Running(supervisor=None, adopted=True)
            assert self._nursery is not None
            self._nursery.start_soon(self._watch, key)
            waiter.started_at = float(started_at)
        else:
            waiter.error = "the launcher died before it launched the job"
        waiter.event.set()

    async def _wait_for_record(self, key: Key, seconds: float) -> dict | None:
        with trio.move_on_after(seconds):
            while True:
                pid, status = self._records(key)
                if pid or status:
                    return pid or status
                await trio.sleep(0.05)
        return None

    def _withdraw(self, key: Key) -> bool:
        """Claim the attempt's .run file for nobody; False if a supervisor claimed it first."""
        fd = _launcher.claim_run_file(self._base(*key) + _launcher.RUN)
        if fd is None:
            return False
        try:
            _launcher.append_record(fd, str(self.jobs_dir), {"v": 1, "kind": "withdrawn"}, durable=False)
        finally:
            os.close(fd)
        return True

    def _withdrawn(self, key: Key) -> bool:
        """The attempt's .run file holds our ``withdrawn`` claim (no supervisor's)."""
        try:
            with open(self._base(*key) + _launcher.RUN, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        for line in data.split(b"\n")[:-1]:
            try:
                record = json.loads(line) if line else None
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("kind") == "withdrawn":
                return True
        return False

    # ---- reading outcomes ----------------------------------------------------------

    def _collect(self, key: Key, why_lost: str) -> None:
        """The supervisor of ``key`` is gone: deliver its status, or JobLost."""
        pid, status = self._records(key)
        outcome: Outcome | None = _status_from(key, status) if status is not None else None
        if outcome is None:
            self._kill_orphan(pid)
            outcome = JobLost(job=key[0], attempt=key[1], reason=why_lost)
        self._send_exit.send_nowait(outcome)

    @staticmethod
    def _kill_orphan(info: dict | None) -> None:
        if _pidinfo_current(info) and _proc_alive(info.get("job_pid"), info.get("job_start")):
            try:
                os.killpg(info["job_pid"], signal.SIGKILL)
            except OSError:
                pass

    async def _watch(self, key: Key) -> None:
        """Wait for the end of a supervisor that is not the launcher's child."""
        try:
            info, status = self._records(key)
            if info is None and status is None:
                # Only after a launcher death mid-launch (or a supervisor that
                # claimed the attempt as adopt() looked): a supervisor may be
                # about to write its pid record.  Give it a moment, and more
                # once it has claimed the attempt (it is starting the job).
                found = await self._wait_for_record(key, PID_FILE_WAIT)
                if found is None and Path(self._base(*key) + _launcher.RUN).exists() and not self._withdrawn(key):
                    await self._wait_for_record(key, CLAIMED_WAIT)
                info, _ = self._records(key)
            if _pidinfo_current(info):
                await self._wait_process_end(info.get("supervisor"), info.get("supervisor_start"))
        finally:
            run = self._done(key)
        if run is not None:
            self._collect(key, "the supervisor ended without recording an outcome")

    def _done(self, key: Key) -> _Running | None:
        run = self._running.pop(key, None)
        if run is not None and run.escalation is not None:
            run.escalation.cancel()
        return run

    @staticmethod
    async def _wait_process_end(pid: object, start: object) -> None:
        if not _proc_alive(pid, start):
            return
        assert isinstance(pid, int)
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            fd = None
        if fd is None:
            while _proc_alive(pid, start):
                await trio.sleep(ADOPT_POLL_INTERVAL)
            return
        try:
            if not _proc_alive(pid, start):  # the pid was reused between the check and the open
                return
            await trio.lowlevel.wait_readable(fd)
        finally:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)

    # ---- the API ---------------------------------------------------------------------

    def _base(self, job: str, attempt: int) -> str:
        """The common prefix of the attempt's files."""
        return f"{self.jobs_dir}/{job}.{attempt}"

    def _legacy_dir(self, key: Key) -> Path:
        """Where an agent before the flat layout kept the attempt's files."""
        return self.jobs_dir / f"{key[0]}.{key[1]}"

    def _records(self, key: Key) -> tuple[dict | None, dict | None]:
        """The attempt's pid and status records, from either layout ((None, None): neither yet)."""
        found = _launcher.read_records(self._base(*key) + _launcher.RUN)
        if found is not None:
            return found
        legacy = self._legacy_dir(key)
        return _read_json(legacy / "pid"), _read_json(legacy / "status")

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        check_key(job, attempt)
        layout = "attempt-dir" if self._legacy_dir((job, attempt)).is_dir() else "flat"
        out, err = M.output_paths(str(self.jobs_dir), layout, job, attempt)
        return Path(out), Path(err)

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Outcome]:
        return self._recv_exit

    async def start(self, job: str, attempt: int, spec: JobSpec) -> float:
        """Launch ``spec`` as (job, attempt); return started_at (wall clock).

        Raises ``LaunchError`` if nothing was started now: ``AlreadyLaunched``
        when this attempt was launched before (its files exist; an attempt
        never runs twice), or the fork failed, or the launcher died
        first.  ``RunnerError`` if it is running under this runner already.  A
        command that cannot be executed is *not* an error here: it starts and
        finishes with exit code 127/126.
        """
        check_key(job, attempt)
        if self._nursery is None or self._closing:
            raise RunnerError("the runner is not open")
        key = (job, attempt)
        if key in self._running or key in self._waiters:
            raise RunnerError(f"{job}.{attempt} is already running")
        base = self._base(job, attempt)
        if self._legacy_dir(key).exists():
            raise AlreadyLaunched(f"{job}.{attempt} was launched before ({self._legacy_dir(key)} exists)")
        try:
            fd = os.open(base + _launcher.STDOUT, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before ({base}{_launcher.STDOUT} exists)") from None
        try:
            os.fchmod(fd, self.output_mode)  # explicit: the umask must not widen or narrow it
        finally:
            os.close(fd)
        env = job_environment(spec, job, attempt, self._job_env_base)
        request = {"k": [job, attempt], "base": base, "cmd": list(spec.command), "cwd": spec.cwd,
                   "env": sorted(env.items()), "mode": self.output_mode}
        if spec.time_limit is not None:  # enforced by the supervisor, so it holds across agent restarts
            request.update(limit=spec.time_limit, grace=self.kill_grace)
        outputs = custom_outputs(spec, job, attempt)  # --output / --error: noted for later reads
        if outputs:
            note_custom_outputs(base, outputs)
            request.update(outputs)
        waiter = self._waiters[key] = _Waiter(event=trio.Event())
        self._requests.append(json.dumps(request).encode() + b"\n")
        self._request_ready.set()
        await waiter.event.wait()
        if waiter.error is not None:
            raise LaunchError(f"cannot launch {job}.{attempt}: {waiter.error}")
        assert waiter.started_at is not None
        return waiter.started_at

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        """SIGTERM the job's process group now, SIGKILL it after ``grace`` s if it is still running.

        Returns at once.  A job this runner does not know as running (never
        launched or adopted here, or already finished) is left alone.
        """
        check_key(job, attempt)
        key = (job, attempt)
        run = self._running.get(key)
        if run is None:
            return
        self._signal(key, run, signal.SIGTERM)
        assert self._nursery is not None
        deadline = trio.current_time() + max(grace, 0.0)
        if deadline < run.escalate_at:  # a later kill() can only bring the SIGKILL forward
            if run.escalation is not None:
                run.escalation.cancel()
            run.escalate_at = deadline
            run.escalation = trio.CancelScope(deadline=math.inf)
            self._nursery.start_soon(self._escalate, key, run, run.escalation)

    async def _escalate(self, key: Key, run: _Running, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_until(run.escalate_at)
            if self._running.get(key) is run:
                self._signal(key, run, signal.SIGKILL)

    def _signal(self, key: Key, run: _Running, sig: int) -> None:
        info, status = self._records(key)
        if status is not None:
            return  # over; its exit is on its way
        if _pidinfo_current(info) and _proc_alive(info.get("job_pid"), info.get("job_start")):
            try:
                os.killpg(info["job_pid"], sig)
            except OSError:
                pass
            return
        # No pid record yet (the supervisor is just starting the job): the
        # supervisor forwards SIGTERM, and turns SIGUSR1 into a SIGKILL.
        sup = run.supervisor
        if sup is not None and not run.adopted:
            try:
                os.kill(sup, signal.SIGUSR1 if sig == signal.SIGKILL else sig)
            except OSError:
                pass

    async def adopt(self, keys: Sequence[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        """After an agent restart: what became of the attempts the agent's records call running.

        * ``ExitStatus``: it finished (possibly while the agent was down).  It is
          returned here only, never also on ``exits``.
        * ``"running"``: its supervisor is alive; its end arrives on ``exits``.
        * ``"lost"``: no status and no live supervisor; nobody can tell.  A job
          process left without its supervisor is SIGKILLed, and an attempt no
          supervisor has claimed is withdrawn (its ``.run`` claimed for nobody),
          so a supervisor of a launch request that outlived the agent runs nothing.
        """
        for job, attempt in keys:
            check_key(job, attempt)
        if self._nursery is None or self._closing:
            raise RunnerError("the runner is not open")
        todo = [k for k in dict.fromkeys((j, a) for j, a in keys) if k not in self._running]
        probed = await trio.to_thread.run_sync(self._probe_many, todo)
        answer: dict[Key, Literal["running", "lost"] | ExitStatus] = {}
        for job, attempt in keys:
            key = (job, attempt)
            if key in self._running:
                answer[key] = "running"
                continue
            # Absent: it was ours when adopt() began and ended meanwhile; its
            # exit went to ``exits``.
            result = probed.get(key, "running")
            if result == "running" and key in probed:
                self._running[key] = _Running(supervisor=None, adopted=True)
                self._nursery.start_soon(self._watch, key)
            answer[key] = result
        return answer

    def _probe_many(self, keys: list[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        out: dict[Key, Literal["running", "lost"] | ExitStatus] = {}
        for key in keys:
            for attempt_no in range(2):
                info, status = self._records(key)
                if status is not None and (st := _status_from(key, status)) is not None:
                    out[key] = st
                    break
                if attempt_no:
                    self._kill_orphan(info)
                    if info is None and not self._withdraw(key) and not self._withdrawn(key):
                        # A supervisor claimed the attempt just now (a launch request
                        # outlived the agent): it is starting the job.  Watch it.
                        out[key] = "running"
                        break
                    # Withdrawn (or it had a supervisor, now dead): a supervisor
                    # coming late runs nothing of an attempt reported lost.
                    out[key] = "lost"
                    break
                if _pidinfo_current(info) and _proc_alive(info.get("supervisor"), info.get("supervisor_start")):
                    out[key] = "running"
                    break
                # Not alive: look at the status once more (it may have ended
                # between the two reads), then call it lost.
        return out

    def on_disk(self) -> list[Key]:
        """Attempts with a pid or status record that were not forgotten (for the agent's restart scan)."""
        out: list[Key] = []
        try:
            entries = os.listdir(self.jobs_dir)
        except FileNotFoundError:
            return out
        for name in entries:
            if name.endswith(_launcher.RUN):
                name = name[:-len(_launcher.RUN)]
            elif name.endswith((_launcher.STDOUT, _launcher.STDERR)):
                continue
            # else: maybe an attempt's directory (the legacy layout)
            job, _, attempt = name.rpartition(".")
            if not job or not attempt.isdigit():
                continue
            if self._records((job, int(attempt))) != (None, None):
                out.append((job, int(attempt)))
        return out

    def forget(self, job: str, attempt: int) -> None:
        """Delete the pid and status records of a finished attempt; the logs stay."""
        check_key(job, attempt)
        if (job, attempt) in self._running:
            raise RunnerError(f"{job}.{attempt} is still running")
        paths = []
        if self._records((job, attempt)) != (None, None):
            # Else it was withdrawn (or its supervisor died at once): the
            # claim stays, so that a supervisor coming late still runs nothing.
            paths.append(self._base(job, attempt) + _launcher.RUN)
        legacy = self._legacy_dir((job, attempt))
        paths += [legacy / name for name in ("status", "pid", "status.tmp", "pid.tmp", "supervisor-error")]
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class NullRunner:
    """The JobRunner API without processes: every job "exits 0" as soon as it starts.

    For benchmarks of the controller and the protocol alone.
    """

    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.state_dir = Path(state_dir).absolute() if state_dir is not None else Path(os.devnull)
        self._send_exit, self._recv_exit = trio.open_memory_channel[Outcome](math.inf)
        self._started: set[Key] = set()

    async def __aenter__(self) -> "NullRunner":
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        self._send_exit.close()
        return False

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Outcome]:
        return self._recv_exit

    async def start(self, job: str, attempt: int, spec: JobSpec) -> float:
        check_key(job, attempt)
        if (job, attempt) in self._started:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self._started.add((job, attempt))
        now = time.time()
        self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=0, signal=None,
                                               started_at=now, finished_at=now))
        return now

    async def kill(self, job: str, attempt: int, grace: float = 10.0) -> None:
        check_key(job, attempt)

    async def adopt(self, keys: Sequence[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        for job, attempt in keys:
            check_key(job, attempt)
        return {(job, attempt): "lost" for job, attempt in keys}

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        check_key(job, attempt)
        out, err = M.output_paths(str(self.state_dir / "jobs"), "flat", job, attempt)
        return Path(out), Path(err)

    def on_disk(self) -> list[Key]:
        return []

    def forget(self, job: str, attempt: int) -> None:
        check_key(job, attempt)


class HoldRunner(NullRunner):
    """Like NullRunner, but every job keeps "running" until ``release_all()``.

    For the resync benchmark: jobs are placed, the agent is cut off, then they
    all finish at once while it is away (the agent calls ``release_all`` on SIGUSR1).
    """

    def __init__(self, state_dir: Path | str | None = None) -> None:
        super().__init__(state_dir)
        self._held: list[Key] = []

    async def start(self, job: str, attempt: int, spec: JobSpec) -> float:
        check_key(job, attempt)
        if (job, attempt) in self._started:
            raise AlreadyLaunched(f"{job}.{attempt} was launched before")
        self._started.add((job, attempt))
        self._held.append((job, attempt))
        return time.time()

    def release_all(self) -> int:
        now = time.time()
        held, self._held = self._held, []
        for job, attempt in held:
            self._send_exit.send_nowait(ExitStatus(job=job, attempt=attempt, exit_code=0, signal=None,
                                                   started_at=None, finished_at=now))
        return len(held)
