"""The option tables of sbatch and srun: every option Slurm 22.05 has, and what reckon does with it.

Each entry is ``(long, short, arg, action, why)``: ``arg`` as in argv.py (0 flag, 1 required,
2 optional); ``action`` one of

- ``H`` handled: it means what Slurm says (sbatch.py / srun.py implement it; a test checks that
  each one has its code, ``tests/slurm/test_sbatch_options.py``);
- ``W`` warned: the job runs, without it, after one line ``sbatch: warning: --X is ignored by
  reckon (why)``: options that tune placement or accounting reckon does not do, where running
  anyway is what a workflow wants;
- ``R`` refused: one line ``sbatch: error: --X is not supported by reckon (why)``, exit 1,
  nothing submitted: options whose meaning reckon cannot honour, where running anyway would be
  silently different (other nodes, other users, a start time).

An option reckon does not know at all is refused by argv.py as getopt refuses it.
"""

from __future__ import annotations

HANDLED, WARNED, REFUSED = "H", "W", "R"

_PLACE = "reckon places jobs by CPUs, memory and GPUs alone"
_ONE_NODE = "reckon runs single-node jobs"
_TUNE = "reckon does not tune CPU or memory binding"
_ACCT = "reckon does no such accounting"
_NO_MAIL = "reckon sends no mail"

