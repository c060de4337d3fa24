"""Whom a job runs as on this machine: its owner's account, the checks, and the drop of privileges.

Standard library only: the supervisor (a fork of ``daemon/agent/launcher.py``,
run by path with ``python -I -S``) loads this module by path; the agent imports
it as ``reckon.daemon.agent.users`` for its start-up line.

The owner of a job (``model.resources.Owner``: the uid and primary gid the
controller authenticated at submit) is looked up in *this* machine's account
database (``pwd``): the supervisor runs the job with that uid, that gid, the
groups ``initgroups`` would give (``os.getgrouplist``), and ``HOME``, ``USER``,
``LOGNAME``, ``SHELL`` from the passwd entry.  Before the job starts the
supervisor takes the owner's identity as its *effective* ids (``as_user``) to
open the job's own ``--output``/``--error`` files, enter its cwd and find its
executable, so a directory the owner cannot write or enter is that job's error
(exit 126, or 127 when it does not exist, with the reason in the job's stderr),
never the agent's; the job's child then takes the owner's groups, gid and uid
for good before it execs (``subprocess``'s ``extra_groups``, ``group``, ``user``).

Refusals (the job ends with exit 126 and the line in its stderr): a uid this
machine has no account for; an owner who is root, unless the agent runs with
``--allow-root-jobs``; any owner but the agent's own user when the agent is not
root (it could not change identity).
"""

from __future__ import annotations

import os
import pwd

DEFAULT_UMASK = 0o022


class CannotRunAs(Exception):
    """The job cannot run as its owner here (one line, for the job's stderr)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Account:
    """The owner's account on this machine: what the job runs with."""

    __slots__ = ("uid", "gid", "name", "home", "shell", "groups", "switch")

    def __init__(self, uid: int, gid: int, name: str, home: str, shell: str, groups: list[int], switch: bool):
        self.uid, self.gid, self.name, self.home, self.shell = uid, gid, name, home, shell
        self.groups = groups
        self.switch = switch  # False: the agent already is this user (a non-root agent)

    def environment(self) -> dict[str, str]:
        """The identity variables of a login as this user."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"#{uid}"


def agent_line(allow_root: bool, munge: bool = True) -> str:
    """What the agent says at start about whom it runs jobs as (``munge``: it authenticates with
    MUNGE, so its jobs have owners; else token mode, where they have none)."""
    me = os.geteuid()
    if not munge:
        return (f"token mode: jobs run as the agent's user, {_name_of(me)} (uid {me}); "
                f"a shared cluster runs them as their owners with --auth munge")
    if me != 0:
        return (f"the agent runs as {_name_of(me)} (uid {me}), not root: it runs jobs only as {_name_of(me)} "
                f"and refuses jobs of other users")
    verdict = "are allowed (--allow-root-jobs)" if allow_root else "are refused (no --allow-root-jobs)"
    return f"jobs run as their owners; jobs of root, and jobs without an owner, {verdict}"


def ownerless_refusal() -> str:
    """Why a root agent on a munge cluster refuses a job without an owner (one queued in token
    mode): it would run as root, the agent's own user."""
    return ("the job has no owner (submitted in token mode): this agent would run it as root, "
            "which it does only with --allow-root-jobs")


def account(uid: int, gid: int, user: str, *, allow_root: bool) -> Account:
    """The account a job of owner (uid, gid, user) runs with; CannotRunAs naming why not."""
    me = os.geteuid()
    if uid == 0 and not allow_root:
        raise CannotRunAs(f"the job's owner {user} is root: this agent runs no job as root "
                          f"(its operator may allow it with --allow-root-jobs)")
    if me != 0 and uid != me:
        raise CannotRunAs(f"this agent runs as {_name_of(me)}, not root: it can run jobs only as "
                          f"{_name_of(me)}, not as {user} (uid {uid})")
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise CannotRunAs(f"the job's owner {user} (uid {uid}) has no account on this machine") from None
    if not user.startswith("#") and entry.pw_name != user:
        # Uids differ between the machines (munge vouches for the uid alone): running it would run
        # alice's job as whoever has her uid here.  ("#uid": the controller's machine had no name.)
        raise CannotRunAs(f"the job's owner {user} (uid {uid}) is {entry.pw_name} on this machine: "
                          f"the cluster's machines must agree on user ids")
    if me != 0:  # the agent's own user: it keeps its groups (it could not set others)
        return Account(uid, os.getegid(), entry.pw_name, entry.pw_dir, entry.pw_shell or "/bin/sh",
                       os.getgroups(), switch=False)
    try:
        groups = os.getgrouplist(entry.pw_name, gid)
    except OSError as e:
        raise CannotRunAs(f"cannot read the groups of {entry.pw_name}: {e.strerror or e}") from None
    return Account(uid, gid, entry.pw_name, entry.pw_dir, entry.pw_shell or "/bin/sh", groups, switch=True)


class as_user:
    """Take the account's ids as the supervisor's effective ids for a while (a context manager).

    The real and saved ids stay root's, so the supervisor gets them back at
    the end; in between, every open, chdir and access check is the owner's.
    The supervisor is single-threaded, so no other thread sees the change.
    """

    def __init__(self, acct: Account | None) -> None:
        self.acct = acct if acct is not None and acct.switch else None
        self._groups: list[int] = []
        self._egid = 0

    def __enter__(self) -> "as_user":
        a = self.acct
        if a is not None:
            self._groups = os.getgroups()
            self._egid = os.getegid()
            os.setgroups(a.groups)
            os.setegid(a.gid)
            os.seteuid(a.uid)
        return self

    def __exit__(self, *exc: object) -> bool:
        if self.acct is not None:
            os.seteuid(0)  # first: only root may set the rest back
            os.setegid(self._egid)
            os.setgroups(self._groups)
        return False
