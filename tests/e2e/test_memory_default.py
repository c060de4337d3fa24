"""Memory for jobs that give no ``--mem`` (issue #20: one runaway job must not take a machine, or its
agent, down), end to end on real cgroups with the real daemons, as root (token mode: the jobs run
as root too).

* the agent: a job without ``--mem`` is limited to the memory the agent offers, and the cgroup all
  its jobs are in is capped there; the agent is exempt from the machine's OOM killer and its jobs
  are born first in line;
* the controller's ``--default-mem-per-cpu`` (Slurm's DefMemPerCPU): such a job asks CPUs x the
  default, shown by ``reckon show``, squeue and scontrol, and enforced by its agent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reckon.daemon.agent import cgroups

from tests.e2e.conftest import HANG, agent_cgroups, wait_for

pytestmark = pytest.mark.e2e

M = 1 << 20
PYTHON = "/usr/bin/python3"
# Waits for the file given as its argument, then takes 200M.
ALLOCATE_200M = (f"{PYTHON} -c 'import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
                 f"b = bytearray(200 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"survived\")'")


@pytest.fixture(autouse=True)
def need_cgroups():
    # As the other real-cgroup tests (tests/daemon/agent_real.py): a failure saying what it needs,
    # never a skip that would let a run pass without the check.
    if os.geteuid() != 0:
        pytest.fail("this test needs root (the agent makes real cgroups)", pytrace=False)
    found = cgroups.detect(f"probe-{os.getpid()}")
    for base in cgroups.bases(found):
        try:
            os.rmdir(base)
        except OSError:
            pass
    assert "mem" in found.get("kinds", ()), f"no memory cgroup the agent could use here: {found.get('why') or 'none'}"


def may_exempt() -> bool:
    """Whether a root process here may set its oom_score_adj to -1000 (tried in a child)."""
    probe = "import os\ntry:\n    os.write(os.open('/proc/self/oom_score_adj', os.O_WRONLY), b'-1000')\n" \
            "except OSError:\n    raise SystemExit(1)"
    return subprocess.run([sys.executable, "-c", probe], timeout=HANG).returncode == 0


def running_cgroup(cluster, agent: str, job: str) -> Path:
    """The memory cgroup directory of ``job``'s (first) attempt, once its agent has made it."""
    def memory_dir() -> Path | None:
        for spec in agent_cgroups(cluster.agent_dir(agent)):
            d = spec["dirs"].get("memory")
            if d is not None and Path(d).name == f"{job}.1":
                return Path(d)
        return None
    return wait_for(memory_dir, what=f"job {job}'s memory cgroup")


def limit(directory: Path) -> int:
    return int((directory / "memory.limit_in_bytes").read_text())


def slurm(cluster, command: str, *args: str) -> str:
    env = {**os.environ, "RECKON_CONTROLLER": cluster.url, "RECKON_TOKEN": cluster.token or ""}
    result = subprocess.run([sys.executable, "-m", f"reckon.daemon.slurm.{command}", *args], capture_output=True,
                            text=True, env=env, cwd=cluster.base, timeout=HANG, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result
    return result.stdout


def test_a_job_without_mem_past_the_agents_memory_is_an_oom_kill_and_the_agent_serves_the_next(cluster, tmp_path):
    cluster.start_controller()
    cluster.start_agent("a1", "--mem", "100M", slots=2)
    go = tmp_path / "go"
    job = cluster.submit("sh", "-c", f"{ALLOCATE_200M} {go}")
    memory = running_cgroup(cluster, "a1", job)
    if not memory.parent.name.startswith("a1-"):  # v1's reckon/<agent>-<identity>, the jobs' parent
        pytest.fail(f"unexpected cgroup layout {memory}")
    # The job's own limit and its parent's cap (memsw too, where the kernel counts swap).
    assert limit(memory) == 100 * M and limit(memory.parent) == 100 * M
    memsw = memory.parent / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        assert int(memsw.read_text()) == 100 * M
    # Exempt where the machine lets root set -1000 (not in a container without CAP_SYS_RESOURCE,
    # as here): else a one-line warning, and the agent stays at 0, behind its jobs' +500.
    exempt = may_exempt()
    assert int(Path(f"/proc/{cluster.pid('a1')}/oom_score_adj").read_text()) == (
        cgroups.OOM_SCORE_ADJ_EXEMPT if exempt else 0)
    job_pids = [int(p) for p in (memory / "cgroup.procs").read_text().split()]
    assert job_pids and all(int(Path(f"/proc/{p}/oom_score_adj").read_text()) == cgroups.OOM_SCORE_ADJ_JOB
                            for p in job_pids)
    go.touch()
    record = cluster.wait_job(job)
    assert (record["state"], record["reason"]) == ("FAILED", "oom"), record
    assert record["usage"]["max_rss"] <= 100 * M
    assert cluster.running("a1") and cluster.nodes()["a1"]["state"] in ("IDLE", "MIXED")
    again = cluster.submit("echo", "still-here")
    assert cluster.wait_job(again)["state"] == "COMPLETED"
    assert cluster.cli("logs", again) == "still-here\n"
    said = [line for line in cluster.log_text("a1").splitlines() if "OOM killer" in line]
    assert len(said) == 1 and (("INFO OOM killer: the agent and its supervisors are exempt" in said[0]) if exempt
                               else ("WARNING cannot exempt the agent from the OOM killer" in said[0])), said


def test_the_default_memory_per_cpu_is_asked_shown_and_enforced(cluster, tmp_path):
    cluster.start_controller("--default-mem-per-cpu", "40M")
    cluster.start_agent("a1", "--mem", "1G", slots=4)
    go = tmp_path / "go"
    job = cluster.cli("submit", "--cpus", "2", "--", "sh", "-c", f"{ALLOCATE_200M} {go}").strip()
    given = cluster.cli("submit", "--cpus", "2", "--mem", "300M", "--", "sleep", "60").strip()
    memory = running_cgroup(cluster, "a1", job)
    assert limit(memory) == 80 * M  # 2 CPUs x 40M, not the agent's 1G
    assert limit(memory.parent) == 1 << 30
    assert limit(running_cgroup(cluster, "a1", given)) == 300 * M
    assert cluster.job(job)["mem"] == 80 * M and cluster.job(given)["mem"] == 300 * M
    assert "80M" in cluster.cli("show", job)
    assert slurm(cluster, "squeue", "--noheader", "--format=%i %m", "--job", f"{job},{given}").split("\n")[:-1] == [
        f"{job} 80M", f"{given} 300M"]
    assert "mem=80M" in slurm(cluster, "scontrol", "show", "job", job)
    go.touch()
    record = cluster.wait_job(job)
    assert (record["state"], record["reason"]) == ("FAILED", "oom"), record
    cluster.cli("cancel", given)
    cluster.wait_job(given)