# Options sbatch and srun share, with the same meaning.
_COMMON: list[tuple[str, str | None, int, str, str]] = [
    ("account", "A", 1, HANDLED, "kept as the label account"),
    ("acctg-freq", None, 1, WARNED, _ACCT),
    ("begin", "b", 1, HANDLED, "not started before this time (Slurm's time formats)"),
    ("bb", None, 1, REFUSED, "reckon has no burst buffers"),
    ("bbf", None, 1, REFUSED, "reckon has no burst buffers"),
    ("chdir", "D", 1, HANDLED, "the job's working directory"),
    ("cluster-constraint", None, 1, REFUSED, "reckon is one cluster"),
    ("cluster", None, 1, HANDLED, "reckon's own only: all or reckon"),
    ("clusters", "M", 1, HANDLED, "reckon's own only: all or reckon"),
    ("comment", None, 1, HANDLED, "kept as the label comment"),
    ("constraint", "C", 1, HANDLED, "kept as the label constraint (not matched against nodes)"),
    ("container", None, 1, REFUSED, "reckon runs no OCI containers"),
    ("contiguous", None, 0, WARNED, _ONE_NODE),
    ("core-spec", "S", 1, WARNED, _TUNE),
    ("cores-per-socket", None, 1, WARNED, _PLACE),
    ("cpu-freq", None, 1, WARNED, _TUNE),
    ("cpus-per-gpu", None, 1, HANDLED, "CPUs = this times the GPUs asked"),
    ("cpus-per-task", "c", 1, HANDLED, "the job's CPUs"),
    ("deadline", None, 1, REFUSED, "reckon has no deadlines"),
    ("delay-boot", None, 1, WARNED, "reckon reboots no nodes"),
    ("dependency", "d", 1, HANDLED, "afterok, afterany, afternotok, singleton"),
    ("distribution", "m", 1, WARNED, _ONE_NODE),
    ("error", "e", 1, HANDLED, "the job's stderr file pattern"),
    ("exclude", "x", 1, WARNED, "reckon does not pick nodes by name: the job may run on any"),
    ("exclusive", None, 2, WARNED, "reckon shares a node by CPUs, memory and GPUs"),
    ("export", None, 1, HANDLED, "ALL, NONE or a list of variables"),
    ("gid", None, 1, REFUSED, "a job runs as the caller"),
    ("gpu-bind", None, 1, WARNED, _TUNE),
    ("gpu-freq", None, 1, WARNED, _TUNE),
    ("gpus", "G", 1, HANDLED, "the job's GPUs"),
    ("gpus-per-node", None, 1, HANDLED, "the job's GPUs (one node)"),
    ("gpus-per-socket", None, 1, REFUSED, _PLACE),
    ("gpus-per-task", None, 1, HANDLED, "the job's GPUs (one task)"),
    ("gres", None, 1, HANDLED, "gpu[:type]:N as GPUs, others as generic resources"),
    ("gres-flags", None, 1, WARNED, _PLACE),
    ("help", "h", 0, HANDLED, "prints the options"),
    ("hint", None, 1, WARNED, _TUNE),
    ("hold", "H", 0, HANDLED, "the job starts held"),
    ("job-name", "J", 1, HANDLED, "the job's name"),
    ("licenses", "L", 1, HANDLED, "as generic resources NAME:N (agents declare them)"),
    ("mail-type", None, 1, WARNED, _NO_MAIL),
    ("mail-user", None, 1, HANDLED, "kept as the label mail_user (reckon sends no mail)"),
    ("mcs-label", None, 1, WARNED, "reckon has no MCS labels"),
    ("mem", None, 1, HANDLED, "the job's memory (MiB default unit)"),
    ("mem-bind", None, 1, WARNED, _TUNE),
    ("mem-per-cpu", None, 1, HANDLED, "memory = this times the CPUs"),
    ("mem-per-gpu", None, 1, HANDLED, "memory = this times the GPUs"),
    ("mincpus", None, 1, HANDLED, "at least this many CPUs"),
    ("network", None, 1, WARNED, "reckon manages no network resources"),
    ("nice", None, 2, HANDLED, "the job's nice (100 without a value; a negative one: operators)"),
    ("no-kill", "k", 2, WARNED, _ONE_NODE),
    ("nodefile", "F", 1, REFUSED, "reckon does not pick nodes by name"),
    ("nodelist", "w", 1, REFUSED, "reckon does not pick nodes by name"),
    ("nodes", "N", 1, HANDLED, "1 only: " + _ONE_NODE),
    ("ntasks", "n", 1, HANDLED, "1 only: reckon runs one task per job"),
    ("ntasks-per-core", None, 1, HANDLED, "1 only"),
    ("ntasks-per-gpu", None, 1, HANDLED, "1 only"),
    ("ntasks-per-node", None, 1, HANDLED, "1 only"),
    ("ntasks-per-socket", None, 1, HANDLED, "1 only"),
    ("open-mode", None, 1, HANDLED, "append or truncate the output files"),
    ("output", "o", 1, HANDLED, "the job's stdout file pattern"),
    ("overcommit", "O", 0, WARNED, _PLACE),
    ("oversubscribe", "s", 0, WARNED, _PLACE),
    ("partition", "p", 1, HANDLED, "the partition (reckon partition list)"),
    ("power", None, 1, WARNED, "reckon manages no power"),
    ("prefer", None, 1, WARNED, _PLACE),
    ("priority", None, 1, WARNED, "reckon has no priorities yet"),
    ("profile", None, 1, WARNED, _ACCT),
    ("propagate", None, 2, WARNED, "reckon propagates no resource limits"),
    ("qos", "q", 1, HANDLED, "kept as the label qos"),
    ("quiet", "Q", 0, HANDLED, "no informational messages"),
    ("reboot", None, 0, WARNED, "reckon reboots no nodes"),
    ("reservation", None, 1, HANDLED, "kept as the label reservation (reckon reserves nothing)"),
    ("signal", None, 1, HANDLED, "[B:]SIG[@SECS] before the time limit"),
    ("sockets-per-node", None, 1, WARNED, _PLACE),
    ("spread-job", None, 0, WARNED, _ONE_NODE),
    ("switches", None, 1, WARNED, _ONE_NODE),
    ("thread-spec", None, 1, WARNED, _TUNE),
    ("threads-per-core", None, 1, WARNED, _TUNE),
    ("time", "t", 1, HANDLED, "the time limit, in Slurm's formats"),
    ("time-min", None, 1, WARNED, "reckon does not shrink time limits"),
    ("tmp", None, 1, WARNED, "reckon does not schedule disk space"),
    ("tres-per-task", None, 1, REFUSED, _PLACE),
    ("uid", None, 1, REFUSED, "a job runs as the caller"),
    ("usage", None, 0, HANDLED, "prints the options"),
    ("use-min-nodes", None, 0, WARNED, _ONE_NODE),
    ("verbose", "v", 0, HANDLED, "accepted (no extra output)"),
    ("version", "V", 0, HANDLED, "prints the version"),
    ("wckey", None, 1, HANDLED, "kept as the label wckey"),
]

