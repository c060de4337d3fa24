"""A job's environment and the modes of its files, with real jobs (daemon/agent/jobenv.py, filemodes.py)."""

from __future__ import annotations

import os
import stat

import pytest
import trio

from reckon.daemon.agent.jobenv import BASE_NAMES, base_environment, job_environment
from reckon.daemon.agent.runner import JobRunner
from reckon.daemon.store.filemodes import parse_mode

from tests.daemon.test_runner import HANG, Exits, reaper, sh, spec  # noqa: F401 - reaper is a fixture


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def _run_env(tmp_path, job_env: dict[str, str]) -> dict[str, str]:
    with trio.fail_after(HANG):
        async with JobRunner(tmp_path / "state") as runner:
            job_spec = spec("/usr/bin/env", "-0", env=job_env)
            job_spec = type(job_spec)(name="printenv", command=job_spec.command, env=job_spec.env)
            await runner.start("j7", 2, job_spec)
            status = await Exits(runner).get("j7", 2)
            out = runner.log_paths("j7", 2)[0].read_bytes()
    assert status.exit_code == 0
    return dict(item.split("=", 1) for item in out.decode().split("\0") if item)


async def test_a_job_gets_the_base_its_pairs_and_its_identity_but_never_the_agents_token(tmp_path, monkeypatch):
    token_file = tmp_path / "secret-token-file"
    token_file.write_text("s3cret\n")
    monkeypatch.setenv("RECKON_TOKEN", "s3cret")
    monkeypatch.setenv("RECKON_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("RECKON_CONTROLLER", "ws://example:7420")
    monkeypatch.setenv("SOME_AGENT_ONLY_VAR", "agent")
    monkeypatch.setenv("HOME", "/home/agentuser")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = await _run_env(tmp_path, {"MY_SETTING": "42", "HOME": "/job/home", "RECKON_JOB_ID": "forged",
                                    "RECKON_TOKEN": "passed-on", "RECKON_TOKEN_FILE": "/home/u/.reckon-token"})
    assert env["MY_SETTING"] == "42"
    assert env["HOME"] == "/job/home"  # the job's pairs override the base
    assert env["LC_TIME"] == "C" and env["PATH"] == "/usr/bin:/bin"
    assert env["RECKON_JOB_ID"] == "j7" and env["RECKON_ATTEMPT"] == "2" and env["RECKON_JOB_NAME"] == "printenv"
    for name in ("RECKON_CONTROLLER", "SOME_AGENT_ONLY_VAR"):
        assert name not in env
    # The agent's token and its file never reach a job; the submitter's own pairs do (its choice:
    # a job on a token cluster that calls the controller, as submitit's requeue does).
    assert not any("s3cret" in v or str(token_file) in v for v in env.values())
    assert (env["RECKON_TOKEN"], env["RECKON_TOKEN_FILE"]) == ("passed-on", "/home/u/.reckon-token")
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # given no GPU, it sees none
    allowed = set(BASE_NAMES) | {"MY_SETTING", "RECKON_JOB_ID", "RECKON_ATTEMPT", "RECKON_JOB_NAME",
                                 "CUDA_VISIBLE_DEVICES", "RECKON_TOKEN", "RECKON_TOKEN_FILE"}
    assert {k for k in env if not k.startswith("LC_")} <= allowed


def test_the_base_has_a_path_even_when_the_agent_has_none():
    assert base_environment({"HOME": "/h", "RECKON_TOKEN": "x"}) == {"HOME": "/h", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    env = job_environment(spec("true"), "1", 1, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "RECKON_JOB_ID": "1", "RECKON_ATTEMPT": "1", "RECKON_JOB_NAME": "t",
                   "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("output_mode", [None, 0o640])
async def test_job_files_are_private_unless_configured(tmp_path, output_mode):
    old_umask = os.umask(0o022)  # an ordinary umask: it must not decide these modes
    try:
        kwargs = {} if output_mode is None else {"output_mode": output_mode}
        with trio.fail_after(HANG):
            async with JobRunner(tmp_path / "state", **kwargs) as runner:
                await runner.start("1", 1, sh("echo out; echo err >&2"))
                assert (await Exits(runner).get("1")).exit_code == 0
                stdout, stderr = runner.log_paths("1", 1)
    finally:
        os.umask(old_umask)
    expected = 0o600 if output_mode is None else output_mode
    assert _mode(stdout) == expected and _mode(stderr) == expected
    assert _mode(tmp_path / "state" / "jobs" / "1.1.run") == 0o600
    assert _mode(tmp_path / "state" / "jobs") == 0o700


@pytest.mark.parametrize("text", ["640", "0640", "0o640"])
def test_output_mode_parses_octal(text):
    assert parse_mode(text) == 0o640


@pytest.mark.parametrize("text,why", [("rw", "octal"), ("1777", "range"), ("0440", "owner"), ("0700", "executable")])
def test_output_mode_refuses_bad_values(text, why):
    with pytest.raises(ValueError, match=why):
        parse_mode(text)
