"""`sbatch`: Slurm's batch submit, on reckon (issue #21).

``sbatch [OPTIONS] [SCRIPT [ARG ...]]``, ``sbatch --wrap CMD``, or the script on stdin.  The
script's ``#SBATCH`` lines are read as Slurm reads them (values.script_directives) and the
command line's options override them.  The job gets the script's text (``script``: the agent
runs it from a private file), ``slurm_env`` (the agent sets Slurm's ``SLURM_*`` variables) and
``command[0]`` = the script's name.  Prints ``Submitted batch job N`` (``--parsable``: ``N``).

Every option Slurm has is in options.SBATCH: handled here, warned in one line, or refused in
one line (nothing submitted).  Light: see common.py.
"""

from __future__ import annotations

import os
import sys
import time

from reckon.daemon.slurm import argv as getopt
from reckon.daemon.slurm import options as table
from reckon.daemon.slurm import values
from reckon.daemon.slurm.common import SlurmCommandError, bad_option, connect, invalid, query, run, warn

PROG = "sbatch"
MAX_SCRIPT = 4 << 20  # bytes (model.jobs.MAX_SCRIPT, Slurm's default max_script_size)
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
LABELS = {"account": "account", "partition": "partition", "qos": "qos", "comment": "comment", "wckey": "wckey",
          "constraint": "constraint", "reservation": "reservation", "mail-user": "mail_user"}
MAX_LABEL = 1024
WAIT_POLL = (0.2, 2.0)  # seconds between polls of -W/--wait: from the first, growing to the second
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")

_OPTIONS = table.by_name(table.SBATCH)
_GETOPT = table.table(table.SBATCH)
# The options spec_of reads; a test checks it against the table's HANDLED entries.
HANDLED = frozenset({
    *LABELS, "array", "begin", "chdir", "cluster", "clusters", "cpus-per-gpu", "cpus-per-task", "dependency", "error", "export", "gpus",
    "gpus-per-node", "gpus-per-task", "gres", "help", "hold", "ignore-pbs", "job-name", "kill-on-invalid-dep",
    "licenses", "mem", "mem-per-cpu", "mem-per-gpu", "mincpus", "nice", "nodes", "ntasks", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode", "output", "parsable", "quiet",
    "requeue", "signal", "time", "usage", "verbose", "version", "wait", "wrap",
})