SBATCH: list[tuple[str, str | None, int, str, str]] = sorted(_COMMON + [
    ("array", "a", 1, HANDLED, "N, START-END[:STEP] or a list of them; %MAX for the whole array"),
    ("batch", None, 1, WARNED, _PLACE),
    ("export-file", None, 1, REFUSED, "give the variables with --export"),
    ("get-user-env", None, 2, WARNED, "the job gets the caller's environment (--export)"),
    ("ignore-pbs", None, 0, HANDLED, "accepted (#PBS lines are never read)"),
    ("input", "i", 1, REFUSED, "a batch job's stdin is /dev/null"),
    ("kill-on-invalid-dep", None, 1, HANDLED, "yes: reckon cancels a job whose dependency cannot be met"),
    ("no-requeue", None, 0, WARNED, "a job lost with its node runs again; each attempt is recorded"),
    ("parsable", None, 0, HANDLED, "prints ID (or ID;cluster)"),
    ("requeue", None, 0, HANDLED, "a lost job runs again (reckon's default)"),
    ("test-only", None, 0, REFUSED, "reckon does not estimate start times"),
    ("wait", "W", 0, HANDLED, "waits for the job to end; its exit code"),
    ("wait-all-nodes", None, 1, WARNED, _ONE_NODE),
    ("wrap", None, 1, HANDLED, "the command, run by sh"),
])

SRUN: list[tuple[str, str | None, int, str, str]] = sorted(
    [o for o in _COMMON if o[0] not in ("hold",)] + [
        ("cpu-bind", None, 1, WARNED, _TUNE),
        ("disable-status", "X", 0, HANDLED, "accepted (Ctrl-C cancels the job)"),
        ("epilog", None, 1, WARNED, "reckon runs no step epilogs"),
        ("exact", None, 0, HANDLED, "accepted (one task)"),
        ("hold", "H", 0, REFUSED, "srun waits for its job: a held one would never start"),
        ("immediate", "I", 2, REFUSED, "reckon does not give up on a pending job"),
        ("input", "i", 1, HANDLED, "the task's stdin: all, none, 0 or a file (in a job)"),
        ("jobid", None, 1, REFUSED, "srun runs in its own job (SLURM_JOB_ID) or submits one"),
        ("kill-on-bad-exit", "K", 2, HANDLED, "accepted (one task)"),
        ("label", "l", 0, HANDLED, "each line starts with the task number (0: )"),
        ("mpi", None, 1, WARNED, "reckon runs one task: no MPI wire-up"),
        ("multi-prog", None, 0, REFUSED, "reckon runs one task"),
        ("no-allocate", "Z", 0, REFUSED, "srun runs in a job"),
        ("overlap", None, 0, HANDLED, "accepted (steps run in the job's allocation)"),
        ("prolog", None, 1, WARNED, "reckon runs no step prologs"),
        ("pty", None, 0, REFUSED, "reckon's jobs have no terminal"),
        ("relative", "r", 1, REFUSED, _ONE_NODE),
        ("task-epilog", None, 1, WARNED, "reckon runs no task epilogs"),
        ("task-prolog", None, 1, WARNED, "reckon runs no task prologs"),
        ("threads", "T", 1, WARNED, "srun's own threads"),
        ("unbuffered", "u", 0, HANDLED, "the task writes straight to the output"),
        ("wait", "W", 1, WARNED, "one task: nothing to wait for after the first ends"),
        ("whole", None, 0, HANDLED, "accepted"),
    ])


def table(options: list[tuple[str, str | None, int, str, str]]) -> list[tuple[str, str | None, int]]:
    """What argv.parse needs of a table."""
    return [(o[0], o[1], o[2]) for o in options]


