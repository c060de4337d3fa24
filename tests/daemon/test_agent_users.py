"""Jobs run as their owners: real Unix users (tests/unixusers.py), the real runner and supervisors.

As a non-root user these tests fail saying they need root; they do not skip.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import trio

from reckon.daemon.agent.runner import JobRunner
from reckon.model.resources import Owner

from tests.daemon.agent_real import HANG, reap_jobs, sh
from tests.unixusers import unix_users  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("unix_users")


@pytest.fixture(autouse=True)
def reaper(tmp_path):
    yield
    reap_jobs(tmp_path)


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's tmp_path is under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="reckon-test-open-"))
    path.chmod(0o755)
    yield path
    reap_jobs(path)
    shutil.rmtree(path, ignore_errors=True)


async def run(runner: JobRunner, job: str, spec, owner) -> object:
    await runner.start(job, 1, spec, owner=owner)
    while True:
        item = await runner.exits.receive()
        if item.job == job:
            return item


async def test_job_runs_with_its_owners_ids_groups_and_environment(tmp_path, unix_users):
    alice = unix_users.alice
    script = 'id -u; id -g; id -G; echo "$HOME|$USER|$LOGNAME|$SHELL"; umask; pwd; echo x > made-by-job'
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            status = await run(runner, "1", sh(script, cwd=str(alice.home)), alice.owner())
            out, err = runner.log_paths("1", 1)
    assert status.exit_code == 0, err.read_text()
    uid, gid, groups, env, umask, cwd = out.read_text().splitlines()
    assert (int(uid), int(gid)) == (alice.uid, alice.gid)
    assert {alice.gid, unix_users.group_gid} == set(map(int, groups.split()))  # initgroups: her supplementary group
    assert env == f"{alice.home}|{alice.name}|{alice.name}|/bin/sh"
    assert umask == "0022"
    assert cwd == str(alice.home)
    made = (alice.home / "made-by-job").stat()
    assert (made.st_uid, stat.S_IMODE(made.st_mode)) == (alice.uid, 0o644)
    for path in (out, err):  # the attempt's own output: hers, and only hers
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (alice.uid, alice.gid, 0o600)


async def test_a_cwd_the_owner_cannot_enter_is_the_jobs_error(tmp_path, unix_users):
    alice = unix_users.alice
    closed = alice.home / "closed"
    closed.mkdir(mode=0o700)  # root's: the supervisor (root) could enter it, alice cannot
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            status = await run(runner, "1", sh("echo ran", cwd=str(closed)), alice.owner())
            out, err = runner.log_paths("1", 1)
            # The agent is fine: the next job runs.
            after = await run(runner, "2", sh("true", cwd=str(alice.home)), alice.owner())
    assert (status.exit_code, out.read_text()) == (126, "")
    assert f"cannot change to directory '{closed}': Permission denied (exit 126)" in err.read_text()
    assert status.not_run == f"cannot change to directory '{closed}': Permission denied"  # for `reckon show`
    assert after.exit_code == 0 and after.not_run is None


async def test_an_output_file_the_owner_cannot_write_is_the_jobs_error(tmp_path, unix_users):
    alice = unix_users.alice
    target = tmp_path / "root-only.out"  # tmp_path is root's, 0700
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            spec = sh("echo ran", cwd=str(alice.home))
            spec = type(spec)(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "output": str(target)})
            status = await run(runner, "1", spec, alice.owner())
            _, err = runner.log_paths("1", 1)
    assert status.exit_code == 126
    assert f"cannot open the output file {str(target)!r}: Permission denied" in err.read_text()
    assert not target.exists()


async def test_a_job_cannot_read_the_agents_state_or_another_users_output(open_dir, unix_users):
    alice, bob = unix_users.alice, unix_users.bob
    with trio.fail_after(HANG):
        async with JobRunner(open_dir / "state") as runner:
            await run(runner, "1", sh("echo secret of alice", cwd=str(alice.home)), alice.owner())
            alice_out, _ = runner.log_paths("1", 1)
            status = await run(runner, "2", sh(f"cat {alice_out}; ls {runner.jobs_dir}", cwd=str(bob.home)),
                               bob.owner())
            _, bob_err = runner.log_paths("2", 1)
    assert alice_out.read_text() == "secret of alice\n"
    assert status.exit_code != 0
    text = bob_err.read_text()
    assert text.count("Permission denied") == 2, text
    # Denied by the agent's own modes (the directories above are open to everyone):
    assert stat.S_IMODE(runner.jobs_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(alice_out.stat().st_mode) == 0o600


async def test_root_jobs_only_with_allow_root_jobs(tmp_path, unix_users):
    root = Owner(uid=0, gid=0, user="root")
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            refused = await run(runner, "1", sh("id -u"), root)
            out, err = runner.log_paths("1", 1)
        async with JobRunner(tmp_path / "state2", allow_root_jobs=True) as runner2:
            allowed = await run(runner2, "1", sh("id -u"), root)
            out2, _ = runner2.log_paths("1", 1)
    assert (refused.exit_code, out.read_text()) == (126, "")
    assert "the job's owner root is root: this agent runs no job as root" in err.read_text()
    assert refused.not_run.startswith("the job's owner root is root: this agent runs no job as root")
    assert (allowed.exit_code, out2.read_text(), allowed.not_run) == (0, "0\n", None)


async def test_a_munge_agent_runs_a_job_without_an_owner_as_root_only_with_allow_root_jobs(tmp_path):
    """A job queued in token mode has no owner; on a munge cluster a root agent would run it as
    root (its own user): refused like a job of root, unless --allow-root-jobs."""
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state", refuse_ownerless=True) as runner:
            refused = await run(runner, "1", sh("id -u"), None)
            out, err = runner.log_paths("1", 1)
        async with JobRunner(tmp_path / "state2", refuse_ownerless=False) as runner2:
            allowed = await run(runner2, "1", sh("id -u"), None)
            out2, _ = runner2.log_paths("1", 1)
    assert (refused.exit_code, out.read_text()) == (126, "")
    assert "has no owner (submitted in token mode)" in refused.not_run and refused.not_run in err.read_text()
    assert (allowed.exit_code, out2.read_text()) == (0, "0\n")


async def test_an_owner_without_an_account_here_is_the_jobs_error(tmp_path, unix_users):
    ghost = Owner(uid=3_999_999, gid=3_999_999, user="ghost")
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            status = await run(runner, "1", sh("echo ran"), ghost)
            out, err = runner.log_paths("1", 1)
    assert (status.exit_code, out.read_text()) == (126, "")
    assert "the job's owner ghost (uid 3999999) has no account on this machine (exit 126)" in err.read_text()
    assert status.not_run == "the job's owner ghost (uid 3999999) has no account on this machine"


async def test_an_owner_whose_uid_is_another_user_here_is_the_jobs_error(tmp_path, unix_users):
    """The controller's machine says uid U is alice; here U is bob: the job is not run as bob."""
    bob = unix_users.bob
    impostor = Owner(uid=bob.uid, gid=bob.gid, user="alice-elsewhere")
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            status = await run(runner, "1", sh("echo ran", cwd=str(bob.home)), impostor)
            unnamed = await run(runner, "2", sh("echo ran", cwd=str(bob.home)),
                                Owner(uid=bob.uid, gid=bob.gid, user=f"#{bob.uid}"))  # no name there: by uid
            out, _ = runner.log_paths("1", 1)
            out2, _ = runner.log_paths("2", 1)
    assert (status.exit_code, out.read_text()) == (126, "")
    assert status.not_run == (f"the job's owner alice-elsewhere (uid {bob.uid}) is {bob.name} on this machine: "
                              "the cluster's machines must agree on user ids")
    assert (unnamed.exit_code, out2.read_text()) == (0, "ran\n")


