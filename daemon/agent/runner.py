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

Parts: daemon/agent/attempts.py (outcome types, errors, reading records),
daemon/agent/supervision.py (the launcher link and the watchers),
daemon/agent/null_runner.py (the runners without processes, for benchmarks).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Literal, Sequence

import trio

from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from reckon.model.resources import Owner

from reckon.daemon.agent.output import custom_outputs, note_custom_outputs

from reckon.daemon.agent import batchjobs as _batch, cgroups as _cgroups, launcher as _launcher
from reckon.daemon.agent.users import DEFAULT_UMASK, ownerless_refusal
from reckon.daemon.agent.attempts import (
    AlreadyLaunched, ExitStatus, Key, LaunchError, Outcome, RunnerError, pidinfo_current, proc_alive, read_json,
    status_from, check_key,
)
from reckon.daemon.agent.jobenv import JobHost, base_environment, job_environment
from reckon.daemon.agent.supervision import Supervision, RunningAttempt, LaunchWaiter
from reckon.daemon.store.filemodes import OUTPUT_MODE, private_dir

# Seconds a job's --output/--error directory gets to appear: submitit makes it only once sbatch
# has printed the id, and a job here may start within milliseconds of that (Slurm's latency hides it).
OUTPUT_WAIT = 10.0

__all__ = ["JobRunner"]


