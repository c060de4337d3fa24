"""What every client of the controller shares: the blocking CLI client (daemon/blocking/client.py),
the trio client (daemon/client.py) and the agent (daemon/agent/).

The configuration a client resolves (controller URLs, token, CA), the TLS context that checks the
controller's certificate, the error texts (so an error reads the same from every client), and
the search for the leader among several controllers.  Light to import: no trio, no model (a
``reckon submit`` pays its imports on every call).
"""

from __future__ import annotations

import os

from reckon.daemon import cborlite
from reckon.daemon.auth.client import ClientAuth, CredentialError, auth_of, resolve_mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_CONTROLLER = "ws://127.0.0.1:7420"
EACH_CONNECT_TIMEOUT = 3.0  # seconds per controller when several are listed (one may be frozen)


class ClientError(Exception):
    """A one-line reason for the user: unreachable, refused, unknown job, ... (exit status 1)."""


class UsageError(ClientError):
    """The user asked for something that cannot work as written: a bad URL, a bad file (exit status 2)."""


class Unreachable(ClientError):
    """No controller could be reached, or the one asked stopped answering (a restart, a failover, a
    network fault): the request may or may not have been acted on if it was sent (exit status 1)."""


class Refused(ClientError):
    """The controller answered and refused: the request's one-line reason, or the connection's
    (a bad token, a credential refused); nothing was done (exit status 1)."""


# ---- configuration ----------------------------------------------------------------------


def resolve_controller(url: str | None) -> str:
    return url or os.environ.get("RECKON_CONTROLLER") or DEFAULT_CONTROLLER


def resolve_token(token_file: str | None) -> str | None:
    """--token-file, else $RECKON_TOKEN_FILE, else $RECKON_TOKEN, else none."""
    path = token_file or os.environ.get("RECKON_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ClientError(f"cannot read token file {path}: {exc.strerror}") from None
        if not token:
            raise ClientError(f"token file {path} is empty")
        return token
    return os.environ.get("RECKON_TOKEN") or None


def resolve_auth(mode: str | None, munge_socket: str | None, token_file: str | None) -> ClientAuth:
    """How this client proves who it is: --auth (else $RECKON_AUTH, else token); in munge mode a
    credential from the munged at --munge-socket (else $RECKON_MUNGE_SOCKET, else munged's default),
    and no token is read; in token mode the token of ``resolve_token``."""
    mode = resolve_mode(mode)
    if mode == "munge":
        return ClientAuth(mode="munge", munge_socket=munge_socket)
    try:
        return ClientAuth(mode=mode, token=resolve_token(token_file))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_ca(ca: str | os.PathLike | None) -> str | os.PathLike | None:
    """--ca, else $RECKON_CA, else none (the system's trust store)."""
    return ca or os.environ.get("RECKON_CA") or None


def refuse_unused_ca(urls: str, ca: str | os.PathLike | None) -> None:
    """``--ca`` with no wss:// controller URL would go unused: a usage error, as the controller's
    TLS options without TLS are (the environment's $RECKON_CA is not refused: it is ambient)."""
    if ca is not None and not any(url.strip().startswith("wss:") for url in urls.split(",")):
        raise UsageError(f"--ca is for a wss:// controller, and {urls} is not one (no TLS): "
                         "drop --ca or use a wss:// URL")


def client_ssl_context(ca: str | os.PathLike | None = None) -> Any:
    """An ``ssl.SSLContext`` that verifies the controller's certificate and host name against ``ca``
    (a PEM file), else the system's trust store.  ``UsageError`` when ``ca`` cannot be used."""
    import ssl

    try:
        return ssl.create_default_context(cafile=None if ca is None else str(ca))
    except ssl.SSLError as exc:  # before OSError, its base class
        raise UsageError(f"cannot load CA file {ca}: not a PEM certificate ({exc.reason or exc})") from None
    except OSError as exc:
        raise UsageError(f"cannot load CA file {ca}: {exc.strerror or exc}") from None


def tls_failure_text(exc: BaseException, host: str, port: int) -> str | None:
    """What a failed TLS handshake means, in one line; None if ``exc`` is no TLS failure."""
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: the certificate of {host}:{port} is not trusted: {exc.verify_message} "
                "(is --ca the CA that signed the controller's certificate?)")
    if isinstance(exc, ssl.SSLError):
        return (f"TLS handshake with {host}:{port} failed: {exc.reason or exc} "
                "(does the controller serve TLS, with --tls-cert and --tls-key?)")
    return None


