"""daemon/auth/munge.py against a real munged (tests/munged.py): a credential says who made it,
and every refusal is one line of a named kind, through libmunge and through the programs alike."""

from __future__ import annotations

import os
import pwd
import subprocess
import time

import pytest

from reckon.daemon.auth import munge
from reckon.daemon.auth.client import ClientAuth, CredentialError
from reckon.daemon.auth.handshake import caller_for, credential_of
from tests.munged import Munged

CODECS = [(munge.encode, munge.decode), (munge.encode_with_program, munge.decode_with_program)]


def _as(user: str, socket: str) -> str:
    """A credential made by ``user`` (the ``munge`` program run as that user)."""
    return subprocess.run(["runuser", "-u", user, "--", "munge", "--no-input", "--socket", socket],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()


@pytest.mark.parametrize("encode, decode", CODECS, ids=["libmunge", "programs"])
def test_a_credential_names_its_maker_once_and_is_refused_as_replayed_after(munged, encode, decode):
    credential = encode(munged.socket)
    decoded = decode(credential, munged.socket)
    assert (decoded.uid, decoded.gid) == (0, 0)
    with pytest.raises(munge.MungeError) as refused:
        decode(credential, munged.socket)
    assert refused.value.kind == "replayed"
    assert str(refused.value) == "replayed MUNGE credential: a credential is good for one connection only"


def test_another_users_credential_carries_that_uid_and_gid(munged):
    nobody = pwd.getpwnam("nobody")
    decoded = munge.decode(_as("nobody", munged.socket), munged.socket)
    assert (decoded.uid, decoded.gid) == (nobody.pw_uid, nobody.pw_gid)


@pytest.mark.parametrize("decode", [munge.decode, munge.decode_with_program], ids=["libmunge", "programs"])
def test_a_credential_of_another_key_is_invalid(munged, decode):
    with Munged() as other:
        credential = munge.encode(other.socket)
    with pytest.raises(munge.MungeError) as refused:
        decode(credential, munged.socket)
    assert refused.value.kind == "invalid"
    assert "not made with this cluster's key" in str(refused.value)


def test_an_expired_credential_is_refused(munged):
    credential = munge.encode(munged.socket, ttl=1)
    made = time.time()
    # munged counts whole seconds: past encode time + ttl, whatever second the encode fell in.
    time.sleep(max(0.0, made + 2.1 - time.time()))
    with pytest.raises(munge.MungeError) as refused:
        munge.decode(credential, munged.socket)
    assert refused.value.kind == "expired"
    assert str(refused.value).startswith("expired MUNGE credential")


@pytest.mark.parametrize("garbage", ["MUNGE:not-a-credential:", "hello", "é"])
def test_garbage_is_malformed_or_invalid_in_one_line(munged, garbage):
    with pytest.raises(munge.MungeError) as refused:
        munge.decode(garbage, munged.socket)
    assert refused.value.kind in ("malformed", "invalid")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("encode", [munge.encode, munge.encode_with_program], ids=["libmunge", "programs"])
def test_no_munged_is_one_line_naming_the_socket(tmp_path, encode):
    socket = str(tmp_path / "no-munged.socket")
    with pytest.raises(munge.MungeError) as refused:
        encode(socket)
    assert refused.value.kind == "unreachable"
    line = str(refused.value)
    assert line.startswith(f"munged at {socket} cannot be reached") and "\n" not in line, line
    with pytest.raises(CredentialError, match=f"^cannot get a MUNGE credential: munged at {socket} "):
        ClientAuth(mode="munge", munge_socket=socket).headers()


def test_the_client_sends_a_fresh_credential_per_connection_and_the_controller_reads_it(munged):
    auth = ClientAuth(mode="munge", munge_socket=munged.socket)
    first, second = auth.headers(), auth.headers()
    assert first != second
    credential = credential_of(first)
    assert credential and munge.decode(credential, munged.socket).uid == 0
    assert credential_of([(b"Authorization", b"Bearer x")]) == ""
    assert credential_of([]) is None


def test_a_caller_is_named_from_passwd_and_is_an_operator_as_root_or_by_group():
    nobody = pwd.getpwnam("nobody")
    assert caller_for(0, 0, None).operator and caller_for(0, 0, None).user == "root"
    plain = caller_for(nobody.pw_uid, nobody.pw_gid, None)
    assert (plain.user, plain.operator) == ("nobody", False)
    assert caller_for(nobody.pw_uid, nobody.pw_gid, nobody.pw_gid).operator  # primary group
    assert not caller_for(nobody.pw_uid, nobody.pw_gid, nobody.pw_gid + 1).operator
    unknown = caller_for(54321, 54321, None)
    assert (unknown.user, unknown.operator) == ("#54321", False)


@pytest.fixture
def user_in_group():
    """A real user (its own primary group) with a supplementary group of its own, removed after.
    Needs root (useradd): as another user this fails saying so, it does not skip."""
    import grp
    import os

    if os.geteuid() != 0:
        pytest.fail("this test creates a Unix user and group (useradd, groupadd): run it as root")
    suffix = os.getpid() % 100000
    group, user = f"rk20ops{suffix}", f"rk20u{suffix}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        subprocess.run(["useradd", "--no-create-home", "--user-group", "--groups", group, user], check=True,
                       capture_output=True)
        try:
            entry = pwd.getpwnam(user)
            yield entry.pw_uid, entry.pw_gid, grp.getgrnam(group).gr_gid
        finally:
            subprocess.run(["userdel", user], capture_output=True)
    finally:
        subprocess.run(["groupdel", group], capture_output=True)


def test_a_supplementary_member_of_the_operators_group_is_an_operator(user_in_group):
    uid, gid, operators_gid = user_in_group
    assert gid != operators_gid  # a supplementary group, not its primary one
    assert caller_for(uid, gid, operators_gid).operator
    assert not caller_for(uid, gid, None).operator


@pytest.fixture
def non_utf8_user():
    """A real user whose name is not UTF-8 (useradd takes the bytes), removed after.  Needs root."""
    import os

    if os.geteuid() != 0:
        pytest.fail("this test creates a Unix user (useradd): run it as root")
    name = b"rk20\xe9" + str(os.getpid() % 100000).encode()
    subprocess.run([b"useradd", b"--no-create-home", b"--user-group", name], check=True, capture_output=True)
    try:
        yield os.fsdecode(name), pwd.getpwnam(os.fsdecode(name))
    finally:
        subprocess.run([b"userdel", name], capture_output=True)


def test_a_user_whose_name_is_not_utf8_is_refused_in_one_line_at_the_handshake(munged, non_utf8_user):
    import trio

    from reckon.daemon.auth.handshake import Authenticator, UnnamableUser

    name, entry = non_utf8_user
    with pytest.raises(UnnamableUser) as refused:
        caller_for(entry.pw_uid, entry.pw_gid, None)
    line = str(refused.value)
    assert f"uid {entry.pw_uid}" in line and "UTF-8" in line and "\n" not in line, line
    line.encode("utf-8")  # the refusal itself can be sent and logged

    credential = subprocess.run([b"runuser", b"-u", os.fsencode(name), b"--", b"munge", b"--no-input", b"--socket",
                                 munged.socket.encode()], capture_output=True, check=True, timeout=30).stdout
    request = type("Request", (), {"headers": [(b"Authorization", b"MUNGE " + credential.strip())],
                                   "path": "/client"})()
    admission = trio.run(Authenticator("munge", munge_socket=munged.socket).admit, request)
    assert (admission.caller, admission.kind, admission.refused) == (None, "user-name", line)