class JobRunner(Supervision):
    """Runs jobs under supervisors; see the module docstring."""

    def __init__(self, state_dir: Path | str, *, kill_grace: float = 10.0, output_mode: int = OUTPUT_MODE,
                 cgroups: dict | None = None, pids_max: int | None = _cgroups.DEFAULT_PIDS_MAX,
                 allow_root_jobs: bool = False, umask: int = DEFAULT_UMASK, controller: str | None = None,
                 refuse_ownerless: bool = False, output_wait: float = OUTPUT_WAIT, mem_cap: int | None = None) -> None:
        self.kill_grace = kill_grace  # the supervisor's SIGTERM-to-SIGKILL wait at a job's time limit
        # What cgroups.detect() found (None or version None: no cgroups, as before); pids_max: each
        # attempt's pids limit (None: none).  Owners: root's jobs only with allow_root_jobs; umask.
        self.cgroups = cgroups if cgroups is not None and cgroups.get("version") else None
        self.pids_max = pids_max
        # The memory the agent offers (detected or --mem, less --reserve-mem): with cgroups, the limit
        # of a job that asks none (--mem), and the cap of all its jobs together (cgroups.py).
        self.mem_cap = mem_cap
        self.allow_root_jobs = allow_root_jobs
        self.umask = umask
        # A root agent on a munge cluster: a job without an owner (queued in token mode) would run
        # as root; its supervisor refuses it (exit 126, not_run) unless --allow-root-jobs.
        self.refuse_ownerless = refuse_ownerless
        self.state_dir = Path(state_dir).absolute()
        self.jobs_dir = self.state_dir / "jobs"
        self.output_mode = output_mode  # of the jobs' .stdout/.stderr files
        self.output_wait = output_wait  # seconds a job's --output/--error directory gets to appear
        self._job_env_base = base_environment()  # daemon/agent/jobenv.py: what every job gets
        self._host = JobHost.here(controller)  # what %N %u and slurm_env name (version 7)
        self._send_exit, self._recv_exit = trio.open_memory_channel[Outcome](math.inf)
        self._running: dict[Key, RunningAttempt] = {}
        self._waiters: dict[Key, LaunchWaiter] = {}
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
        return read_json(legacy / "pid"), read_json(legacy / "status")

    def log_paths(self, job: str, attempt: int) -> tuple[Path, Path]:
        check_key(job, attempt)
        layout = "attempt-dir" if self._legacy_dir((job, attempt)).is_dir() else "flat"
        out, err = M.output_paths(str(self.jobs_dir), layout, job, attempt)
        return Path(out), Path(err)

    @property
    def exits(self) -> trio.MemoryReceiveChannel[Outcome]:
        return self._recv_exit

    async def start(self, job: str, attempt: int, spec: JobSpec, *, owner: Owner | None = None,
                    gpus: tuple[int, ...] = ()) -> float:
        """Launch ``spec`` as (job, attempt); return started_at (wall clock).

        ``owner``: run it as that user (None: as the agent's user); ``gpus``: its
        assigned GPU indices (in its environment).  With cgroups, its supervisor
        makes the attempt's cgroup: memory ``spec.mem`` (none asked: ``mem_cap``),
        CPUs ``spec.slots``, pids; and caps all attempts together at ``mem_cap``.
        A job that cannot run as its owner (no account here, root refused) is
        not an error here either: it finishes with exit code 126.

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
        env = job_environment(spec, job, attempt, self._job_env_base, gpus=tuple(gpus), host=self._host, owner=owner)
        request = {"k": [job, attempt], "base": base, "cmd": list(spec.command), "cwd": spec.cwd,
                   "env": sorted(env.items()), "mode": self.output_mode}
        if spec.script is not None:  # version 7: the supervisor runs it through a descriptor (batchjobs.py)
            request["script"] = base + _batch.SCRIPT
            await trio.to_thread.run_sync(_batch.write_script, request["script"], spec.script)
        if spec.warn_signal is not None and spec.time_limit is not None:
            request["warn"] = {"sig": spec.warn_signal, "before": spec.warn_before, "batch_only": spec.warn_batch_only}
        if owner is not None:  # checked and switched to by the supervisor (daemon/agent/users.py)
            request["user"] = {"uid": owner.uid, "gid": owner.gid, "user": owner.user,
                               "allow_root": self.allow_root_jobs}
            request["umask"] = self.umask
        elif self.refuse_ownerless:
            request["refuse"] = ownerless_refusal()
        if self.cgroups is not None:
            request["cgroup"] = _cgroups.plan(self.cgroups, job, attempt,
                                              mem=spec.mem if spec.mem is not None else self.mem_cap,
                                              cpus=spec.slots, pids_max=self.pids_max, pool_mem=self.mem_cap)
        if spec.time_limit is not None:  # enforced by the supervisor, so it holds across agent restarts
            request.update(limit=spec.time_limit, grace=self.kill_grace)
        # --output / --error: noted for later reads
        outputs = custom_outputs(spec, job, attempt, user=self._host.user_of(owner), host=self._host.short)
        if outputs:
            note_custom_outputs(base, outputs, owner.uid if owner is not None else os.geteuid())
            request.update(outputs, out_wait=self.output_wait)
            # --open-mode (version 7): truncate unless asked to append; a rerun of the job (a retry,
            # a requeue) appends, so an earlier attempt's output is kept, as Slurm keeps a requeued job's.
            if spec.open_mode == "truncate" or (spec.open_mode is None and attempt == 1):
                request["truncate"] = True
        waiter = self._waiters[key] = LaunchWaiter(event=trio.Event())
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

    async def send_signal(self, job: str, attempt: int, sig: int, *, batch_only: bool = False,
                          full: bool = False, wait: float = 10.0) -> int:
        """Send ``sig`` to the running attempt's processes now (version 7, ``reckon signal``), as
        scancel does: the top process only with ``batch_only`` (``-b``), every process of the job
        (its process group and cgroup) with ``full`` (``-f``), else every process but the top one
        (the job's steps).  How many signals it sent (0: not running here).

        The supervisor writes the job's pid record just after it started the job, so a job may
        run (and be asked about) a moment before it: waited for, at most ``wait`` seconds."""
        check_key(job, attempt)
        key = (job, attempt)
        with trio.move_on_after(wait):
            while key in self._running:
                info, status = self._records(key)
                if status is not None:
                    return 0  # over: nothing of it to signal
                if info is not None:
                    break
                await trio.sleep(0.01)
        if key not in self._running:
            return 0
        info, status = self._records(key)
        if status is not None or not pidinfo_current(info) or not proc_alive(info.get("job_pid"), info.get("job_start")):
            return 0  # over, or not started
        pid = info["job_pid"]
        cgroup_pids = None
        if not batch_only and self.cgroups is not None:
            planned = _cgroups.plan(self.cgroups, job, attempt, mem=None, cpus=None, pids_max=None)
            cgroup_pids = _cgroups.Cgroup(planned).pids() if planned is not None else None
        return _batch.send(pid, sig, top=batch_only or full, rest=not batch_only, cgroup_pids=cgroup_pids)

    async def _escalate(self, key: Key, run: RunningAttempt, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_until(run.escalate_at)
            if self._running.get(key) is run:
                self._signal(key, run, signal.SIGKILL)

    def _signal(self, key: Key, run: RunningAttempt, sig: int) -> None:
        info, status = self._records(key)
        if status is not None:
            return  # over; its exit is on its way
        if pidinfo_current(info) and proc_alive(info.get("job_pid"), info.get("job_start")):
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
                self._running[key] = RunningAttempt(supervisor=None, adopted=True)
                self._nursery.start_soon(self._watch, key)
            answer[key] = result
        return answer

    def _probe_many(self, keys: list[Key]) -> dict[Key, Literal["running", "lost"] | ExitStatus]:
        out: dict[Key, Literal["running", "lost"] | ExitStatus] = {}
        for key in keys:
            for attempt_no in range(2):
                info, status = self._records(key)
                if status is not None and (st := status_from(key, status)) is not None:
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
                if pidinfo_current(info) and proc_alive(info.get("supervisor"), info.get("supervisor_start")):
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
        paths = [self._base(job, attempt) + _batch.SCRIPT]  # a script a launch never ran (batchjobs.py)
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
