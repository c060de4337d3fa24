"""``srun -l``/``--label``: the task's number before each line of its output, as Slurm's ``0: ``.

reckon runs one task, task 0, so the prefix is always ``0: `` (Slurm pads the number to the width
of the step's last task id: one digit here).  Inside a job (``run_labelled``) srun stays as the
parent of the command, reads its stdout and stderr from pipes and writes them, prefixed, to its
own (already pointed at ``--output``/``--error``); it exits as the command did.  The job's signals
reach the command directly (reckon signals every process of a job but its top one, srun and the
command alike), so the parent ignores them rather than forward a second copy, and ends when the
command's output ends and the command has exited.  Light: os, select, _signal only.
"""

from __future__ import annotations

import os

PREFIX = b"0: "
# What reckon's job signals (scancel --signal, --signal=SIG@SECS, a cancel's TERM) would deliver
# twice if srun also forwarded them: srun ignores them and the command gets its own copy.
_IGNORED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE")


class Labeller:
    """A binary stream that puts ``0: `` at the start of each line written through it."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.at_start = True

    def label(self, data: bytes) -> bytes:
        parts = data.split(b"\n")
        out: list[bytes] = []
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last and not part:
                break  # the chunk ended a line: the next one starts with the prefix
            if i or self.at_start:
                out.append(PREFIX)
            out.append(part if last else part + b"\n")
        if data:
            self.at_start = data.endswith(b"\n")
        return b"".join(out)

    def write(self, data: bytes) -> int:
        self.stream.write(self.label(data))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except BrokenPipeError:
            return  # nobody reads it any more: the rest is dropped, as the command's own write would fail
        data = data[n:]


def run_labelled(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` as a child, its stdout and stderr labelled onto ours; its exit status."""
    import select

    import _signal as signal  # the module without signal.py's enum import

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the command: its output into the pipes, its stdin ours
        try:
            from reckon.daemon.slurm.common import default_signals

            default_signals()
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            os.execvpe(command[0], command, env)
        except OSError as exc:
            os.write(2, f"srun: error: execve(): {command[0]}: {exc.strerror or exc}\n".encode())
        os._exit(2)
    os.close(out_w)
    os.close(err_w)
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    streams = {out_r: (1, Labeller(None)), err_r: (2, Labeller(None))}
    while streams:
        try:
            ready, _, _ = select.select(list(streams), [], [])
        except InterruptedError:
            continue
        for fd in ready:
            data = os.read(fd, 65536)
            target, labeller = streams[fd]
            if not data:
                os.close(fd)
                del streams[fd]
                continue
            _write_all(target, labeller.label(data))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # die of the same signal, as the command did (what exec would show)
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: their default is not changeable
            pass
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)
