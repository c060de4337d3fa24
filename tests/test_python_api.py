"""`import reckon` (docs/python-api.md): the parts that need no cluster, and its type hints.

Against a real controller and agent: tests/e2e/test_python_api.py (the e2e fixtures live there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import reckon
from reckon.daemon import client_common

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch):
    for name in ("RECKON_CONTROLLER", "RECKON_TOKEN", "RECKON_TOKEN_FILE", "RECKON_AUTH", "RECKON_CA"):
        monkeypatch.delenv(name, raising=False)


def test_the_errors_are_the_command_lines_own_classes():
    assert reckon.ReckonError is client_common.ClientError
    assert reckon.UsageError is client_common.UsageError
    assert issubclass(reckon.Refused, reckon.ReckonError) and issubclass(reckon.Unreachable, reckon.ReckonError)
    assert isinstance(client_common.unreachable("ws://x:1", "refused"), reckon.Unreachable)
    with pytest.raises(reckon.Refused, match="unknown job"):
        client_common.reply_of(client_common.request_bytes("x", {"ok": False, "error": "unknown job '9'"}), "ws://x:1")
    assert sorted(reckon.__all__) == sorted({*reckon.__all__} & set(dir(reckon)))
    with pytest.raises(AttributeError):
        reckon.Nothing  # noqa: B018


def test_settings_resolve_as_the_command_line_resolves_them(monkeypatch, tmp_path):
    assert reckon.Client().controller == "ws://127.0.0.1:7420"
    monkeypatch.setenv("RECKON_CONTROLLER", "ws://a:1,ws://b:2")
    assert reckon.Client().controller == "ws://a:1,ws://b:2"
    assert reckon.Client("ws://c:3").controller == "ws://c:3"
    with pytest.raises(reckon.UsageError, match="must start with ws://"):
        reckon.Client("http://c:3")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert reckon.Client(token_file=str(token))._auth.token == "s3cret"
    assert reckon.Client(token="given")._auth.token == "given"
    with pytest.raises(reckon.UsageError, match="token is for auth='token'"):
        reckon.Client(token="given", auth="munge")
    with pytest.raises(reckon.ReckonError, match="cannot read token file"):
        reckon.Client(token_file=str(tmp_path / "none"))


def test_a_spec_is_the_wire_dict_and_its_cheap_checks_are_usage_errors(tmp_path):
    c = reckon.Client()
    job = reckon.Job({"id": "3", "state": "COMPLETED"})
    spec = c.spec(["./run", "x"], cwd=str(tmp_path), mem="2G", time_limit="1m30s", env={"A": "1"}, after=[job, "4"])
    assert spec == {"name": "run", "command": ["./run", "x"], "cwd": str(tmp_path), "env": [["A", "1"]], "slots": 1,
                    "time_limit": 90.0, "after": ["3", "4"], "mem": 2 << 30}
    assert c.spec(["true"])["cwd"] == os.getcwd()
    with pytest.raises(reckon.UsageError, match="not a string"):
        c.spec("echo hi")  # type: ignore[arg-type]
    with pytest.raises(reckon.UsageError, match="invalid job: bad size 'lots'"):
        c.spec(["true"], mem="lots")
    with pytest.raises(reckon.UsageError, match="bad time_limit"):
        c.spec(["true"], time_limit="soon")
    with pytest.raises(reckon.UsageError, match="invalid array"):
        c.submit_array(["true"], "5-1")


def test_a_job_is_a_read_only_typed_snapshot():
    data = {"id": "7", "name": "train", "state": "FAILED", "exit_code": 3, "attempt": 2, "cpus": 4, "held": False,
            "command": ["python", "t.py"], "new_field": 1}
    job = reckon.Job(data)
    assert (job.id, job.name, job.state, job.exit_code, job.attempt, job.cpus, job.done, job.ok) == (
        "7", "train", "FAILED", 3, 2, 4, True, False)
    assert job.get("new_field") == 1 and job.to_dict() == data and job == reckon.Job(dict(data))
    with pytest.raises(AttributeError, match="read-only"):
        job.state = "COMPLETED"  # type: ignore[misc]
    data["state"] = "RUNNING"
    assert job.state == "FAILED"  # a copy: the dict it came from may change
    assert "Job(id='7'" in repr(job)
    with pytest.raises(ValueError):
        reckon.Job({"state": "PENDING"})


def test_unreachable_and_wait_timeouts_are_said():
    c = reckon.Client("ws://127.0.0.1:1", timeout=2)
    with pytest.raises(reckon.Unreachable, match="controller unreachable at ws://127.0.0.1:1"):
        c.jobs()
    with pytest.raises(TimeoutError, match="not ended within"):  # unreachable throughout: it kept looking
        c.wait("1", timeout=0.2)


def _source_tree(tmp_path: Path) -> Path:
    """The installed package's layout (reckon/, reckon/daemon, reckon/model) as symlinks: mypy
    does not follow an editable install's import hook."""
    tree = tmp_path / "src" / "reckon"
    tree.mkdir(parents=True)
    for item in (ROOT / "reckon").iterdir():
        if item.suffix in (".py", ".pyi", ".typed"):
            (tree / item.name).symlink_to(item)
    (tree / "daemon").symlink_to(ROOT / "daemon")
    (tree / "model").symlink_to(ROOT / "model")
    return tree.parent


USE = """
import reckon

client = reckon.Client("ws://127.0.0.1:1", timeout=1.0)
job: reckon.Job = client.submit(["true"], cpus=2, mem="1G", time_limit="10m", env={"A": "1"})
code: int | None = client.wait(job, timeout=5.0).exit_code
jobs: list[reckon.Job] = client.submit_many([["true"], {"command": ["false"]}])
data: bytes = client.logs(job.id, "stderr")
state: str = client.job(job).state
try:
    client.cancel(job)
except reckon.Refused as exc:
    print(exc)
"""

MISUSE = """
import reckon

job = reckon.Client().job("1")
n: int = job.name
reckon.Client().submit(["true"], cpus="2")
"""


@pytest.mark.long
def test_the_type_hints_check_with_mypy(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    src = _source_tree(tmp_path)
    (tmp_path / "use.py").write_text(USE)
    (tmp_path / "misuse.py").write_text(MISUSE)

    def mypy(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                               str(tmp_path / name)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "MYPYPATH": str(src)})

    good = mypy("use.py")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy("misuse.py")
    assert bad.returncode == 1 and bad.stdout.count("error:") == 2, bad.stdout
