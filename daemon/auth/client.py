"""What a client (the CLI, the trio client, the agent) sends in its WebSocket handshake.

Munge mode: one fresh credential per connection from this machine's munged, as Slurm sends one
per RPC (a credential is single-use: the controller's munged refuses it twice).  Token mode: the
shared token, or nothing (loopback).  Light to import: the CLI pays it on every command.
"""

from __future__ import annotations

import os

from reckon.daemon.auth import munge

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a CLI call's import; mypy knows the name)
if TYPE_CHECKING:
    from typing import Callable

AUTH_ENV = "RECKON_AUTH"
AUTH_MODES = ("token", "munge")


class CredentialError(Exception):
    """No credential could be had (munged down or missing): one line for the user."""


class ClientAuth:
    """How a client proves who it is.  ``encode`` replaces libmunge's (tests make a credential as
    another user with the ``munge`` program run as that user).  A plain class: dataclasses would
    cost every CLI command its import."""

    __slots__ = ("mode", "token", "munge_socket", "encode")

    def __init__(self, mode: str = "token", token: str | None = None, munge_socket: str | None = None,
                 encode: Callable[[], str] | None = None) -> None:
        if mode not in AUTH_MODES:
            raise ValueError(f"--auth must be one of {', '.join(AUTH_MODES)}, got {mode!r}")
        self.mode, self.token, self.munge_socket, self.encode = mode, token, munge_socket, encode

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The handshake's headers: in munge mode a fresh credential (blocks on munged, about 0.1 ms)."""
        if self.mode == "munge":
            try:
                credential = self.encode() if self.encode is not None else munge.encode(self.munge_socket)
            except munge.MungeError as exc:
                raise CredentialError(f"cannot get a MUNGE credential: {exc}") from None
            return [(b"authorization", f"MUNGE {credential}".encode())]
        return [(b"authorization", f"Bearer {self.token}".encode())] if self.token else []


def auth_of(value: "ClientAuth | str | None") -> ClientAuth:
    """A client's ``auth`` argument: a ``ClientAuth``, or a token (None: none) as before munge."""
    return value if isinstance(value, ClientAuth) else ClientAuth(token=value)


def resolve_mode(mode: str | None) -> str:
    """--auth, else $RECKON_AUTH, else token."""
    return mode or os.environ.get(AUTH_ENV) or "token"
