"""What an agent says its machine offers and what it can enforce (daemon/agent/resources.py),
detected on this machine, declared by the operator, and as a non-root agent sees it."""

from __future__ import annotations

import logging
import os
import pwd
import subprocess
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent import cgroups, resources
from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.model.resources import NodeResources, format_size

from tests.unixusers import unix_users  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
MB, GB = 1 << 20, 1 << 30
ALL = {"version": 1, "kinds": ["cpus", "kill", "mem", "pids"], "why": ""}
NONE = {"version": None, "kinds": [], "why": "the agent is not root"}


def test_detected_cpus_and_memory_are_this_machines():
    assert resources.detect_cpus() == len(os.sched_getaffinity(0))
    total = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal:")).split()[1]) * 1024
    assert 0 < resources.detect_mem() <= total


def test_declared_resources_win_and_the_reserve_is_kept_back():
    declared = resources.Declared(cpus=3, mem=8 * GB, reserve_mem=1 * GB, gpus=(0, 1), gres=(("license", 4),))
    cpus, offered, lines = resources.machine(declared, ALL)
    assert cpus == 3
    assert offered == NodeResources(mem=7 * GB, gpus=(0, 1), gres=(("license", 4),), unenforced=("gpus",),
                                    enforcer="cgroup-v1")
    assert lines[0] == ("info", "resources: 3 CPUs (declared), 7G memory (declared, 1G reserved), GPUs 0,1 "
                                "(declared), license:4; enforced with cgroup-v1")
    assert lines[1] == ("warning", "cannot enforce: gpus (GPUs are given by CUDA_VISIBLE_DEVICES only, "
                                   "no devices cgroup)")
    with pytest.raises(ValueError, match="leaves no memory"):
        resources.machine(resources.Declared(mem=GB, reserve_mem=GB), ALL)


def test_without_cgroups_the_agent_says_what_it_cannot_enforce_and_why():
    _, offered, lines = resources.machine(resources.Declared(cpus=1, gpus=()), NONE)
    assert (offered.unenforced, offered.enforcer) == (("cpus", "kill", "mem", "pids"), "none")
    assert lines[-1] == ("warning", "cannot enforce: cpus, kill, mem, pids (the agent is not root)")


def test_on_this_machine_as_root_everything_but_gpus_is_enforced_with_cgroup_v1():
    if os.geteuid() != 0:
        pytest.fail("this test needs root (it makes real cgroups)", pytrace=False)
    found = resources.enforcement("res-test", os.urandom(8).hex(), [])
    try:
        _, offered, lines = resources.machine(resources.Declared(gpus=()), found)
    finally:
        resources.release_enforcement(found)
    assert (offered.enforcer, offered.unenforced) == ("cgroup-v1", ())
    assert [level for level, _ in lines] == ["info"]
    assert not any(os.path.exists(b) for b in cgroups.bases(found))


def test_a_non_root_agent_enforces_nothing_and_runs_jobs_only_as_itself(unix_users):
    # The two stdlib-only modules, loaded by path as the launcher does, in a process of alice's.
    alice, bob = unix_users.alice, unix_users.bob
    script = (
        "import runpy\n"
        f"users = runpy.run_path({str(ROOT / 'daemon/agent/users.py')!r})\n"
        f"cg = runpy.run_path({str(ROOT / 'daemon/agent/cgroups.py')!r})\n"
        "print(cg['detect']('x')['why'])\n"
        "print(users['agent_line'](False))\n"
        "try:\n"
        f"    users['account']({bob.uid}, {bob.gid}, {bob.name!r}, allow_root=False)\n"
        "except users['CannotRunAs'] as e:\n"
        "    print(e.message)\n"
        f"me = users['account']({alice.uid}, {alice.gid}, {alice.name!r}, allow_root=False)\n"
        "print(me.switch, me.name)\n"
    )
    done = subprocess.run(["runuser", "-u", alice.name, "--", "/usr/bin/python3", "-I", "-S", "-c", script],
                          capture_output=True, text=True, cwd="/", timeout=30)
    assert done.returncode == 0, done.stderr
    why, *rest = done.stdout.splitlines()
    assert why.endswith("; the agent is not root")  # after what cgroup v2 lacks here
    assert rest == [
        f"the agent runs as {alice.name} (uid {alice.uid}), not root: it runs jobs only as {alice.name} "
        "and refuses jobs of other users",
        f"this agent runs as {alice.name}, not root: it can run jobs only as {alice.name}, not as {bob.name} "
        f"(uid {bob.uid})",
        f"False {alice.name}",
    ]


