"""The controller's check of a WebSocket handshake: who is calling, in either mode.

Munge mode (``--auth munge``): the peer sends ``Authorization: MUNGE <credential>``, one fresh
credential per connection; the controller's own munged decodes it (on a worker thread: decoding
waits on munged, the core loop must not) into the uid and gid that made it.  A client becomes a
``Caller`` (its name from this machine's passwd, ``#uid`` when it has none; an operator when it is
root or in the operators' group, primary or supplementary); an agent is accepted only from root
or the configured service user.  Token mode (``--auth token``): today's shared token or loopback
check (daemon/auth/token.py), and no caller: everyone may do everything.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
from dataclasses import dataclass
from typing import Any

import trio

from reckon.model.permissions import Caller

from reckon.daemon.auth import munge, token as token_auth

log = logging.getLogger("reckon.controller")

AUTH_MODES = ("token", "munge")
SCHEME = "MUNGE"  # Authorization: MUNGE <credential>


class AuthConfigError(Exception):
    """The authentication options cannot work (an unknown group or user, munge with a token): one line."""


class UnnamableUser(Exception):
    """The caller's account has a name that is not UTF-8 (useradd takes any bytes): every job,
    fact and reply names its owner in UTF-8, so such a caller is refused at the handshake."""

    kind = "user-name"


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """The handshake's outcome: ``refused`` is the one-line reason (HTTP 401) and ``kind`` the
    condition it is logged under; else ``caller`` (None in token mode)."""

    caller: Caller | None = None
    refused: str | None = None
    kind: str = ""


def credential_of(headers: Any) -> str | None:
    """The MUNGE credential of an ``Authorization: MUNGE ...`` header; "" for another scheme; None without one."""
    for key, value in headers:
        if key.lower() == b"authorization":
            scheme, _, rest = value.decode("latin-1").strip().partition(" ")
            return rest.strip() if scheme.upper() == SCHEME else ""
    return None


def user_name(uid: int) -> str:
    """The user's name on this machine, ``#uid`` when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"#{uid}"


class Authenticator:
    """The controller's (and the standby's) one check of a handshake, built from its options."""

    def __init__(self, mode: str = "token", *, token: str | None = None, munge_socket: str | None = None,
                 operators_group: str | None = None, agent_user: str | None = None) -> None:
        if mode not in AUTH_MODES:
            raise AuthConfigError(f"--auth must be one of {', '.join(AUTH_MODES)}, got {mode!r}")
        if mode == "munge" and token is not None:
            raise AuthConfigError("--auth munge needs no token: drop --token-file and $RECKON_TOKEN(_FILE) "
                                  "(every client and agent sends a MUNGE credential instead)")
        if mode == "token" and (operators_group or agent_user):
            raise AuthConfigError("--operators-group and --agent-user go with --auth munge "
                                  "(in token mode every caller is an operator)")
        self.mode = mode
        self.token = token
        self.socket = munge.resolve_socket(munge_socket)
        self.operators_group = operators_group
        self.operators_gid: int | None = None
        if operators_group is not None:
            try:
                self.operators_gid = grp.getgrnam(operators_group).gr_gid
            except KeyError:
                raise AuthConfigError(f"--operators-group {operators_group}: no such group on this machine") from None
        self.agent_user = agent_user
        self.agent_uids = {0}
        if agent_user is not None:
            try:
                self.agent_uids.add(pwd.getpwnam(agent_user).pw_uid)
            except KeyError:
                raise AuthConfigError(f"--agent-user {agent_user}: no such user on this machine") from None

    @classmethod
    def from_options(cls, options: Any) -> "Authenticator":
        return cls(options.auth, token=options.token, munge_socket=options.munge_socket,
                   operators_group=options.operators_group, agent_user=options.agent_user)

    def startup_line(self) -> str:
        """What the controller says at start about who may connect (one line)."""
        if self.mode == "token":
            how = "a shared token" if self.token is not None else "loopback connections only"
            return (f"auth: token mode ({how}): a single-user cluster; every caller is treated as an operator "
                    "and jobs run as the agent's user")
        operators = "root" + (f" and group {self.operators_group}" if self.operators_group else "")
        agents = "root" + (f" or user {self.agent_user}" if self.agent_user else "")
        return f"auth: munge, credentials decoded by munged at {self.socket}; operators: {operators}; agents: {agents}"

    async def check_munged(self) -> None:
        """Munge mode: one credential made and decoded through our munged, or ``MungeError`` (one line)."""
        if self.mode == "munge":
            await trio.to_thread.run_sync(lambda: munge.decode(munge.encode(self.socket), self.socket))

    async def admit(self, request: Any) -> Admission:
        """Who the handshake ``request`` (path ``/agent`` or ``/client``) comes from, or why it is refused."""
        if self.mode == "token":
            refused = token_auth.authorized(self.token, request)
            return Admission(refused=refused, kind=refused or "")
        credential = credential_of(request.headers)
        if not credential:
            what = "missing" if credential is None else "not a MUNGE credential in the Authorization header"
            return Admission(refused=f"{what}: this controller authenticates with MUNGE "
                                     "(the client needs --auth munge and a munged on its machine)", kind="missing")
        try:
            caller = await trio.to_thread.run_sync(self._caller, credential)
        except (munge.MungeError, UnnamableUser) as exc:
            return Admission(refused=str(exc), kind=exc.kind)
        if request.path.startswith("/agent") and caller.uid not in self.agent_uids:
            allowed = "root" + (f" or {self.agent_user}" if self.agent_user else "")
            return Admission(refused=f"an agent must authenticate as {allowed}: uid {caller.uid} ({caller.user}) "
                                     "may not (is the agent running as its service user? --agent-user names it)",
                             kind="agent-user")
        return Admission(caller=caller)

    def _caller(self, credential: str) -> Caller:
        """Decode (waits on munged) and look the uid up (may wait on NSS): on a worker thread."""
        decoded = munge.decode(credential, self.socket)
        return caller_for(decoded.uid, decoded.gid, self.operators_gid)


def caller_for(uid: int, gid: int, operators_gid: int | None) -> Caller:
    """The caller of a decoded credential: its name on this machine, and whether it is an operator."""
    user = user_name(uid)
    try:
        user.encode("utf-8")
    except UnicodeEncodeError:  # pwd decodes the name's bytes with surrogateescape
        raise UnnamableUser(f"uid {uid}'s user name {os.fsencode(user)!r} is not UTF-8: reckon names every job's "
                            "owner in UTF-8 and takes no request from this account (rename it)") from None
    groups = {gid}
    if not user.startswith("#"):
        groups.update(os.getgrouplist(user, gid))
    operator = uid == 0 or (operators_gid is not None and operators_gid in groups)
    # Group names, for partitions' allow_groups (model/partitions.py); a gid without a name is left out.
    return Caller(uid=uid, gid=gid, user=user, operator=operator, groups=tuple(sorted(_group_names(groups))))


def _group_names(gids: set[int]) -> set[str]:
    names = set()
    for gid in gids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            pass
    return names