def plain_to_tls_text(url: str) -> str:
    """What a ws:// URL whose controller answered TLS means, in one line (both clients and the agent)."""
    address = url.partition("://")[2].partition("/")[0]
    return (f"the controller at ws://{address} speaks TLS: use wss://{address} "
            "(and --ca, unless the system trusts its certificate)")


def probe_context() -> Any:
    """A TLS client context that verifies nothing: it only asks whether a peer speaks TLS at all."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake: asked after a ws:// handshake failed, to say why."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            with probe_context().wrap_socket(sock, server_hostname=host):
                return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False


def auth_headers(auth: ClientAuth | str | None) -> list[tuple[bytes, bytes]]:
    """The handshake's headers of ``auth`` (a token, or a ``ClientAuth``: in munge mode, a fresh
    credential for each connection); ``ClientError`` in one line when none can be had."""
    try:
        return auth_of(auth).headers()
    except CredentialError as exc:
        raise ClientError(str(exc)) from None


def parse_controller_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a ``ws://`` or ``wss://`` URL; ``UsageError`` for anything else.

    Split by hand, as ``urllib.parse.urlsplit`` would split it: urllib.parse (with ipaddress and
    re) was a tenth of a ``reckon submit``'s imports.
    """
    scheme, sep, rest = url.strip(" \t\n\r").partition(":")
    if not sep or not scheme.isascii() or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum() \
            or not scheme[0].isalpha():
        raise UsageError(f"the controller URL must start with ws:// or wss://, got no scheme in {url!r}")
    scheme = scheme.lower()
    if scheme in ("ws", "wss") and not rest.startswith("//"):
        raise UsageError(f"the controller URL {url!r} names no host")
    rest = rest[2:] if rest.startswith("//") else rest
    if scheme not in ("ws", "wss"):
        raise UsageError(f"the controller URL must start with ws:// or wss://, got {scheme}:// in {url!r}")
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        host, bracket, after = hostport[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise UsageError(f"bad controller URL {url!r}: Invalid IPv6 URL")
        port_text = after[1:] if after else None
    else:
        if "[" in hostport or "]" in hostport:
            raise UsageError(f"bad controller URL {url!r}: Invalid IPv6 URL")
        host, colon, port_text = hostport.partition(":")
        port_text = port_text if colon else None
    host = host.lower()
    port: int | None = None
    if port_text:  # an empty port (ws://h:) is no port, as urlsplit has it
        if not (port_text.isascii() and port_text.isdigit()):
            raise UsageError(f"bad controller URL {url!r}: Port could not be cast to integer value as {port_text!r}")
        port = int(port_text)
        if port > 65535:
            raise UsageError(f"bad controller URL {url!r}: Port out of range 0-65535")
    if not host:
        raise UsageError(f"the controller URL {url!r} names no host")
    if tail.strip("/"):  # a path (other than "/"), a query or a fragment
        raise UsageError(f"the controller URL {url!r} must be ws[s]://HOST[:PORT] alone, without a path")
    return scheme, host, port if port is not None else (443 if scheme == "wss" else 80)


# ---- the texts both clients use ---------------------------------------------------------


def unreachable(url: str, reason: str) -> Unreachable:
    return Unreachable(f"controller unreachable at {url}: {reason}")


def refused(url: str, status: int, body: bytes) -> Refused:
    text = body.decode(errors="replace").strip()
    return Refused(f"controller at {url} refused the connection: {text or status}")


def closed(url: str, reason: str | None) -> Unreachable:
    return Unreachable(f"controller at {url} closed the connection: {reason or 'no reason given'}")


def no_handshake(url: str, seconds: float) -> Unreachable:
    return unreachable(url, f"no WebSocket handshake within {seconds:g}s (is the controller stopped?)")


def no_reply(url: str, seconds: float) -> Unreachable:
    return Unreachable(f"controller at {url} did not reply within {seconds:g}s (is it stopped or overloaded?)")


def reply_of(data: bytes | str, url: str) -> dict:
    """The controller's reply to a request, or its refusal as a ``ClientError``."""
    if isinstance(data, str) or len(data) > cborlite.MAX_CLIENT_MESSAGE:
        what = "text" if isinstance(data, str) else f"{len(data)} bytes, over {cborlite.MAX_CLIENT_MESSAGE}"
        raise ClientError(f"controller at {url} sent a bad reply: {what}")
    try:
        reply = cborlite.loads(data)
    except cborlite.CBORError as exc:
        raise ClientError(f"controller at {url} sent a bad reply: {exc}") from None
    if not isinstance(reply, dict):
        raise ClientError(f"controller at {url} sent a bad reply: a CBOR {type(reply).__name__}, not a map")
    if not reply.get("ok"):
        if "leader" in reply:  # a standby controller (PostgreSQL store): it did nothing
            raise NotLeader(f"controller at {url}: {reply.get('error')}", str(reply["leader"] or ""))
        raise Refused(str(reply.get("error", "request failed")))
    return reply


class NotLeader(Refused):
    """The controller asked is a standby; ``leader`` is where it says the leader is ("" unknown)."""

    def __init__(self, message: str, leader: str) -> None:
        super().__init__(message)
        self.leader = leader.rstrip("/")


# ---- several controllers: finding the leader (both clients; the agent parses its list here too) ----


def parse_controller_urls(spec: str) -> tuple[str, ...]:
    """The URLs of ``ws://a:7420`` or ``ws://a:7420,ws://b:7420`` (a trailing ``/`` dropped), each checked
    as ``parse_controller_url`` checks one; ``UsageError`` naming the bad one, before connecting anywhere."""
    urls = tuple(u.strip().rstrip("/") for u in spec.split(","))
    if any(not u for u in urls):
        raise UsageError(f"controller URLs must be a comma-separated list of ws:// or wss:// URLs, got {spec!r}")
    for url in urls:
        parse_controller_url(url)
    return urls


class LeaderSearch:
    """One request's way to the leader through the listed controllers, each asked at most once.

    It begins with ``first`` (default: the list's first URL).  After a standby's
    "not the leader" it goes to the leader the standby names (also one not in
    the list: its advertised URL), else to the next URL not yet asked; after a
    failure to connect, to the next not yet asked.  A standby never acts on a
    request, so asking again elsewhere is safe.  ``None`` from ``failed`` or
    ``not_the_leader``: every one was asked; ``error()`` is then the one error
    to show, naming why each did not serve.
    """

    def __init__(self, urls: tuple[str, ...] | list[str], first: str | None = None) -> None:
        self.urls = list(urls)
        self.current = first or self.urls[0]
        self._asked: list[str] = []
        self._reasons: list[str] = []
        self._last: ClientError = ClientError()

    def failed(self, exc: ClientError) -> str | None:
        """``current`` did not serve (unreachable, refused, closed): the URL to try next, or None."""
        return self._next(exc, None)

    def not_the_leader(self, exc: NotLeader) -> str | None:
        """``current`` is a standby: the leader it names, else the next URL; None when all were asked."""
        return self._next(exc, exc.leader)

    def _next(self, exc: ClientError, hint: str | None) -> str | None:
        self._asked.append(self.current)
        self._reasons.append(str(exc))
        self._last = exc
        for url in ([hint] if hint else []) + self.urls:
            if url not in self._asked:
                self.current = url
                return url
        return None

    def error(self) -> ClientError:
        """The one error for the user: a single controller's own reason, or every controller's."""
        if len(self._reasons) == 1 and not isinstance(self._last, NotLeader):
            return type(self._last)(self._reasons[0])  # Unreachable, Refused: as the one controller said
        return Unreachable(f"no controller answered as the leader ({len(self._reasons)} asked): "
                           + "; ".join(self._reasons))


def request_bytes(op: str, fields: dict[str, Any]) -> bytes:
    request = {"op": op, **fields}
    if len(fields.get("specs") or ()) > 100:  # a bulk submit: cbor2's C encoder (cborlite's docstring)
        import cbor2

        return cbor2.dumps(request)
    try:
        return cborlite.dumps(request)
    except cborlite.CBORError as exc:
        raise UsageError(f"cannot send {op}: {exc}") from None