async def test_gpus_are_in_the_jobs_environment(tmp_path, unix_users):
    alice = unix_users.alice
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            await runner.start("1", 1, sh('echo "$CUDA_VISIBLE_DEVICES|$RECKON_GPUS"', cwd=str(alice.home)),
                               owner=alice.owner(), gpus=(1, 3))
            await runner.exits.receive()
            # Given none, it sees none, whatever its own pairs say (CUDA's empty list hides every GPU).
            await runner.start("2", 1, sh('echo "${CUDA_VISIBLE_DEVICES-unset}|${RECKON_GPUS-unset}"',
                                          env=(("CUDA_VISIBLE_DEVICES", "0,1"), ("RECKON_GPUS", "0"))))
            await runner.exits.receive()
            out1, _ = runner.log_paths("1", 1)
            out2, _ = runner.log_paths("2", 1)
    assert out1.read_text() == "1,3|1,3\n"
    assert out2.read_text() == "|unset\n"


async def test_an_output_file_the_job_names_is_its_owners_alone(open_dir, unix_users):
    """--output in a directory every user may write (a shared scratch space): created 0600 (the
    attempt's own files' mode), so another user's job cannot read it."""
    import dataclasses

    alice, bob = unix_users.alice, unix_users.bob
    shared = open_dir / "scratch"
    shared.mkdir()
    shared.chmod(0o1777)
    named = shared / "alice.out"
    with trio.fail_after(HANG):
        async with JobRunner(open_dir / "state") as runner:
            spec = dataclasses.replace(sh("echo secret of alice", cwd=str(alice.home)), output=str(named))
            assert (await run(runner, "1", spec, alice.owner())).exit_code == 0
            status = await run(runner, "2", sh(f"cat {named}", cwd=str(bob.home)), bob.owner())
            _, bob_err = runner.log_paths("2", 1)
    st = named.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), named.read_text()) == (alice.uid, 0o600, "secret of alice\n")
    assert status.exit_code != 0 and "Permission denied" in bob_err.read_text()
