"""MUNGE end to end: real munged (tests/munged.py), real daemons and CLI over real WebSockets.

Who made a credential reaches the controller (``whoami``: the caller it takes the connection
for); a replayed, expired or wrong-key credential is refused with one line (HTTP 401), logged
once per kind; an agent must be root or the service user; munged down is one line at the CLI and
at the controller's start.  Credentials of other uids are made by the ``munge`` program run as
that uid (``runuser``, ``setpriv``), as another user's shell would make them.
"""

from __future__ import annotations

import pwd
import subprocess
import time

import pytest

from reckon.daemon.auth import munge
from reckon.daemon.auth.client import ClientAuth
from reckon.daemon.blocking import websocket as ws
from reckon.daemon.blocking.client import SyncClient
from reckon.daemon.client_common import ClientError
from tests.munged import Munged

pytestmark = pytest.mark.e2e


def _munge_as(socket: str, *run_as: str) -> str:
    return subprocess.run([*run_as, "munge", "--no-input", "--socket", socket], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def as_user(socket: str, user: str) -> ClientAuth:
    return ClientAuth(mode="munge", encode=lambda: _munge_as(socket, "runuser", "-u", user, "--"))


def as_uid(socket: str, uid: int) -> ClientAuth:
    """A uid with no passwd entry (setpriv sets it without a lookup)."""
    return ClientAuth(mode="munge", encode=lambda: _munge_as(
        socket, "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"))


def handshake(cluster, path: str, credential: str) -> tuple[int, str]:
    """A raw WebSocket handshake with ``Authorization: MUNGE <credential>``: (101, "") or the refusal."""
    sock = ws.connect("127.0.0.1", cluster.port, timeout=10)
    conn = ws.WebSocket(sock)
    try:
        conn.handshake(f"127.0.0.1:{cluster.port}", path, [(b"authorization", f"MUNGE {credential}".encode())],
                       time.monotonic() + 10)
        return 101, ""
    except ws.WebSocketRejected as exc:
        return exc.status, exc.body.decode()
    finally:
        conn.abort()


def whoami(cluster, auth: ClientAuth) -> dict:
    with SyncClient(cluster.url, auth, timeout=10) as client:
        return client.call("whoami")


def refusals_logged(cluster, words: str) -> list[str]:
    return [ln for ln in cluster.log_text("controller").splitlines() if "refused connections" in ln and words in ln]


@pytest.fixture
def munge_cluster(cluster, munged):
    cluster.use_munge(munged.socket)
    cluster.start_controller("--operators-group", "nogroup")
    return cluster


def test_a_munge_cluster_runs_jobs_and_knows_each_callers_uid(munge_cluster, munged):
    cluster = munge_cluster
    assert f"auth: munge, credentials decoded by munged at {munged.socket}" in cluster.log_text("controller")
    cluster.start_agent("a1", "--allow-root-jobs")  # as root: accepted; root's own job runs as root
    job = cluster.submit("/bin/sh", "-c", "echo via-munge")
    assert cluster.wait_job(job)["state"] == "COMPLETED"

    root = whoami(cluster, ClientAuth(mode="munge", munge_socket=munged.socket))
    assert root == {"ok": True, "auth": "munge", "caller": {"uid": 0, "gid": 0, "user": "root", "operator": True}}
    assert cluster.cli("whoami") == "root (uid 0, gid 0), an operator: authenticated by munge\n"
    assert cluster.cli_json("whoami")["caller"]["uid"] == 0
    nobody = pwd.getpwnam("nobody")
    assert whoami(cluster, as_user(munged.socket, "nobody"))["caller"] == {
        "uid": nobody.pw_uid, "gid": nobody.pw_gid, "user": "nobody", "operator": True}  # nogroup: the operators'
    assert whoami(cluster, as_uid(munged.socket, 54321))["caller"] == {
        "uid": 54321, "gid": 54321, "user": "#54321", "operator": False}


def test_replayed_expired_and_wrong_key_credentials_are_refused_in_one_line_logged_once(munge_cluster, munged):
    cluster = munge_cluster
    credential = munge.encode(munged.socket)
    assert handshake(cluster, "/client", credential) == (101, "")
    for _ in range(3):
        assert handshake(cluster, "/client", credential) == (
            401, "replayed MUNGE credential: a credential is good for one connection only")
    cluster.wait_for(lambda: refusals_logged(cluster, "replayed"), what="the replay's log line")

    with Munged() as other:
        foreign = munge.encode(other.socket)
    status, body = handshake(cluster, "/client", foreign)
    assert status == 401 and body.startswith("invalid MUNGE credential: not made with this cluster's key"), body

    made = time.time()
    short = munge.encode(munged.socket, ttl=1)
    time.sleep(max(0.0, made + 2.1 - time.time()))  # munged counts whole seconds from the encode
    status, body = handshake(cluster, "/client", short)
    assert status == 401 and body.startswith("expired MUNGE credential"), body

    status, body = handshake(cluster, "/client", "garbage")
    assert status == 401 and "MUNGE credential" in body and "\n" not in body, body
    # A token, or nothing, is no credential on a munge cluster.
    result = cluster.run("jobs", token="some-token")
    assert result.returncode == 0  # RECKON_AUTH=munge: the CLI sends a credential and no token
    sock = ws.connect("127.0.0.1", cluster.port, timeout=10)
    conn = ws.WebSocket(sock)
    with pytest.raises(ws.WebSocketRejected) as bearer:
        conn.handshake(f"127.0.0.1:{cluster.port}", "/client", [(b"authorization", b"Bearer some-token")],
                       time.monotonic() + 10)
    conn.abort()
    assert bearer.value.status == 401 and b"this controller authenticates with MUNGE" in bearer.value.body

    cluster.wait_for(lambda: refusals_logged(cluster, "invalid") and refusals_logged(cluster, "expired"),
                     what="the refusals' log lines")
    assert len(refusals_logged(cluster, "replayed")) == 1  # three refusals, one line: once per kind


def test_an_agent_must_authenticate_as_root_or_the_service_user(cluster, munged):
    cluster.use_munge(munged.socket)
    cluster.start_controller()
    status, body = handshake(cluster, "/agent", _munge_as(munged.socket, "runuser", "-u", "nobody", "--"))
    assert status == 401 and body.startswith("an agent must authenticate as root: uid 65534 (nobody) may not"), body
    # The same uid as a client is fine.
    assert handshake(cluster, "/client", _munge_as(munged.socket, "runuser", "-u", "nobody", "--")) == (101, "")
    cluster.stop("controller")
    cluster.start_controller("--agent-user", "nobody")
    assert handshake(cluster, "/agent", _munge_as(munged.socket, "runuser", "-u", "nobody", "--"))[0] == 101
    assert handshake(cluster, "/agent", _munge_as(munged.socket, "setpriv", "--reuid=54321", "--regid=54321",
                                                  "--clear-groups", "--"))[0] == 401


def test_munged_down_is_one_line_at_the_cli_and_at_the_controllers_start(cluster, munged, tmp_path):
    gone = str(tmp_path / "gone.socket")
    cluster.use_munge(munged.socket)
    cluster.start_controller()
    cluster.auth_env["RECKON_MUNGE_SOCKET"] = gone
    reason = cluster.one_line_reason(cluster.run("jobs"))
    assert reason.startswith(f"reckon: cannot get a MUNGE credential: munged at {gone} cannot be reached"), reason
    with pytest.raises(ClientError, match="^cannot get a MUNGE credential: munged at"):
        whoami(cluster, ClientAuth(mode="munge", munge_socket=gone))

    cluster.stop("controller")
    argv = ["controller", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "c2"), "--auth", "munge",
            "--munge-socket", gone]
    result = subprocess.run([*_reckon(), *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env=_env())
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"reckon: munged at {gone} cannot be reached (is munged running there?"), lines


