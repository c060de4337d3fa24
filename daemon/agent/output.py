"""The agent's side of job output: custom paths, serving reads, retention.

* ``--output`` / ``--error``: the runner asks ``custom_outputs`` where the
  job's streams go and notes them next to the attempt's other files in
  ``<job>.<attempt>.out`` (JSON), so that a read long after the agent
  forgot the attempt still finds them.
* ``output_read`` (``reckon logs``): one chunk of at most the asked size,
  read at an offset on a worker thread; the whole file is never in memory.
* ``--keep-output DAYS``: a sweep (at start, then every ``RETENTION_SWEEP``
  seconds) deletes the output the model says may go (``model.output.expired_output``)
  in the agent's own ``jobs/`` directory.  It leaves ``<job>.<attempt>.expired``
  behind so that a later read says "deleted by retention" rather than
  "missing", and keeps ``.stdout`` as an empty file: it is the claim that the
  attempt was launched (daemon/agent/runner.py).  Files a job's ``--output``
  put elsewhere belong to the user and are never deleted.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import trio

from reckon.model import messages as M
from reckon.model.jobs import JobSpec
from reckon.model.output import OutputOnDisk, OutputStatus, OutputStream, expired_output, output_path

from reckon.daemon.agent.attempts import check_key

log = logging.getLogger("reckon.agent")

SIDECAR, EXPIRED = ".out", ".expired"
RETENTION_SWEEP = 3600.0  # seconds between retention sweeps
_STREAM_SUFFIX = {OutputStream.STDOUT: ".stdout", OutputStream.STDERR: ".stderr"}


def custom_outputs(spec: JobSpec, job: str, attempt: int, *, user: str = "", host: str = "") -> dict[str, str]:
    """The launcher request's ``out`` / ``err`` absolute paths for a spec with --output / --error ({} if none).

    Relative patterns are relative to the job's cwd, or to the agent's working
    directory (where the job starts) when it has none.  ``user`` and ``host``: what %u and %N
    stand for (the job's user, the agent's short host name)."""
    paths: dict[str, str] = {}
    for key, pattern in (("out", spec.output), ("err", spec.error)):
        if pattern is not None:
            paths[key] = output_path(pattern, job=job, attempt=attempt, cwd=spec.cwd, base_dir=os.getcwd(),
                                     array=spec.array_id, index=spec.array_index, name=spec.name, user=user,
                                     host=host)
    return paths


def note_custom_outputs(base: str, paths: dict[str, str], uid: int) -> None:
    """Record where the attempt's output goes (before its launch), for later reads, and the uid
    that makes those files (the job's owner, else the agent's own): a read serves only a regular
    file of that uid, as the path is the user's to change after the job (a symbolic link to
    /etc/shadow, read by a root agent, was served to them)."""
    with open(base + SIDECAR, "w") as f:
        json.dump({"stdout": paths.get("out"), "stderr": paths.get("err"), "uid": uid}, f)


class OutputFiles:
    """Reads and retention over one agent's ``jobs/`` directory."""

    def __init__(self, jobs_dir: Path, *, held: Callable[[], Iterable[tuple[str, int]]],
                 keep_days: float | None, clock: Callable[[], float] = time.time) -> None:
        self.jobs_dir = Path(jobs_dir)
        self._held = held  # the attempts the model still has a record or outbox entry of
        self.keep_days = keep_days
        self._clock = clock

    # ---- reads ---------------------------------------------------------------------

    def where(self, job: str, attempt: int, stream: OutputStream) -> tuple[str, bool]:
        """(path, is_default) of an attempt's stream."""
        path, default, _ = self._where(job, attempt, stream)
        return path, default

    def _where(self, job: str, attempt: int, stream: OutputStream) -> tuple[str, bool, int | None]:
        """(path, is_default, the uid a --output file must have: None if not noted)."""
        base = f"{self.jobs_dir}/{job}.{attempt}"
        try:
            with open(base + SIDECAR) as f:
                sidecar = json.load(f)
            noted, uid = sidecar.get(stream.value), sidecar.get("uid")
        except (OSError, ValueError, AttributeError):
            noted = uid = None
        if isinstance(noted, str):
            return noted, False, uid if isinstance(uid, int) and not isinstance(uid, bool) else None
        legacy = self.jobs_dir / f"{job}.{attempt}"
        if legacy.is_dir():
            return str(legacy / stream.value), True, None
        return base + _STREAM_SUFFIX[stream], True, None

    def read(self, msg: M.OutputRead) -> M.OutputChunk:
        """Answer one read (blocking: run it on a thread)."""
        try:
            check_key(msg.job, msg.attempt)
        except ValueError as exc:  # never a path outside jobs/
            return M.OutputChunk(request=msg.request, status=OutputStatus.UNKNOWN, reason=str(exc))
        base = f"{self.jobs_dir}/{msg.job}.{msg.attempt}"
        path, default, uid = self._where(msg.job, msg.attempt, msg.stream)
        if default and os.path.exists(base + EXPIRED):
            return M.OutputChunk(request=msg.request, status=OutputStatus.EXPIRED, path=path,
                                 reason=f"the output of job {msg.job} attempt {msg.attempt} was deleted by this "
                                        f"agent's output retention (--keep-output {self.keep_days:g} days)"
                                 if self.keep_days is not None else
                                        f"the output of job {msg.job} attempt {msg.attempt} was deleted by this "
                                        f"agent's output retention")
        launched = os.path.exists(base + ".stdout") or os.path.exists(base + SIDECAR) or \
            (self.jobs_dir / f"{msg.job}.{msg.attempt}").is_dir()
        if not launched:
            return M.OutputChunk(request=msg.request, status=OutputStatus.UNKNOWN,
                                 reason=f"this agent never ran job {msg.job} attempt {msg.attempt}")
        try:
            # A --output path is the user's: never block on a FIFO, never take a terminal; noted
            # without its uid (before the check existed), never follow a link in its place.
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            with open(os.open(path, flags | (os.O_NOFOLLOW if uid is None and not default else 0)), "rb") as f:
                st = os.fstat(f.fileno())
                if not default and not stat.S_ISREG(st.st_mode):
                    return M.OutputChunk(request=msg.request, status=OutputStatus.FAILED, path=path,
                                         reason=f"not reading {path}: it is no longer a regular file")
                if uid is not None and st.st_uid != uid:
                    return M.OutputChunk(request=msg.request, status=OutputStatus.FAILED, path=path,
                                         reason=f"not reading {path}: it belongs to uid {st.st_uid}, not to the "
                                                f"job's uid {uid} (replaced since the job wrote it?)")
                size = st.st_size
                f.seek(msg.offset)
                data = f.read(msg.limit)
        except FileNotFoundError:
            return M.OutputChunk(request=msg.request, status=OutputStatus.MISSING, path=path,
                                 reason=f"the {msg.stream.value} file {path} of job {msg.job} attempt {msg.attempt} "
                                        f"is gone (deleted, not by retention)")
        except OSError as exc:
            return M.OutputChunk(request=msg.request, status=OutputStatus.FAILED, path=path,
                                 reason=f"cannot read {path}: {exc.strerror or exc}")
        return M.OutputChunk(request=msg.request, status=OutputStatus.DATA, data=data, size=size, path=path)

    async def answer(self, msg: M.OutputRead) -> M.OutputChunk:
        return await trio.to_thread.run_sync(self.read, msg)

    # ---- retention -----------------------------------------------------------------

    def scan(self, held: set[tuple[str, int]]) -> list[OutputOnDisk]:
        """Every flat-layout attempt with output files still there (blocking)."""
        newest: dict[tuple[str, int], float] = {}
        try:
            entries = list(os.scandir(self.jobs_dir))
        except FileNotFoundError:
            return []
        names = {e.name for e in entries}
        for entry in entries:
            stem, dot, suffix = entry.name.rpartition(".")
            if not dot or f".{suffix}" not in (".stdout", ".stderr"):
                continue
            job, _, attempt = stem.rpartition(".")
            if not job or not attempt.isdigit() or f"{stem}{EXPIRED}" in names:
                continue
            try:
                mtime = entry.stat().st_mtime
            except FileNotFoundError:
                continue
            key = (job, int(attempt))
            newest[key] = max(newest.get(key, 0.0), mtime)
        return [OutputOnDisk(job=job, attempt=attempt, newest_mtime=mtime, held=(job, attempt) in held,
                             has_run_record=f"{job}.{attempt}.run" in names)
                for (job, attempt), mtime in newest.items()]

    def delete(self, keys: list[tuple[str, int]]) -> int:
        """Delete these attempts' output in ``jobs/`` (blocking); how many were deleted."""
        done = 0
        for job, attempt in keys:
            base = f"{self.jobs_dir}/{job}.{attempt}"
            try:
                # The marker first: a crash halfway still answers "deleted by retention".
                with open(base + EXPIRED, "w") as f:
                    f.write(f"{self._clock():.0f}\n")
                if os.path.exists(base + ".stdout"):
                    os.truncate(base + ".stdout", 0)  # kept, empty: the claim that it was launched
                try:
                    os.unlink(base + ".stderr")
                except FileNotFoundError:
                    pass
                done += 1
            except OSError as exc:
                log.warning("output retention: cannot delete the output of job %s attempt %s: %s", job, attempt,
                            exc.strerror or exc)
        return done

    async def sweep(self) -> int:
        held = set(self._held())  # read on the trio thread: the model is not thread-safe
        found = await trio.to_thread.run_sync(self.scan, held)
        victims = expired_output(found, now=self._clock(), keep_days=self.keep_days)
        if not victims:
            return 0
        done = await trio.to_thread.run_sync(self.delete, victims)
        log.info("output retention: deleted the output of %d finished attempt(s) older than %g day(s)",
                 done, self.keep_days)
        return done

    async def retention_loop(self) -> None:
        if self.keep_days is None:
            return
        while True:
            await self.sweep()
            await trio.sleep(RETENTION_SWEEP)


def held_keys(agent: Any) -> Callable[[], list[tuple[str, int]]]:
    """What the agent's model holds: records (running, unacknowledged, recent) and outbox entries."""
    return lambda: [*agent.records.keys(), *agent.outbox.keys()]
