"""One authorization check for the controller's port: the leading daemon's and the standby's.

The standby (daemon/controller/standby.py ``Front``) used to call the daemon's private method
unbound on itself (``ControllerDaemon._authorized(self, ...)``); both now call
``daemon/auth/token.py``'s ``authorized`` (through ``daemon/auth/handshake.py``), and a standby refuses what the daemon refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reckon.daemon.auth.token import authorized
from reckon.daemon.controller.options import ControllerOptions
from reckon.daemon.controller.standby import Front


@dataclass
class _Remote:
    address: str


@dataclass
class _Request:
    """What the check reads of a trio-websocket request, and what a refusal calls."""

    host: str = "127.0.0.1"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    path: str = "/client"
    rejected: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def remote(self) -> _Remote:
        return _Remote(self.host)

    async def reject(self, status: int, *, body: bytes = b"") -> None:
        self.rejected.append((status, body))

    async def accept(self):  # pragma: no cover - a refused request is never accepted
        raise AssertionError("a refused request was accepted")


def _bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", f"Bearer {token}".encode())]


@pytest.mark.parametrize("token, request_, refused", [
    (None, _Request(), None),
    (None, _Request(host="10.0.0.5"), "no token is configured, so only loopback connections are accepted"),
    (None, _Request(host="not-an-address"), "no token is configured, so only loopback connections are accepted"),
    ("s3cret", _Request(host="10.0.0.5", headers=_bearer("s3cret")), None),
    ("s3cret", _Request(headers=_bearer("wrong")), "bad token"),
    ("s3cret", _Request(), "missing token"),
])
def test_authorized(token, request_, refused):
    assert authorized(token, request_) == refused


@pytest.mark.parametrize("headers, body", [([], b"missing token"), (_bearer("wrong"), b"bad token")])
async def test_a_standby_refuses_what_the_daemon_refuses(tmp_path, headers, body):
    front = Front(ControllerOptions(host="127.0.0.1", port=0, state_dir=tmp_path, token="s3cret"))
    request = _Request(host="10.0.0.5", headers=headers)
    await front.handle_request(request)  # type: ignore[arg-type]
    assert request.rejected == [(401, body)]


async def test_a_standby_in_munge_mode_refuses_a_replayed_credential_and_an_unprivileged_agent(tmp_path, munged):
    """The standby checks credentials as the leader does (daemon/auth/handshake.py), munged and all."""
    import subprocess

    from reckon.daemon.auth import munge

    front = Front(ControllerOptions(host="127.0.0.1", port=0, state_dir=tmp_path, auth="munge",
                                    munge_socket=munged.socket))
    credential = munge.encode(munged.socket)
    munge.decode(credential, munged.socket)  # used once already
    request = _Request(headers=[(b"Authorization", f"MUNGE {credential}".encode())])
    await front.handle_request(request)  # type: ignore[arg-type]
    assert request.rejected == [(401, b"replayed MUNGE credential: a credential is good for one connection only")]

    nobody = subprocess.run(["runuser", "-u", "nobody", "--", "munge", "-n", "-S", munged.socket],
                            capture_output=True, text=True, check=True).stdout.strip()
    request = _Request(path="/agent", headers=[(b"Authorization", f"MUNGE {nobody}".encode())])
    await front.handle_request(request)  # type: ignore[arg-type]
    [(status, body)] = request.rejected
    assert status == 401 and body.startswith(b"an agent must authenticate as root: uid 65534 (nobody)")

    request = _Request(headers=_bearer("s3cret"))  # a token is no credential here
    await front.handle_request(request)  # type: ignore[arg-type]
    [(status, body)] = request.rejected
    assert status == 401 and b"this controller authenticates with MUNGE" in body