def parse_args(words: list[str], *, permute: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """The options of a command line (or of a script's ``#SBATCH`` words) and its operands: the
    last of each option wins (refuse_and_warn judges them once the script's are merged in)."""
    try:
        parsed, operands = getopt.parse(words, _GETOPT, permute=permute)
    except getopt.OptionError as exc:
        raise bad_option(PROG, str(exc)) from None
    return merge(parsed), operands


# Options that undo each other: the later one given wins, the other is dropped.
_OPPOSITES = {"requeue": "no-requeue", "no-requeue": "requeue"}


def merge(*parsed: list[tuple[str, str | None]]) -> dict[str, str | None]:
    """Options in the order given (the script's, then the command line's): the last of each wins."""
    opts: dict[str, str | None] = {}
    for items in parsed:
        for name, value in items:
            opts.pop(_OPPOSITES.get(name, ""), None)
            opts.pop(name, None)
            opts[name] = value
    return opts


def refuse_and_warn(opts: dict[str, str | None], prog: str = PROG,
                    known: dict[str, tuple] = _OPTIONS, origin: dict[str, str] | None = None) -> None:
    """One line per warned option (on stderr); the first refused one ends the command.  ``origin``:
    the input variable an option's value came from (``SBATCH_NO_KILL``), named in the line."""
    def named(option: tuple) -> str:
        var = (origin or {}).get(option[0])
        return f"{var} ({table.spelled(option)})" if var else table.spelled(option)

    for name in opts:
        option = known[name]
        if option[3] == table.REFUSED:
            raise SlurmCommandError(f"{named(option)} is not supported by reckon ({option[4]})")
    for name in opts:
        option = known[name]
        if option[3] == table.WARNED:
            warn(prog, f"{named(option)} is ignored by reckon ({option[4]})")


def with_environment(script: dict[str, str | None], cmdline: dict[str, str | None], environ,
                     names: dict[str, str], known: dict[str, tuple]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The options in Slurm's precedence: the command line's over the input variables' over the
    script's; and the variable each option that a variable set (and the command line did not) came from."""
    from_env, origin = table.env_options(environ, names, known)
    opts = merge(list(script.items()), from_env, list(cmdline.items()))
    return opts, {name: var for name, var in origin.items() if name not in cmdline and name in opts}


def read_script(operands: list[str], opts: dict[str, str | None]) -> tuple[str, str, list[str]]:
    """(script text, display name, its arguments): from --wrap, the file named, or stdin."""
    wrap = opts.get("wrap")
    if wrap is not None:
        if operands:
            raise SlurmCommandError("Script arguments not permitted with --wrap option")
        return WRAP_HEADER + wrap + "\n", "sbatch", []
    if operands:
        name = operands[0]
        try:
            with open(name, "rb") as f:
                data = f.read(MAX_SCRIPT + 1)
        except OSError as exc:
            raise SlurmCommandError(f"Unable to open file {name}: {exc.strerror or exc}") from None
    else:
        name = "sbatch"
        data = sys.stdin.buffer.read(MAX_SCRIPT + 1)
    if not data:
        raise SlurmCommandError("Batch script is empty!")
    if len(data) > MAX_SCRIPT:
        raise SlurmCommandError(f"Batch script is too large (over {MAX_SCRIPT} bytes)")
    if b"\0" in data:
        raise SlurmCommandError("The Slurm controller does not allow scripts that contain a NULL character!")
    if b"\r\n" in data:
        raise SlurmCommandError("Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
                                "breaks (\\n).")
    if not data.startswith(b"#!"):
        raise SlurmCommandError("This does not look like a batch script.  The first line must start with #! "
                                "followed by the path to an interpreter.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SlurmCommandError(f"{name} is not UTF-8 text (byte {exc.start}): reckon sends scripts as text") from None
    return text, name, operands[1:]


def _count(opts: dict[str, str | None], name: str) -> int | None:
    value = opts.get(name)
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise invalid(f"Invalid --{name} specification: {value!r}")
    return int(value)


def spec_of(opts: dict[str, str | None], script: str | None, command: list[str], *, environ: dict[str, str],
            cwd: str, array: bool, default_name: str, prog: str = PROG) -> dict:
    """The job spec (the wire's dict, JobSpec.to_dict's shape) of the merged options."""
    for name in ("cluster", "clusters"):
        if opts.get(name) is not None:
            values.check_clusters(opts[name] or "", f"--{name}")
    if opts.get("nodes") is not None:
        values.parse_nodes(opts["nodes"] or "")
    values.check_one_task(opts)
    chdir = opts.get("chdir")
    if chdir is not None:
        cwd = os.path.normpath(os.path.join(cwd, chdir))
    spec: dict = {"name": opts.get("job-name") or default_name, "command": command, "cwd": cwd,
                  "env": values.export_env(opts.get("export"), environ), "slots": 1, "slurm_env": True}
    if script is not None:
        spec["script"] = script
    gpus = 0
    gres: dict[str, int] = {}
    if opts.get("gres") is not None:
        gpus, gres = values.parse_gres(opts["gres"] or "")
    for name in ("gpus", "gpus-per-node", "gpus-per-task"):
        if opts.get(name) is not None:
            gpus = values.parse_gpus(opts[name] or "", f"--{name}")
    if opts.get("licenses") is not None:
        for key, n in values.parse_licenses(opts["licenses"] or "").items():
            gres[key] = gres.get(key, 0) + n
    cpus = _count(opts, "cpus-per-task") or 1
    per_gpu = _count(opts, "cpus-per-gpu")
    if per_gpu is not None:
        if not gpus:
            raise SlurmCommandError("--cpus-per-gpu needs GPUs (--gpus, --gres=gpu:N)")
        cpus = per_gpu * gpus
    cpus = max(cpus, _count(opts, "mincpus") or 1)
    spec["slots"] = cpus
    mem = None
    if sum(opts.get(name) is not None for name in ("mem", "mem-per-cpu", "mem-per-gpu")) > 1:
        raise invalid("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    for name, factor in (("mem", 1), ("mem-per-cpu", cpus), ("mem-per-gpu", gpus)):
        if opts.get(name) is not None:
            if name == "mem-per-gpu" and not gpus:
                raise SlurmCommandError("--mem-per-gpu needs GPUs (--gpus, --gres=gpu:N)")
            mem = values.parse_mem(opts[name] or "", f"--{name}") * factor
    if mem == 0:
        warn(prog, "--mem=0 (all of a node's memory) is taken as no --mem by reckon: the controller's "
                   "default memory per CPU if it has one, else the job is held to its agent's memory")
    elif mem is not None:
        spec["mem"] = mem
    if gpus:
        spec["gpus"] = gpus
    if gres:
        spec["gres"] = [[k, n] for k, n in sorted(gres.items())]
    limit = values.parse_time(opts["time"] or "") if opts.get("time") is not None else None
    if limit is not None:
        spec["time_limit"] = limit
    if opts.get("signal") is not None:
        number, before, batch = values.parse_signal(opts["signal"] or "")
        if limit is None:
            warn(prog, f"--signal={opts['signal']} without a time limit (-t) is never sent")
        else:
            spec["warn_signal"] = number
            if before:
                spec["warn_before"] = before
            if batch:
                spec["warn_batch_only"] = True
    if opts.get("dependency"):
        spec.update(values.parse_dependency(opts["dependency"] or ""))
    if opts.get("begin") is not None:  # kept even once past, as Slurm keeps it (EligibleTime)
        spec["begin"] = values.parse_when(opts["begin"] or "", time.time(), future=True)
    kill = (opts.get("kill-on-invalid-dep") or "yes").strip().lower()
    if kill not in ("yes", "no"):
        raise invalid(f"Invalid --kill-on-invalid-dep specification: {kill!r} (yes or no)")
    if kill == "no" and opts.get("kill-on-invalid-dep") is not None:
        warn(prog, "--kill-on-invalid-dep=no: reckon cancels a job whose dependency can never be met")
    mode = opts.get("open-mode")
    if mode is not None:
        mode = values.parse_open_mode(mode)
        spec["open_mode"] = mode
        spec["env"].append(["SLURM_OPEN_MODE", mode[0]])  # as sbatch sets it: srun's steps follow it
    output = opts.get("output")
    error = opts.get("error")
    spec["output"] = values.translate_pattern(output, "--output") if output else (
        "slurm-%A_%I.out" if array else "slurm-%j.out")
    spec["error"] = values.translate_pattern(error, "--error") if error else spec["output"]
    if "nice" in opts:  # issue #22: Slurm's --nice[=N], 100 without a value
        text = (opts["nice"] or "").strip()
        try:
            nice = int(text) if text else 100
        except ValueError:
            raise invalid(f"Invalid --nice value: {text}") from None
        if not -10000 <= nice <= 10000:
            raise invalid(f"Invalid --nice value: {nice} (-10000..10000)")
        if nice:
            spec["nice"] = nice
    labels = {}
    if opts.get("partition"):  # issue #22: the real field (the controller checks it and labels it)
        spec["partition"] = opts["partition"]
    for option, key in LABELS.items():
        if option == "partition":
            continue
        value = opts.get(option)
        if value is not None:
            if len(value) > MAX_LABEL:
                raise SlurmCommandError(f"--{option} is longer than {MAX_LABEL} characters")
            labels[key] = value
    if labels:
        spec["labels"] = [[k, v] for k, v in sorted(labels.items())]
    return spec


def _environ() -> dict[str, str]:
    """The caller's environment that can cross the wire (UTF-8 text, values under 64 KiB)."""
    env = {}
    dropped = []
    for key, value in os.environ.items():
        try:
            key.encode("utf-8")
            value.encode("utf-8")
        except UnicodeEncodeError:
            dropped.append(key)
            continue
        if len(value) >= 1 << 16 or "=" in key or not key:
            dropped.append(key)
            continue
        env[key] = value
    if dropped:
        warn(PROG, f"not exported (not UTF-8 text, or too long): {', '.join(dropped)[:200]}")
    return env


def usage() -> str:
    lines = ["Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]", "",
             "reckon's sbatch: the options below are handled; (w) warned and ignored; (r) refused.", ""]
    for option in table.SBATCH:
        mark = {"H": "   ", "W": "(w)", "R": "(r)"}[option[3]]
        lines.append(f"  {mark} {table.spelled(option):32} {option[4]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The ``sbatch`` command (the launcher's entry): its exit status."""
    return run(_main, argv, PROG)


def _main(argv: list[str]) -> int:
    cmdline, operands = parse_args(argv)
    if "help" in cmdline or "usage" in cmdline:
        sys.stdout.write(usage())
        return 0
    if "version" in cmdline:
        sys.stdout.write("slurm 22.05.0 (reckon)\n")
        return 0
    script, name, args = read_script(operands, cmdline)
    script_opts = {}
    if cmdline.get("wrap") is None:
        script_opts, extra = parse_args(values.script_directives(script))
        if extra:
            raise SlurmCommandError(f"{name}: #SBATCH lines hold options only, not {extra[0]!r}")
    opts, origin = with_environment(script_opts, cmdline, os.environ, table.SBATCH_ENV, _OPTIONS)
    refuse_and_warn(opts, origin=origin)
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise SlurmCommandError("the current directory no longer exists") from None
    default_name = "wrap" if opts.get("wrap") is not None else os.path.basename(name) or name
    array = opts.get("array")
    spec = spec_of(opts, script, [name, *args], environ=_environ(), cwd=cwd, array=array is not None,
                   default_name=default_name)
    spec["env"].append(["SLURM_SUBMIT_HOST", os.uname().nodename])
    client = None
    try:
        client = connect()
        expand_dependencies(client, spec)
        job_id, members = submit(client, spec, array, hold="hold" in opts)
    except Exception as exc:  # unreachable, refused: in Slurm's words, with the controller's reason
        if client is not None:
            client.close()
        _submission_failed(exc)
        raise
    with client:
        if "parsable" in opts:  # ID;CLUSTER when a cluster was named, as Slurm's
            cluster = f";{values.CLUSTER}" if "clusters" in opts or "cluster" in opts else ""
            sys.stdout.write(f"{job_id}{cluster}\n")
        elif "quiet" not in opts:
            sys.stdout.write(f"Submitted batch job {job_id}\n")
        sys.stdout.flush()
        if "wait" in opts:
            return wait(client, members)
    return 0


def _submission_failed(exc: Exception) -> None:
    """Raise ``exc`` (a client error) as Slurm says it: ``Batch job submission failed: REASON``."""
    from reckon.daemon.client_common import ClientError, UsageError

    if isinstance(exc, ClientError):
        from reckon.daemon.slurm.common import QUEUE_ANYWAY_HINT

        text = str(exc).replace(QUEUE_ANYWAY_HINT, "")  # reckon submit's flag: sbatch has none
        raise SlurmCommandError(f"Batch job submission failed: {text}",
                                2 if isinstance(exc, UsageError) else 1) from None


def check_array(text: str) -> str:
    """Slurm's ``--array``: ``N``, ``START-END[:STEP]`` or a list of them, with one ``%MAX`` for the
    whole array (``1-3,7,10-20:5%4``); checked here in Slurm's words, parsed again by the controller."""
    from reckon.daemon.blocking.spec import array_items

    try:
        array_items(text)
    except ValueError as exc:
        raise invalid(f"Invalid job array specification: {text!r} ({exc})") from None
    return text.strip()


def expand_dependencies(client, spec: dict) -> None:
    """Slurm's dependency ids in reckon's: an array's id means every member (reckon's ``after``
    would name its first job alone), ``123_4`` the member's own id.  One ``query`` for all."""
    keys = [k for k in values.DEPENDENCY_KEYS.values() if spec.get(k)]
    if not keys:
        return
    named = sorted({d for k in keys for d in spec[k]})
    found: dict[str, list[str]] = {}
    for job in query(client, ids=named):
        array = job.get("array_id")
        for name in (job["id"], array, f"{array}_{job.get('array_index')}" if array is not None else None):
            if name in named and job["id"] not in found.setdefault(name, []):
                found[name].append(job["id"])
    for key in keys:
        ids: list[str] = []
        for dep in spec[key]:
            for job in found.get(dep) or [dep]:  # unknown: the controller refuses it in one line
                if job not in ids:
                    ids.append(job)
        spec[key] = ids


def submit(client, spec: dict, array: str | None, *, hold: bool) -> tuple[str, list[str]]:
    """Submit one job or an array: (the id Slurm prints, the ids of its jobs)."""
    extra = {"hold": True} if hold else {}
    if array is not None:
        reply = client.call("submit_array", spec=spec, array=check_array(array), **extra)
        ids = reply["jobs"]
        if hold and not _held(client, ids[0]):
            for job in ids:  # a controller before protocol 7 ignores "hold": hold each now
                client.call("hold", job=job)
        return reply.get("array", ids[0]), ids
    job = client.call("submit", spec=spec, **extra)["job"]
    if hold and not job.get("held"):
        client.call("hold", job=job["id"])
    return job["id"], [job["id"]]


def _held(client, job: str) -> bool:
    return bool(client.call("show", job=job)["job"].get("held"))


def exit_status(jobs: list[dict]) -> int:
    """``sbatch -W``'s exit code: the highest of the jobs' (a signal: 128 + it; cancelled unrun: 1)."""
    worst = 0
    for job in jobs:
        if job["state"] == "COMPLETED":
            continue
        if job.get("exit_code") is not None:
            worst = max(worst, job["exit_code"] or 1)
        elif job.get("signal") is not None:
            worst = max(worst, 128 + job["signal"])
        else:
            worst = max(worst, 1)
    return worst


def wait(client, ids: list[str]) -> int:
    """Poll until every job has ended (one connection); its exit code, as ``sbatch -W``."""
    import time

    pause = WAIT_POLL[0]
    done: dict[str, dict] = {}
    while True:
        if len(ids) == 1:
            jobs = [client.call("show", job=ids[0])["job"]]
        else:  # an array: all of its jobs in one query (its id, the first job's, names them all)
            jobs = query(client, ids=[ids[0]])
        done.update((j["id"], j) for j in jobs if j["id"] in ids and j["state"] in TERMINAL)
        if len(done) == len(ids):
            break
        time.sleep(pause)
        pause = min(pause * 1.5, WAIT_POLL[1])
    return exit_status(list(done.values()))


if __name__ == "__main__":
    sys.exit(main())
