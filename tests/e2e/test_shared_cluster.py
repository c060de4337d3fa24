"""A shared cluster end to end (issue #20): real munged, real Unix users, real cgroups, the real daemons.

One controller and one agent, both as root, authenticating with MUNGE (``tests/munged.py``);
two users made for the suite (``tests/unixusers.py``): alice, who has a supplementary group,
and bob.  Each user's requests carry a credential that ``munge`` made as that user (munged
takes the uid from its socket's peer), so the controller knows who asks exactly as on a real
cluster.  root is the operator.  The agent declares two GPUs (this machine has none), so GPU
assignment is tested on the indices the controller gives.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from reckon.daemon.auth.client import ClientAuth
from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.client_common import ClientError

from tests.e2e.conftest import TERMINAL, alive, wait_for
from tests.unixusers import unix_users  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e


def _munge_as(socket: str, user: str) -> str:
    return subprocess.run(["runuser", "-u", user, "--", "munge", "--no-input", "--socket", socket],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()


class As:
    """Requests to the controller as one Unix user (root: the operator)."""

    def __init__(self, cluster, socket: str, user: str | None) -> None:
        self.cluster = cluster
        encode = None if user is None else (lambda: _munge_as(socket, user))
        self.auth = ClientAuth(mode="munge", munge_socket=socket, encode=encode)

    def call(self, op: str, **fields):
        with SyncClient(self.cluster.url, self.auth, timeout=20) as client:
            return client.call(op, **fields)

    def submit(self, command: str, cwd: Path, **spec) -> str:
        reply = self.call("submit", spec={"name": "e2e", "command": ["sh", "-c", command], "cwd": str(cwd),
                                          "env": [], "slots": 1, **spec})
        return reply["job"]["id"]

    def output(self, job: str) -> str:
        return self.call("logs", job=job)["data"].decode()

    def refusal(self, op: str, **fields) -> str:
        with pytest.raises(ClientError) as info:
            self.call(op, **fields)
        return str(info.value)


@pytest.fixture
def shared(cluster, munged, unix_users, tmp_path):
    """The cluster, as each of its users; a working directory every user may write."""
    cluster.use_munge(munged.socket)
    cluster.start_controller()
    cluster.start_agent("a1", "--gpus", "0,1", slots=4)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"reckon-shared-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    try:
        yield (cluster, As(cluster, munged.socket, unix_users.alice.name), As(cluster, munged.socket,
               unix_users.bob.name), As(cluster, munged.socket, None), work)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_a_users_job_runs_as_them_and_only_they_and_an_operator_may_touch_it(shared, unix_users):
    cluster, alice, bob, root, work = shared
    job = alice.submit("id -u; id -g; id -G; echo $HOME $USER; sleep 60", work)
    record = cluster.wait_job(job, ("RUNNING",))
    assert record["user"] == unix_users.alice.name and record["owner"]["uid"] == unix_users.alice.uid

    def printed() -> list[str] | None:
        lines = alice.output(job).splitlines()
        return lines if len(lines) >= 4 else None
    uid, gid, groups, env = wait_for(printed, what="the job's id lines")
    assert (int(uid), int(gid)) == (unix_users.alice.uid, unix_users.alice.gid)
    assert unix_users.group_gid in {int(g) for g in groups.split()}  # initgroups: her supplementary group
    assert env == f"{unix_users.alice.home} {unix_users.alice.name}"

    # bob sees the queue, but may neither cancel, hold nor read alice's job.
    assert job in {j["id"] for j in bob.call("jobs")["jobs"]}
    for op in ("cancel", "hold", "requeue"):
        line = bob.refusal(op, job=job)
        assert f"job {job} belongs to {unix_users.alice.name}" in line and "\n" not in line, line
    assert "belongs to" in bob.refusal("logs", job=job)
    assert "operator" in bob.refusal("drain", agent="a1")
    assert cluster.job(job)["state"] == "RUNNING" and not cluster.job(job)["cancel_requested"]

    # The operator may: root cancels it.
    root.call("cancel", job=job)
    assert cluster.wait_job(job)["state"] == "CANCELLED"


def test_a_job_past_its_memory_is_an_oom_kill_and_the_agent_lives(shared):
    cluster, alice, _, _, work = shared
    job = alice.submit("exec dd if=/dev/zero of=/dev/null bs=200M count=1", work, mem=50 << 20)
    record = cluster.wait_job(job)
    assert (record["state"], record["reason"]) == ("FAILED", "oom"), record
    assert record["usage"] is not None and record["usage"]["max_rss"] <= 52 << 20
    assert cluster.running("a1") and cluster.nodes()["a1"]["state"] in ("IDLE", "MIXED")
    again = alice.submit("echo still-here", work)
    assert cluster.wait_job(again)["state"] == "COMPLETED"


def test_a_cancel_kills_a_double_forked_sleeper_too(shared):
    cluster, alice, _, _, work = shared
    pid_file = work / "escaped.pid"
    job = alice.submit(f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & sleep 300", work)
    cluster.wait_job(job, ("RUNNING",))
    escaped = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the sleeper's pid"))
    assert alive(escaped)
    alice.call("cancel", job=job)
    assert cluster.wait_job(job)["state"] == "CANCELLED"
    wait_for(lambda: not alive(escaped), what=f"the escaped sleeper {escaped} to be killed")


def test_two_gpu_jobs_get_different_devices_and_a_third_waits(shared, unix_users):
    cluster, alice, bob, root, work = shared
    jobs = [user.submit('echo "$CUDA_VISIBLE_DEVICES $RECKON_GPUS"; sleep 60', work, gpus=1)
            for user in (alice, bob, alice)]
    running = wait_for(lambda: (lambda js: js if sum(j["state"] == "RUNNING" for j in js) == 2 else None)(
        [cluster.job(j) for j in jobs]), what="two GPU jobs running")
    waiting = [j for j in running if j["state"] != "RUNNING"]
    assert len(waiting) == 1 and waiting[0]["state"] == "PENDING"
    devices = sorted(tuple(j["gpu_ids"]) for j in running if j["state"] == "RUNNING")
    assert devices == [(0,), (1,)]
    owners = {unix_users.alice.name: alice, unix_users.bob.name: bob}
    for j in running:
        if j["state"] == "RUNNING":
            line = wait_for(lambda: owners[j["user"]].output(j["id"]).strip(), what="the GPU job's line")
            assert line == f"{j['gpu_ids'][0]} {j['gpu_ids'][0]}"  # CUDA_VISIBLE_DEVICES and RECKON_GPUS
    why = cluster.cli_json("show", waiting[0]["id"])["pending_reason"]
    assert "GPU" in why, why
    # One ends: the waiting job gets the GPU it freed.
    first = next(j for j in running if j["state"] == "RUNNING")
    root.call("cancel", job=first["id"])
    third = cluster.wait_job(waiting[0]["id"], ("RUNNING",))
    assert third["gpu_ids"] == first["gpu_ids"]


def test_accounting_records_a_cpu_bound_jobs_cpu_time_and_a_refused_start_says_why(shared, unix_users):
    cluster, alice, _, root, work = shared
    # A cwd alice cannot enter (root's, 0700): the agent refuses to start the job, and says why
    # in `show`, `history` and `history --user`, not only in the job's stderr.
    closed = work / "closed"
    closed.mkdir(mode=0o700)
    refused = alice.submit("echo ran", closed)
    # The shell counts to 400,000 and prints its own CPU time (the builtin `times`).
    job = alice.submit("i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; times", work)
    why = f"not run: cannot change to directory '{closed}': Permission denied"
    record = cluster.wait_job(refused)
    assert (record["state"], record["exit_code"], record["reason"]) == ("FAILED", 126, why)
    assert any(line.startswith("reason:") and line.endswith(why) for line in cluster.cli("show", refused).splitlines())
    assert why in cluster.cli("history", refused)
    assert why in cluster.cli("history", "--user", unix_users.alice.name)
    record = cluster.wait_job(job)
    assert record["state"] == "COMPLETED"
    usage = record["usage"]
    own = alice.output(job).split()
    user_s, sys_s = (_seconds(own[0]), _seconds(own[1]))
    assert usage["cpu_user"] + usage["cpu_system"] == pytest.approx(user_s + sys_s, rel=0.10, abs=0.05)
    assert usage["wall"] >= (user_s + sys_s) * 0.9
    mine = root.call("history", user=unix_users.alice.name)
    assert job in {j["id"] for j in mine["jobs"]}, mine


def _seconds(text: str) -> float:
    minutes, _, seconds = text.partition("m")
    return int(minutes) * 60 + float(seconds.rstrip("s"))
