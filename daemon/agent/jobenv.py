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
3. ``RECKON_JOB_ID``, ``RECKON_ATTEMPT`` and ``RECKON_JOB_NAME``, and for a
   job given GPUs ``CUDA_VISIBLE_DEVICES`` and ``RECKON_GPUS`` (its assigned
   indices, comma-separated), last, so a job cannot be misled about who it is
   or which devices are its own.  (A job with an owner gets ``HOME``,
   ``USER``, ``LOGNAME`` and ``SHELL`` from the owner's passwd entry on top,
   set by its supervisor: ``daemon/agent/users.py``.)

``RECKON_TOKEN`` and ``RECKON_TOKEN_FILE`` are never passed, even when the
job's own pairs name them (the submitter then has the token already and can
hand it over another way; an agent never does).

Everything a job's environment holds is built here, in one function, so
other per-job variables (job arrays) are added in one place.
"""

from __future__ import annotations

import os
from typing import Mapping

from reckon.model.jobs import JobSpec

BASE_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR")
BASE_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
NEVER = frozenset({"RECKON_TOKEN", "RECKON_TOKEN_FILE"})  # the agent's secret and where it lives


def base_environment(agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of the agent's environment every job gets (see the module docstring)."""
    agent_env = os.environ if agent_env is None else agent_env
    env = {k: v for k, v in agent_env.items() if k in BASE_NAMES or k.startswith(BASE_PREFIXES)}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def job_environment(spec: JobSpec, job: str, attempt: int, base: Mapping[str, str],
                    gpus: tuple[int, ...] = ()) -> dict[str, str]:
    """The whole environment of one attempt of a job (``gpus``: the attempt's GPU indices)."""
    env = dict(base)
    env.update(spec.env)
    env["RECKON_JOB_ID"] = job
    env["RECKON_ATTEMPT"] = str(attempt)
    env["RECKON_JOB_NAME"] = spec.name
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["RECKON_GPUS"] = ",".join(str(i) for i in gpus)
    else:
        env.pop("RECKON_GPUS", None)  # only reckon says which GPUs are a job's
    for name in NEVER:
        env.pop(name, None)
    return env
