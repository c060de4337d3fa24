"""A job's environment: a documented base, what the job asked for, and reckon's own variables.

Jobs do not inherit the agent's environment: it may hold the shared token
(``RECKON_TOKEN``), the token file's path (``RECKON_TOKEN_FILE``), and
whatever else the agent's service manager set.  A job gets:

1. the **base**: these variables of the agent's environment, where set:
   ``PATH`` (``/usr/local/bin:/usr/bin:/bin`` when the agent has none),
   ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``LANG``, ``LANGUAGE``,
   every ``LC_*``, ``TZ`` and ``TMPDIR``: what a login would give the
   agent's user, so ordinary commands behave as they do in a shell;
2. the job's own pairs (``reckon submit --env K=V``), which override the base;
3. ``RECKON_JOB_ID``, ``RECKON_ATTEMPT`` and ``RECKON_JOB_NAME``, and
   ``CUDA_VISIBLE_DEVICES`` (its assigned GPU indices, comma-separated; empty,
   so CUDA shows it no device, for a job given none) with ``RECKON_GPUS`` the
   same for a job given GPUs, last, so a job cannot be misled about who it is
   or which devices are its own.  (A job with an owner gets ``HOME``,
   ``USER``, ``LOGNAME`` and ``SHELL`` from the owner's passwd entry on top,
   set by its supervisor: ``daemon/agent/users.py``.)

The agent's own ``RECKON_TOKEN`` and ``RECKON_TOKEN_FILE`` are never passed
(the base has neither). The job's own pairs may name them: the submitter's
choice, so that a job on a token cluster can call the controller itself
(``scontrol requeue`` from inside, as submitit does). The Slurm layer exports
``RECKON_TOKEN_FILE`` with ``--export=ALL`` and the token itself only when
named (docs/slurm.md); neither is ever the agent's.

4. with ``slurm_env`` (version 7, jobs from ``sbatch``): Slurm's own variables for a
   one-node, one-task job (``slurm_environment``; the array's count, min and max come in the
   spec's own pairs, from model/arrays.py), and always ``RECKON_CONTROLLER``, the URL this agent
   reaches the controller at, so a job's ``scontrol requeue`` or ``reckon`` finds it.

Everything a job's environment holds is built here, in one function, so
other per-job variables (job arrays) are added in one place.
"""

from __future__ import annotations

import os
import pwd
import socket
from dataclasses import dataclass
from typing import Mapping

from reckon.model.jobs import JobSpec
from reckon.model.resources import Owner

MIB = 1 << 20
CLUSTER_NAME = "reckon"


@dataclass(frozen=True, slots=True)
class JobHost:
    """What a job learns of the machine it runs on: the short host name, the agent's own user
    (a token-mode job's), and the controller URL the agent reaches."""

    short: str
    user: str
    uid: int
    controller: str | None = None

    @classmethod
    def here(cls, controller: str | None = None) -> "JobHost":
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return cls(short=socket.gethostname().split(".")[0], user=user, uid=uid, controller=controller)

    def user_of(self, owner: Owner | None) -> str:
        return owner.user if owner is not None else self.user


def slurm_environment(spec: JobSpec, job: str, attempt: int, host: JobHost, owner: Owner | None) -> dict[str, str]:
    """Slurm's variables for one attempt of a one-node, one-task job (what sbatch jobs and the
    tools on them read).  SLURM_RESTART_COUNT is the attempts before this one (requeues and retries:
    the agent is not told which)."""
    labels = dict(spec.labels)
    env = {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_NAME": spec.name,
        "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": host.short, "SLURM_NODELIST": host.short,
        "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
        "SLURM_CPUS_PER_TASK": str(spec.slots), "SLURM_CPUS_ON_NODE": str(spec.slots),
        "SLURM_SUBMIT_DIR": spec.cwd if spec.cwd is not None else os.getcwd(),
        "SLURM_JOB_USER": host.user_of(owner), "SLURM_JOB_UID": str(owner.uid if owner is not None else host.uid),
        "SLURM_CLUSTER_NAME": CLUSTER_NAME, "SLURM_JOB_PARTITION": labels.get("partition", CLUSTER_NAME),
        "SLURM_RESTART_COUNT": str(attempt - 1),
    }
    if spec.mem is not None:
        env["SLURM_MEM_PER_NODE"] = str(max(spec.mem // MIB, 1))
    if spec.array_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = spec.array_id
        env["SLURM_ARRAY_TASK_ID"] = str(spec.array_index)
    if "account" in labels:
        env["SLURM_JOB_ACCOUNT"] = labels["account"]
    return env

BASE_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR")
BASE_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def base_environment(agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of the agent's environment every job gets (see the module docstring)."""
    agent_env = os.environ if agent_env is None else agent_env
    env = {k: v for k, v in agent_env.items() if k in BASE_NAMES or k.startswith(BASE_PREFIXES)}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def job_environment(spec: JobSpec, job: str, attempt: int, base: Mapping[str, str],
                    gpus: tuple[int, ...] = (), host: JobHost | None = None,
                    owner: Owner | None = None) -> dict[str, str]:
    """The whole environment of one attempt of a job (``gpus``: the attempt's GPU indices;
    ``host``/``owner``: for slurm_env and RECKON_CONTROLLER)."""
    env = dict(base)
    env.update(spec.env)
    if host is not None:
        if spec.slurm_env:  # over the job's own pairs: a job is not misled about who it is
            env.update(slurm_environment(spec, job, attempt, host, owner))
        if host.controller is not None:
            env["RECKON_CONTROLLER"] = host.controller
    env["RECKON_JOB_ID"] = job
    env["RECKON_ATTEMPT"] = str(attempt)
    env["RECKON_JOB_NAME"] = spec.name
    # Only reckon says which GPUs are a job's: one given none sees none (CUDA's empty list), and a
    # job's own CUDA_VISIBLE_DEVICES cannot reach another job's device (no devices cgroup fences it).
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
    if gpus:
        env["RECKON_GPUS"] = env["CUDA_VISIBLE_DEVICES"]
    else:
        env.pop("RECKON_GPUS", None)
    return env