def by_name(options: list[tuple[str, str | None, int, str, str]]) -> dict[str, tuple[str, str | None, int, str, str]]:
    return {o[0]: o for o in options}


def spelled(option: tuple[str, str | None, int, str, str]) -> str:
    """``-J/--job-name`` or ``--wckey``: how messages name an option."""
    return f"-{option[1]}/--{option[0]}" if option[1] else f"--{option[0]}"


# Input environment variables (Slurm 22.05's src/sbatch/opt.c env_vars[] and sbatch.1 "INPUT
# ENVIRONMENT VARIABLES"): each sets the option it names, under the command line and over the
# script's #SBATCH lines; the option's action above applies (a message names the variable).
SBATCH_ENV: dict[str, str] = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ACCTG_FREQ": "acctg-freq", "SBATCH_ARRAY_INX": "array",
    "SBATCH_BATCH": "batch", "SBATCH_BURST_BUFFER": "bb", "SBATCH_CLUSTER_CONSTRAINT": "cluster-constraint",
    "SBATCH_CLUSTERS": "clusters", "SLURM_CLUSTERS": "clusters", "SBATCH_CONTAINER": "container",
    "SBATCH_CONSTRAINT": "constraint", "SBATCH_CORE_SPEC": "core-spec", "SBATCH_CPU_FREQ_REQ": "cpu-freq",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu", "SBATCH_DEBUG": "verbose", "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution", "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_EXPORT": "export",
    "SBATCH_GET_USER_ENV": "get-user-env", "SBATCH_GRES": "gres", "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_GPUS": "gpus", "SBATCH_GPU_BIND": "gpu-bind", "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node", "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task", "SLURM_HINT": "hint", "SBATCH_HINT": "hint",
    "SBATCH_IGNORE_PBS": "ignore-pbs", "SBATCH_JOB_NAME": "job-name", "SBATCH_MEM_BIND": "mem-bind",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu", "SBATCH_MEM_PER_GPU": "mem-per-gpu", "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NETWORK": "network", "SBATCH_NO_KILL": "no-kill", "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode", "SBATCH_OVERCOMMIT": "overcommit", "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power", "SBATCH_PROFILE": "profile", "SBATCH_QOS": "qos", "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue", "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job", "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core", "SBATCH_TIMELIMIT": "time",
    "SBATCH_USE_MIN_NODES": "use-min-nodes", "SBATCH_WAIT": "wait", "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
    "SBATCH_WAIT4SWITCH": "switches", "SBATCH_WCKEY": "wckey", "SBATCH_ERROR": "error", "SBATCH_INPUT": "input",
    "SBATCH_OUTPUT": "output",
}

