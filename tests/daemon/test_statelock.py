import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from reckon.daemon.cli.main import main
from reckon.daemon.store.statelock import StateDirBusy, StateDirUnusable, hold_state_dir


def test_second_holder_is_refused_with_the_pid(tmp_path):
    with hold_state_dir(tmp_path, "controller"):
        with pytest.raises(StateDirBusy, match=rf"in use by another controller \(pid {os.getpid()}\)"):
            with hold_state_dir(tmp_path, "controller"):
                pass
    with hold_state_dir(tmp_path, "controller"):  # released on exit
        pass


def test_lock_dies_with_a_killed_process(tmp_path):
    code = ("import sys, time; sys.path.insert(0, %r); from pathlib import Path;"
            "from reckon.daemon.store.statelock import hold_state_dir\n"
            "with hold_state_dir(Path(%r), 'agent'):\n    print('held', flush=True); time.sleep(60)") % (
        os.getcwd(), str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"held\n"
        with pytest.raises(StateDirBusy, match=str(child.pid)):
            with hold_state_dir(tmp_path, "agent"):
                pass
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with hold_state_dir(tmp_path, "agent"):  # SIGKILL left no stale lock
        pass


# ---- a state directory that cannot be created or written: one line naming it, nothing created ----


def _unusable(state_dir, what="agent") -> str:
    before = _tree(state_dir)
    with pytest.raises(StateDirUnusable) as refused:
        with hold_state_dir(state_dir, what):
            pass
    assert _tree(state_dir) == before, "a refused state directory left something behind"
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{what} state directory {state_dir}: "), message
    return message


def _tree(state_dir):
    """The nearest existing ancestor of ``state_dir`` (or itself), and what ``state_dir`` holds."""
    top = next(p for p in (state_dir, *state_dir.parents) if p.exists())
    return top, sorted(os.listdir(state_dir)) if state_dir.is_dir() else None


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    assert _unusable(tmp_path / "file").endswith(f"{tmp_path / 'file'} is a file, not a directory")
    assert _unusable(tmp_path / "file" / "a" / "b").endswith(f"{tmp_path / 'file'} is a file, not a directory")


def test_a_directory_that_cannot_be_created_or_written_is_refused(tmp_path):
    assert "cannot create it: no such file or directory" in _unusable(Path("/proc/reckon-test/x"), "controller")
    (tmp_path / "state" / "lock").mkdir(parents=True)  # the lock cannot be opened for writing
    assert "cannot write in it: is a directory" in _unusable(tmp_path / "state")


def test_what_a_refused_start_created_is_removed(tmp_path, monkeypatch):
    def no_lock(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "new" / "deeper" / "lock"))

    monkeypatch.setattr(os, "open", no_lock)
    assert "cannot write in it: permission denied" in _unusable(tmp_path / "new" / "deeper")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def open_dir():
    """A root-owned directory other users may enter and read, not write (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="reckon-statelock-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs the daemons as another user (nobody) with setpriv: needs root")
@pytest.mark.parametrize("daemon", ["controller", "agent"])
def test_a_daemon_refused_its_state_directory_says_so_in_one_line_with_status_2(open_dir, daemon):
    """As a user the directory is not open to: the real command, no traceback, nothing created."""
    tmp_path = open_dir
    theirs = tmp_path / "root-owned"
    theirs.mkdir()
    argv = {"controller": ["controller", "--listen", "127.0.0.1:0"],
            "agent": ["agent", "--name", "a1", "--slots", "1", "--controller", "ws://127.0.0.1:1"]}[daemon]
    cases = [(tmp_path / "new" / "dir", f"cannot create it: permission denied ({tmp_path / 'new'})"),
             (theirs, "cannot make it the {}'s own (mode 0700): operation not permitted (it belongs to uid 0")]
    for state_dir, expected in cases:
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 sys.executable, "-m", "reckon.daemon.cli", *argv, "--state-dir", str(state_dir)],
                                capture_output=True, text=True, timeout=60, cwd="/")
        assert result.returncode == 2, result
        assert result.stderr.startswith(f"reckon: {daemon} state directory {state_dir}: {expected.format(daemon)}"), \
            result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root-owned"]
    assert list(theirs.iterdir()) == []


@pytest.fixture
def restored_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # a daemon command sets up logging: undone after
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("argv", [["controller", "--listen", "127.0.0.1:0"],
                                  ["agent", "--name", "a1", "--slots", "1", "--controller", "ws://127.0.0.1:1"]])
def test_the_daemon_commands_exit_2_with_the_line(tmp_path, capsys, restored_logging, argv):
    (tmp_path / "file").write_text("")
    assert main([*argv, "--state-dir", str(tmp_path / "file" / "state")]) == 2
    err = capsys.readouterr().err
    assert err == (f"reckon: {argv[0]} state directory {tmp_path / 'file' / 'state'}: "
                   f"{tmp_path / 'file'} is a file, not a directory\n"), err