def test_token_mode_says_at_start_it_is_a_single_user_cluster(cluster):
    cluster.start_controller()
    line = next(ln for ln in cluster.log_text("controller").splitlines() if "auth:" in ln)
    assert line.endswith("auth: token mode (loopback connections only): a single-user cluster; every caller is "
                         "treated as an operator and jobs run as the agent's user"), line
    result = subprocess.run([*_reckon(), "jobs", "--auth", "token"], capture_output=True, text=True, timeout=60,
                            env=_env(RECKON_CONTROLLER=cluster.url))
    assert result.returncode == 0, result.stderr
    with SyncClient(cluster.url, None, timeout=10) as client:
        assert client.call("whoami") == {"ok": True, "auth": "token", "caller": None}
    assert cluster.cli("whoami") == ("token mode: a single-user cluster, every caller is an operator and jobs "
                                     "run as the agent's user\n")


def _reckon() -> list[str]:
    from tests.e2e.conftest import reckon_argv

    return reckon_argv()


def _env(**extra: str) -> dict[str, str]:
    from tests.e2e.conftest import hermetic_env

    return hermetic_env(**extra)


def test_munge_over_tls_runs_a_job_and_a_refusal_still_reads_in_one_line(cluster, munged, tmp_path):
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key, chain, ca_file = tmp_path / "key.pem", tmp_path / "cert.pem", tmp_path / "ca.pem"
    cert.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(ca_file))
    cluster.use_munge(munged.socket)
    cluster.use_tls(chain, key, ca_file)
    cluster.start_controller()
    assert cluster.url.startswith("wss://")
    cluster.start_agent("a1", "--allow-root-jobs")  # root's own job runs as root
    job = cluster.submit("/bin/sh", "-c", "echo munge-over-tls")
    assert cluster.wait_job(job)["state"] == "COMPLETED"

    with Munged() as other:  # the CLI on a machine with another cluster's key
        cluster.auth_env["RECKON_MUNGE_SOCKET"] = other.socket
        reason = cluster.one_line_reason(cluster.run("jobs"))
    assert reason.startswith(f"reckon: controller at {cluster.url} refused the connection: invalid MUNGE "
                             "credential: not made with this cluster's key"), reason


def test_an_agent_whose_munged_is_down_does_not_start_and_says_so_in_one_line(cluster, munged, tmp_path):
    cluster.use_munge(munged.socket)
    cluster.start_controller()
    gone = str(tmp_path / "gone.socket")
    argv = ["agent", "--name", "a1", "--slots", "1", "--state-dir", str(tmp_path / "a1"), "--controller",
            cluster.url, "--auth", "munge", "--munge-socket", gone]
    result = subprocess.run([*_reckon(), *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env())
    assert result.returncode == 1 and result.stdout == "", result
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"reckon: cannot get a MUNGE credential: munged at {gone} cannot be reached"), last