async def test_the_agent_says_at_start_what_it_cannot_enforce(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="reckon")
    options = AgentOptions(name="n1", slots=None, state_dir=tmp_path / "agent", controller="ws://127.0.0.1:9",
                           cgroups=False, declared=resources.Declared(mem=4 * GB, gpus=()))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            daemon = await nursery.start(run_agent, options)
            nursery.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records]
    assert daemon.model.config.slots == resources.detect_cpus()  # no --cpus: detected
    assert daemon.model.config.resources.unenforced == ("cpus", "kill", "mem", "pids")
    assert "cannot enforce: cpus, kill, mem, pids (cgroups are off (--no-cgroups))" in said
    # A token-mode agent (no --auth munge): its jobs have no owners and run as its own user.
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert f"token mode: jobs run as the agent's user, {me} (uid {os.geteuid()}); a shared cluster runs them " \
           "as their owners with --auth munge" in said


async def test_a_root_munge_agent_refuses_jobs_without_an_owner_unless_allowed(tmp_path, caplog, munged):
    """The wiring of the refusal the runner tests (test_agent_users.py): on a munge cluster a root
    agent's runner refuses owner-less jobs, with --allow-root-jobs it does not."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root (a root agent)", pytrace=False)
    caplog.set_level(logging.INFO, logger="reckon")
    refused = []
    for allow in (False, True):
        options = AgentOptions(name="n1", slots=1, state_dir=tmp_path / f"agent-{allow}", controller="ws://127.0.0.1:9",
                               cgroups=False, declared=resources.Declared(mem=GB, gpus=()), auth="munge",
                               munge_socket=munged.socket, allow_root_jobs=allow)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                daemon = await nursery.start(run_agent, options)
                refused.append(daemon.runner.refuse_ownerless)
                nursery.cancel_scope.cancel()
    assert refused == [True, False]
    assert ("jobs run as their owners; jobs of root, and jobs without an owner, are refused (no --allow-root-jobs)"
            in [r.getMessage() for r in caplog.records])


def test_a_munge_agent_says_whom_it_runs_jobs_as():
    from reckon.daemon.agent.users import agent_line

    if os.geteuid() != 0:
        pytest.fail("this test needs root (the lines of a root agent)", pytrace=False)
    assert agent_line(False, munge=True) == \
        "jobs run as their owners; jobs of root, and jobs without an owner, are refused (no --allow-root-jobs)"
    assert agent_line(True, munge=True).endswith("are allowed (--allow-root-jobs)")


def test_a_declared_memory_above_the_machines_is_said_at_start():
    detected = resources.detect_mem()
    _, offered, lines = resources.machine(resources.Declared(cpus=1, mem=2 * detected, gpus=()), ALL)
    assert offered.mem == 2 * detected  # the operator's word stands ...
    warning = next(line for level, line in lines if level == "warning" and "--mem" in line)  # ... and is flagged
    assert warning.startswith(f"--mem {format_size(2 * detected)} is more than this machine's "
                              f"{format_size(detected)}"), warning
    _, _, lines = resources.machine(resources.Declared(cpus=1, mem=detected // 2, gpus=()), ALL)
    assert not any("--mem" in line for _, line in lines)


def _fake_nvidia_smi(tmp_path: Path, monkeypatch, script: str) -> None:
    """An ``nvidia-smi`` first on PATH that prints what the real one does (or fails)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")


def test_gpus_are_detected_from_nvidia_smi(tmp_path, monkeypatch):
    # `nvidia-smi -L`'s lines (indices as the driver numbers them, here not in order), and a
    # MIG line under GPU 1 that is not a GPU of its own.
    _fake_nvidia_smi(tmp_path, monkeypatch, """[ "$1" = -L ] || exit 9
echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2b1c5e1e-1d3b-4a8e-9c2f-0123456789ab)'
echo '  MIG 1g.5gb      Device  0: (UUID: MIG-5c2e1b3a-7d4f-4e2a-8b1c-0123456789ab)'
echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-9f8e7d6c-5b4a-3c2d-1e0f-0123456789ab)'
""")
    assert resources.detect_gpus() == (0, 1)
    _, offered, lines = resources.machine(resources.Declared(cpus=2, mem=GB), ALL)
    assert offered.gpus == (0, 1) and "GPUs 0,1 (detected)" in lines[0][1]


def test_a_failing_nvidia_smi_gives_no_gpus_from_its_output(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo 'GPU 0: looks like one'; echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    fallback = len(os.listdir("/proc/driver/nvidia/gpus")) if os.path.isdir("/proc/driver/nvidia/gpus") else 0
    assert resources.detect_gpus() == tuple(range(fallback))  # the driver's /proc entries, if any
