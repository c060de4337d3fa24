"""Which machine an agent's state directory belongs to.

A copy of a state directory (copied to another machine, or a VM cloned after
the agent ran there) is the same agent identity.  Started while the original
is away, it would join as a restart of the original, find none of the
original's processes on its own machine and call their jobs lost: they would
run again while the original still runs them.  So the directory records the
machine it was made on (``/etc/machine-id``, as systemd keeps it; a cloned
image is expected to get a new one), and an agent refuses to start on a
directory of another machine (``CopiedStateDir``).  A real move is the
operator's word: ``--moved-from OLD_ID`` (it must name the recorded machine,
so that a flag left in a unit file cannot silence later checks).

Light on purpose (no trio, no sqlite): the CLI's argument checks use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from reckon.daemon.store.statelock import WrongStateDir

# Where systemd (and, on older systems, D-Bus) keep the machine's id; the first usable one counts.
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
# systemd's id is 32 hex digits; --machine-id-file may name any stable token: printable, no spaces.
MACHINE_ID = re.compile(r"[!-~]{1,128}")
MACHINE_ID_RULE = "1 to 128 printable characters without spaces (systemd's are 32 hex digits)"
# What systemd writes while the first boot has not committed an id yet: not an id.
_UNINITIALIZED = "uninitialized"


class CopiedStateDir(WrongStateDir):
    """The state directory belongs to another machine (or ``--moved-from`` names the wrong one).

    An operator's decision is needed: the CLI exits with status 2 and this one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineId:
    """This machine's id as read at start, or None and why there is none."""

    value: str | None
    source: str  # the file it came from; or, when value is None, why no file gave one


def read_machine_id(files: tuple[Path, ...] = MACHINE_ID_FILES) -> MachineId:
    """The first usable id among ``files`` (stripped); else ``value=None`` and each file's reason."""
    reasons = []
    for path in files:
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            reasons.append(f"{path}: missing")
            continue
        except OSError as exc:
            reasons.append(f"{path}: {exc.strerror or exc}")
            continue
        if not text or text == _UNINITIALIZED:
            reasons.append(f"{path}: {'empty' if not text else 'not initialized yet'}")
        elif not MACHINE_ID.fullmatch(text):
            reasons.append(f"{path}: not a machine id ({MACHINE_ID_RULE})")
        else:
            return MachineId(value=text, source=str(path))
    return MachineId(value=None, source="; ".join(reasons) or "no machine id file given")


def check_moved_from(value: str) -> str:
    """``--moved-from``'s argument, checked (``ValueError`` with the rule)."""
    if not MACHINE_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a machine id: {MACHINE_ID_RULE}")
    return value


class MachineOutcome(Enum):
    SAME = "same"  # the directory belongs to this machine: nothing to do
    RECORDED = "recorded"  # a new directory: this machine recorded with the identity
    UPGRADED = "upgraded"  # a directory from before machine checks: this machine recorded now
    MOVED = "moved"  # --moved-from named the recorded machine: this one recorded instead
    UNCHECKED = "unchecked"  # this machine has no id: no check (a warning at each start)


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineClaim:
    """What ``decide`` found; ``record`` is what the store writes (None: nothing)."""

    outcome: MachineOutcome
    recorded: str | None  # as the directory had it
    machine: MachineId  # this machine
    moved_from: str | None  # as given
    record: str | None

    def log_line(self, state_dir: Path) -> tuple[str, str] | None:
        """(level, message) to log once at start, or None (a quiet, ordinary start)."""
        if self.outcome is MachineOutcome.UNCHECKED:
            return ("warning", f"no machine id ({self.machine.source}): the check that {state_dir} is not a copy of "
                               f"another machine's agent state directory is off")
        if self.outcome is MachineOutcome.MOVED:
            return ("warning", f"state directory {state_dir} moved from machine {self.moved_from} to this machine "
                               f"{self.machine.value} (--moved-from): recorded; jobs it ran there are reported lost. "
                               f"Remove --moved-from now: it is no longer needed")
        if self.outcome is MachineOutcome.UPGRADED:
            return ("info", f"state directory {state_dir} had no machine recorded (made before machine checks): "
                            f"recorded this machine {self.machine.value}")
        if self.moved_from is not None:
            return ("warning", f"--moved-from {self.moved_from} changed nothing: {state_dir} belongs to this machine "
                               f"{self.machine.value}; remove --moved-from")
        return None


def decide(*, state_dir: Path, recorded: str | None, has_identity: bool, machine: MachineId,
           moved_from: str | None) -> MachineClaim:
    """The start's machine check; ``CopiedStateDir`` (nothing to write) when the agent must not start."""
    current = machine.value

    def claim(outcome: MachineOutcome, record: str | None = None) -> MachineClaim:
        return MachineClaim(outcome=outcome, recorded=recorded, machine=machine, moved_from=moved_from,
                            record=record)

    if current is None:
        return claim(MachineOutcome.UNCHECKED)
    if recorded is None:
        return claim(MachineOutcome.UPGRADED if has_identity else MachineOutcome.RECORDED, current)
    if recorded == current:
        return claim(MachineOutcome.SAME)
    if moved_from == recorded:
        return claim(MachineOutcome.MOVED, current)
    if moved_from is not None:
        raise CopiedStateDir(f"--moved-from {moved_from} does not match: state directory {state_dir} belongs to "
                             f"machine {recorded}, this is machine {current}; nothing was changed")
    raise CopiedStateDir(
        f"state directory {state_dir} belongs to machine {recorded}, this is machine {current}: it is a copy of "
        f"another agent's state directory (a copied directory or a cloned VM); a copy runs the original's jobs "
        f"again. Start this agent with an empty --state-dir and its own --name; if the directory was moved here "
        f"and machine {recorded} is gone for good, start once with --moved-from {recorded}")
