"""The job shapes and the commands the Slurm reference compares (shared by capture.py and
test_against_slurm.py, so that Slurm and reckon get exactly the same requests).

A shape is an sbatch command line; its job name is the shape's name (the `--name` queries need
one).  A command is an argv template: ``{shape}`` is that shape's job id, ``{ids}`` every shape's
id joined by commas (an array's id names all its members).  ``kind`` and ``columns`` tell
normalise.py how to read the output (see there).

Two phases: ``live`` is taken while jobs are pending and running (the finished shapes are done,
`running` and `timeout` run, the array has two members running and the rest pending, `held` and
`dependent` wait); ``final`` after everything that can end has ended (`held` and `dependent`
still wait: a job that never started, as sacct shows it).
"""

from __future__ import annotations

from typing import NamedTuple


class Shape(NamedTuple):
    name: str
    sbatch: tuple[str, ...]  # options before --wrap (the job name is added)
    wrap: str
    live: tuple[str, ...]  # the state(s) (squeue %T) the shape is in when the live capture runs


# Submission order matters: `dependent` names `held`'s id; `completed` prints the default
# "Submitted batch job N" line and `failed` the --parsable one (the sbatch goldens).
SHAPES: tuple[Shape, ...] = (
    Shape("completed", (), "true", ("COMPLETED",)),
    Shape("failed", ("--parsable",), "exit 3", ("FAILED",)),
    Shape("signalled", (), "kill -KILL $$", ("FAILED",)),
    Shape("held", ("--hold",), "true", ("PENDING",)),
    Shape("dependent", ("--dependency=afterok:{held}",), "true", ("PENDING",)),
    Shape("cancelled_pending", ("--hold",), "true", ("CANCELLED",)),  # scancel while held
    Shape("cancelled_running", (), "sleep 600", ("RUNNING",)),  # scancel after the live capture
    Shape("timeout", ("--time=1",), "sleep 600", ("RUNNING",)),  # Slurm's shortest limit: 1 min
    # Members 0 and 1 run long enough for the live capture on a loaded machine; 2-5 then pass quickly.
    Shape("array", ("--array=0-5%2",), "sleep $((SLURM_ARRAY_TASK_ID < 2 ? 75 : 1))", ("RUNNING", "PENDING")),
    Shape("oom", ("--mem=32M",), "python3 -c 'x = bytearray(400 << 20); import time; time.sleep(5)'",
          ("OUT_OF_MEMORY", "FAILED", "COMPLETED")),  # OUT_OF_MEMORY only where cgroups limit memory
)
NAMES = tuple(s.name for s in SHAPES)


class Command(NamedTuple):
    file: str  # golden/<phase>/<file>.txt
    argv: tuple[str, ...]
    kind: str  # normalise.py: table, table-noheader, parsable, parsable-noheader, keyvalue, text
    columns: tuple[str, ...] = ()  # the column names when the output has no header
    phases: tuple[str, ...] = ("live", "final")


FINISHED = "completed,failed,signalled,cancelled_pending"
COMMANDS: tuple[Command, ...] = (
    # squeue: the default table, Parsl's, Snakemake's, and every field (%all).
    Command("squeue", ("squeue",), "table"),
    Command("squeue-parsl", ("squeue", "--noheader", "--format=%i %t", "--job", "{ids}"),
            "table-noheader", ("%i", "%t")),
    Command("squeue-h-it", ("squeue", "-h", "-o", "%i %t"), "table-noheader", ("%i", "%t")),
    Command("squeue-snakemake", ("squeue", "--format=%i|%T", "--states=all", "--noheader", "--name", "array"),
            "parsable-noheader", ("%i", "%T")),
    Command("squeue-states-all", ("squeue", "--format=%i|%j|%T|%r", "--states=all"), "parsable"),
    Command("squeue-array-r", ("squeue", "-r", "-o", "%i %A %K %T", "--name", "array"), "table"),
    Command("squeue-all", ("squeue", "-o", "%all"), "parsable"),
    # sacct: the default table, Parsl's, submitit's, Snakemake's, exit codes.
    Command("sacct", ("sacct",), "table"),
    Command("sacct-parsl", ("sacct", "-X", "--noheader", "--format=jobid,state%20", "--job", "{ids}"),
            "table-noheader", ("JobID", "State")),
    Command("sacct-submitit", ("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", "{ids}"), "parsable"),
    Command("sacct-submitit-array", ("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", "{array}"),
            "parsable"),
    Command("sacct-snakemake", ("sacct", "-X", "--parsable2", "--noheader", "--format=JobIdRaw,State",
                                "--starttime", "now-1days", "--endtime", "now", "--name", "array"),
            "parsable-noheader", ("JobIDRaw", "State")),
    Command("sacct-exitcodes", ("sacct", "-X", "-P", "-o", "JobID,JobName,State,ExitCode,DerivedExitCode",
                                "-j", "{ids}"), "parsable"),
    Command("sacct-fields", ("sacct", "-P", "-o", "JobID,JobIDRaw,JobName,State,ExitCode,AllocCPUS,ReqMem,"
                             "Timelimit,Partition,User,Elapsed,Submit,Start,End,NodeList", "-j", "{ids}"),
            "parsable"),
    # sinfo: the default table, dask-jobqueue's %C, Snakemake's %P.
    Command("sinfo", ("sinfo",), "table"),
    Command("sinfo-C", ("sinfo", "-o", "%C"), "table"),
    Command("sinfo-P", ("sinfo", "-o", "%P"), "table"),
    # scontrol: one job of each shape, the partition, the configuration.
    *(Command(f"scontrol-show-job-{n}", ("scontrol", "show", "job", f"{{{n}}}"), "keyvalue") for n in NAMES),
    Command("scontrol-show-partition", ("scontrol", "show", "partition"), "keyvalue"),
    Command("scontrol-show-config", ("scontrol", "show", "config"), "keyvalue", phases=("final",)),
)
