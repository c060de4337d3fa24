"""Real Unix users and a group for the suite: made with useradd/groupadd, removed at the end.

Names start with ``reckon-test-`` and carry a random tag, so two suites on
one machine (or two modules that each use the fixture) never share or remove
each other's accounts.  Their
homes are in a temporary directory.  The tests that use them need root: as
another user they FAIL saying so, they do not skip (a skipped check is a
check nobody ran).

Use the ``unix_users`` fixture (session-scoped; import it into a test module
or a conftest: ``from tests.unixusers import unix_users  # noqa: F401``).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from reckon.model.resources import Owner

PREFIX = "reckon-test-"


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int
    gid: int  # primary group (the user's own)
    home: Path

    def owner(self) -> Owner:
        return Owner(uid=self.uid, gid=self.gid, user=self.name)


@dataclass(frozen=True)
class UnixUsers:
    alice: UnixUser  # in ``group`` as a supplementary group
    bob: UnixUser
    group: str
    group_gid: int


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.fail(f"{what} needs root (it creates real Unix users and cgroups); run the suite as root",
                    pytrace=False)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def make_users() -> tuple[UnixUsers, "callable"]:
    """Create the users and group; return them and the function that removes them."""
    tag = secrets.token_hex(3)
    group = f"{PREFIX}g{tag}"
    homes = Path(tempfile.mkdtemp(prefix="reckon-test-homes-"))
    os.chmod(homes, 0o755)
    made_users: list[str] = []
    made_group = False

    def remove() -> None:
        for name in made_users:
            subprocess.run(["userdel", "-f", name], capture_output=True)
        if made_group:
            subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)

    try:
        _run("groupadd", group)
        made_group = True
        users = []
        for short, extra in (("a", [group]), ("b", [])):
            name = f"{PREFIX}{short}{tag}"
            home = homes / name
            argv = ["useradd", "--user-group", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh"]
            if extra:
                argv += ["--groups", ",".join(extra)]
            _run(*argv, name)
            made_users.append(name)
            entry = pwd.getpwnam(name)
            users.append(UnixUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=home))
        import grp

        return UnixUsers(alice=users[0], bob=users[1], group=group, group_gid=grp.getgrnam(group).gr_gid), remove
    except BaseException:
        remove()
        raise


@pytest.fixture(scope="session")
def unix_users():
    need_root("this test")
    users, remove = make_users()
    try:
        yield users
    finally:
        remove()