# srun's (src/srun/libsrun/opt.c env_vars[]), less those a job's own environment holds that are no
# srun option here: SLURM_JOB_ID (srun's --jobid: reckon's srun is in that job) and
# SLURM_JOB_NODELIST.  Inside a job the agent sets SLURM_NTASKS, SLURM_JOB_NUM_NODES,
# SLURM_JOB_NAME and SLURM_MEM_PER_NODE to the job's own (1, 1, its name, its memory), which read
# as options say the same.
SRUN_ENV: dict[str, str] = {
    "SLURM_ACCOUNT": "account", "SLURM_ACCTG_FREQ": "acctg-freq", "SLURM_BURST_BUFFER": "bb",
    "SLURM_CLUSTERS": "clusters", "SLURM_CLUSTER_CONSTRAINT": "cluster-constraint", "SLURM_CONSTRAINT": "constraint",
    "SLURM_CORE_SPEC": "core-spec", "SRUN_CPUS_PER_TASK": "cpus-per-task", "SLURM_CPU_BIND": "cpu-bind",
    "SLURM_CPU_FREQ_REQ": "cpu-freq", "SLURM_CPUS_PER_GPU": "cpus-per-gpu", "SLURM_DELAY_BOOT": "delay-boot",
    "SLURM_DEPENDENCY": "dependency", "SLURM_DISABLE_STATUS": "disable-status", "SLURM_DISTRIBUTION": "distribution",
    "SLURM_EPILOG": "epilog", "SLURM_EXACT": "exact", "SLURM_EXCLUSIVE": "exclusive", "SLURM_EXPORT_ENV": "export",
    "SRUN_EXPORT_ENV": "export", "SLURM_GPUS": "gpus", "SLURM_GPU_BIND": "gpu-bind", "SLURM_GPU_FREQ": "gpu-freq",
    "SLURM_GPUS_PER_NODE": "gpus-per-node", "SLURM_GPUS_PER_SOCKET": "gpus-per-socket",
    "SLURM_GPUS_PER_TASK": "gpus-per-task", "SLURM_GRES": "gres", "SLURM_GRES_FLAGS": "gres-flags",
    "SLURM_HINT": "hint", "SLURM_JOB_NAME": "job-name", "SLURM_JOB_NUM_NODES": "nodes",
    "SLURM_KILL_BAD_EXIT": "kill-on-bad-exit", "SLURM_LABELIO": "label", "SLURM_MEM_BIND": "mem-bind",
    "SLURM_MEM_PER_CPU": "mem-per-cpu", "SLURM_MEM_PER_GPU": "mem-per-gpu", "SLURM_MEM_PER_NODE": "mem",
    "SLURM_MPI_TYPE": "mpi", "SLURM_NCORES_PER_SOCKET": "cores-per-socket", "SLURM_NETWORK": "network",
    "SLURM_NO_KILL": "no-kill", "SLURM_NPROCS": "ntasks", "SLURM_NTASKS": "ntasks",
    "SLURM_NSOCKETS_PER_NODE": "sockets-per-node", "SLURM_NTASKS_PER_NODE": "ntasks-per-node",
    "SLURM_NTASKS_PER_GPU": "ntasks-per-gpu", "SLURM_OPEN_MODE": "open-mode", "SLURM_OVERCOMMIT": "overcommit",
    "SLURM_OVERLAP": "overlap", "SLURM_PARTITION": "partition", "SLURM_POWER": "power", "SLURM_PROFILE": "profile",
    "SLURM_PROLOG": "prolog", "SLURM_QOS": "qos", "SLURM_REMOTE_CWD": "chdir", "SLURM_REQ_SWITCH": "switches",
    "SLURM_RESERVATION": "reservation", "SLURM_SIGNAL": "signal", "SLURM_SPREAD_JOB": "spread-job",
    "SLURM_SRUN_MULTI": "multi-prog", "SLURM_STDERRMODE": "error", "SLURM_STDINMODE": "input",
    "SLURM_STDOUTMODE": "output", "SLURM_TASK_EPILOG": "task-epilog", "SLURM_TASK_PROLOG": "task-prolog",
    "SLURM_THREAD_SPEC": "thread-spec", "SLURM_THREADS": "threads", "SLURM_THREADS_PER_CORE": "threads-per-core",
    "SLURM_TIMELIMIT": "time", "SLURM_UNBUFFEREDIO": "unbuffered", "SLURM_USE_MIN_NODES": "use-min-nodes",
    "SLURM_WAIT": "wait", "SLURM_WAIT4SWITCH": "switches", "SLURM_WCKEY": "wckey", "SLURM_WORKING_DIR": "chdir",
    "SRUN_CONTAINER": "container", "SLURM_DEBUG": "verbose",
}


def env_options(environ: dict[str, str], names: dict[str, str], options: dict[str, tuple]
                ) -> tuple[list[tuple[str, str | None]], dict[str, str]]:
    """The options the input variables set, in the table's order (a later variable for the same
    option wins, as Slurm reads them in that order: SRUN_EXPORT_ENV over SLURM_EXPORT_ENV), and
    which variable set each.  A flag's value is not read (Slurm's: set by the variable's presence);
    an empty optional argument is none."""
    parsed: list[tuple[str, str | None]] = []
    origin: dict[str, str] = {}
    for var, name in names.items():
        value = environ.get(var)
        if value is None:
            continue
        arg = options[name][2]
        parsed.append((name, None if arg == 0 or (arg == 2 and not value) else value))
        origin[name] = var
    return parsed, origin
