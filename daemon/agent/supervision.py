"""How a ``JobRunner`` (daemon/agent/runner.py) follows its supervisors.

The launcher link: one launcher process (a fork server, daemon/agent/launcher.py)
over its stdin/stdout pipes, restarted if it dies, after which the runner
watches the running supervisors itself.  The watchers: a supervisor that is not
the launcher's child is waited on through a pidfd (or polled); when one ends,
its status record is read and delivered on ``exits``, or ``JobLost``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import trio

from reckon.daemon.agent import launcher as _launcher
from reckon.daemon.agent.attempts import Key, JobLost, Outcome, RunnerError, pidinfo_current, proc_alive, status_from

ADOPT_POLL_INTERVAL = 0.25  # seconds, only where pidfd_open is unavailable
PID_FILE_WAIT = 2.0  # seconds a supervisor may take to write its pid record (launcher death mid-launch only)
CLAIMED_WAIT = 30.0  # more seconds for one that has claimed the attempt (it is starting the job)


@dataclass(slots=True)
class RunningAttempt:
    supervisor: int | None  # from the launcher's answer (ours); None when adopted
    adopted: bool  # watched through its pid record, not through the launcher
    escalation: trio.CancelScope | None = None  # the pending SIGKILL of a kill in progress
    escalate_at: float = math.inf  # its trio time


@dataclass(slots=True)
class LaunchWaiter:
    event: trio.Event
    started_at: float | None = None
    error: str | None = None


class Supervision:
    """Part of ``JobRunner``: the launcher link and the watchers of supervisors."""

    # ---- the launcher ------------------------------------------------------------

    def _launcher_command(self) -> list[str]:
        # -I -S: no site, no PYTHON* variables, no cwd on sys.path (the
        # launcher imports nothing outside the standard library, so it runs
        # as a script by its path, whatever the agent's cwd or install).
        return [sys.executable, "-I", "-S", str(Path(_launcher.__file__).resolve())]

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
            self._running[key] = RunningAttempt(supervisor=msg["pid"], adopted=False)
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

    async def _settle_inflight(self, key: Key, waiter: LaunchWaiter) -> None:
        """A launch the dead launcher never answered: did its supervisor start?"""
        found = await self._wait_for_record(key, PID_FILE_WAIT)
        if found is None and not self._withdraw(key):
            # A supervisor claimed the attempt before we could withdraw it:
            # it is starting the job, and will say so.
            found = await self._wait_for_record(key, CLAIMED_WAIT)
        started_at = found.get("started_at") if found is not None else None
        if isinstance(started_at, (int, float)):
            self._running[key] = RunningAttempt(supervisor=None, adopted=True)
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
        outcome: Outcome | None = status_from(key, status) if status is not None else None
        if outcome is None:
            self._kill_orphan(pid)
            outcome = JobLost(job=key[0], attempt=key[1], reason=why_lost)
        self._send_exit.send_nowait(outcome)

    @staticmethod
    def _kill_orphan(info: dict | None) -> None:
        if pidinfo_current(info) and proc_alive(info.get("job_pid"), info.get("job_start")):
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
            if pidinfo_current(info):
                await self._wait_process_end(info.get("supervisor"), info.get("supervisor_start"))
        finally:
            run = self._done(key)
        if run is not None:
            self._collect(key, "the supervisor ended without recording an outcome")

    def _done(self, key: Key) -> RunningAttempt | None:
        run = self._running.pop(key, None)
        if run is not None and run.escalation is not None:
            run.escalation.cancel()
        return run

    @staticmethod
    async def _wait_process_end(pid: object, start: object) -> None:
        if not proc_alive(pid, start):
            return
        assert isinstance(pid, int)
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            fd = None
        if fd is None:
            while proc_alive(pid, start):
                await trio.sleep(ADOPT_POLL_INTERVAL)
            return
        try:
            if not proc_alive(pid, start):  # the pid was reused between the check and the open
                return
            await trio.lowlevel.wait_readable(fd)
        finally:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
