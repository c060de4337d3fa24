"""The batch-system parts of `reckon` (issue #10): --array, --time, --retries,
--retry-on-exit, --after on submit; arrays folded in `reckon jobs`; hold,
release and requeue.  Light: no trio, no model (daemon/blocking/spec.py checks what it checks).
"""

from __future__ import annotations

from reckon.daemon.blocking import spec as wire_spec
from reckon.daemon.client_common import UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO


# Linux's signal numbers (not the signal module: it imports enum, and this path stays light).
SIGNALS = {name: number for number, name in enumerate(
    "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP "
    "TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split(), start=1)}
SIGRTMIN, SIGRTMAX = 34, 64


def parse_signal(text: str) -> int:
    """``USR1``, ``SIGUSR1``, ``usr1``, ``10``, ``RTMIN+2`` -> the signal number; a bad one is one line."""
    name = text.strip().upper()
    name = name[3:] if name.startswith("SIG") else name
    if name.isdigit() and 1 <= int(name) <= SIGRTMAX:
        return int(name)
    if name in SIGNALS:
        return SIGNALS[name]
    for base, sign, number in (("RTMIN", "+", SIGRTMIN), ("RTMAX", "-", SIGRTMAX)):
        if name == base or (name.startswith(base + sign) and name[len(base) + 1:].isdigit()):
            offset = int(name[len(base) + 1:] or 0) if name != base else 0
            value = number + offset if sign == "+" else number - offset
            if SIGRTMIN <= value <= SIGRTMAX:
                return value
    raise UsageError(f"unknown signal {text!r}: a name such as USR1 or TERM, or a number 1..{SIGRTMAX}")


def parse_duration(text: str) -> float:
    """``90s``, ``10m``, ``2h``, ``1h30m``, ``1d``, or a bare number of seconds -> seconds (> 0)."""
    from reckon.daemon.durations import parse_seconds

    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise UsageError(f"bad duration {text.strip()!r}: {exc}") from None


def spec_fields(args: argparse.Namespace) -> dict[str, Any]:
    """``daemon.blocking.spec.job_spec``'s keywords of `reckon submit`'s batch options (version 4)."""
    fields: dict[str, Any] = {"retries": args.retries}
    if args.time is not None:
        fields["time_limit"] = parse_duration(args.time)
    if args.retry_on_exit:
        try:
            fields["retry_on_exit"] = tuple(int(c) for c in args.retry_on_exit.split(",") if c.strip())
        except ValueError:
            raise UsageError(f"bad --retry-on-exit {args.retry_on_exit!r}: expected exit codes like 1,75") from None
    if args.after:
        fields["after"] = tuple(j.strip() for j in args.after.split(",") if j.strip())
    if getattr(args, "begin", None) is not None:
        fields["begin"] = parse_begin(args.begin)
    if getattr(args, "singleton", False):
        fields["singleton"] = True
    fields.update(resource_fields(args))
    if getattr(args, "partition", None):  # issue #22: the controller checks the name
        fields["partition"] = args.partition
    nice = getattr(args, "nice", None)
    if nice is not None and nice != 0:  # issue #22: priority -= nice (a negative one: operators only)
        if not -10000 <= nice <= 10000:  # model/priority.py NICE_MAX
            raise UsageError(f"--nice {nice}: give a number in -10000..10000")
        fields["nice"] = nice
    return fields


def parse_begin(text: str) -> float:
    """``--begin``'s time (Slurm's formats, looking ahead: sbatch's) as seconds since the epoch."""
    import time

    from reckon.daemon.slurm.argv import UsageProblem
    from reckon.daemon.slurm.values import parse_when

    try:
        return parse_when(text, time.time(), future=True)
    except UsageProblem as exc:
        raise UsageError(f"bad --begin: {exc}") from None


def resource_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The version 6 keywords of `reckon submit`'s --mem, --gpus, --gres; a bad one is one line."""
    fields: dict[str, Any] = {}
    if getattr(args, "mem", None) is not None:
        try:
            fields["mem"] = wire_spec.parse_size(args.mem)
        except ValueError as exc:
            raise UsageError(f"invalid --mem: {exc}") from None
    if getattr(args, "gpus", 0):
        fields["gpus"] = args.gpus
    if getattr(args, "gres", None):
        try:
            fields["gres"] = [f"{k}:{n}" for k, n in wire_spec.parse_gres(args.gres)]
        except ValueError as exc:
            raise UsageError(f"invalid --gres: {exc}") from None
    return fields


def check_array(text: str) -> None:
    try:
        wire_spec.check_array(text)
    except ValueError as exc:
        raise UsageError(f"invalid --array: {exc}") from None


def fold_arrays(jobs: list[dict]) -> list[dict]:
    """Jobs with each array replaced by one summary row, in submit order of its first job.

    The summary's ``id`` is ``ARRAY_[FIRST-LAST]`` (the array's indices), its
    ``state`` the counts of its jobs' states (``PENDING:3,RUNNING:2``).
    """
    out: list[dict] = []
    arrays: dict[str, list[dict]] = {}
    for job in jobs:
        array = job.get("array_id")
        if array is None:
            out.append(job)
            continue
        if array not in arrays:
            arrays[array] = []
            out.append({"_array": array})
        arrays[array].append(job)
    return [_summary(row["_array"], arrays[row["_array"]]) if "_array" in row else row for row in out]


def _summary(array: str, members: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for job in members:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    indices = [job["array_index"] for job in members]
    return {
        "id": f"{array}_[{min(indices)}-{max(indices)}]", "name": members[0]["name"], "user": members[0].get("user"),
        "partition": members[0].get("partition"),
        "partition": members[0].get("partition"),
        "state": ",".join(f"{state}:{n}" for state, n in counts.items()),
        "agent": None, "attempt": "-", "exit_code": None, "signal": None,
        "finished_at": max((j["finished_at"] for j in members if j["finished_at"] is not None), default=None),
    }


def write_job_state(out: TextIO, job: dict) -> None:
    """``ID STATE`` and what is special about it: the line of cancel, hold, release, requeue."""
    notes = []
    if job["state"] == "RUNNING" and job.get("cancel_requested"):
        notes.append("cancel requested")
    if job.get("held") and job["state"] == "PENDING":  # a cancelled job keeps its hold: not worth a note
        notes.append("held")
    if job.get("reason"):
        notes.append(job["reason"])
    out.write(f"{job['id']} {job['state']}{''.join(f' ({n})' for n in notes)}\n")
