import os
import signal
import subprocess
import sys

import pytest

from reckon.daemon.store.statelock import StateDirBusy, hold_state_dir


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
