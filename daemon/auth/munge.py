"""MUNGE credentials through libmunge (ctypes on ``libmunge.so.2``), and through the ``munge`` and
``unmunge`` programs for comparison (``reckon bench cli --munge``).

Why libmunge and not the programs: a credential is one round trip to the local munged over its
Unix socket either way, but the programs cost a fork and an exec per credential (figures in
docs/operating.md, measured by ``reckon bench cli``).  Why not a PyPI binding: the one there is
(``pymunge``) has had no release since 2018; ctypes on the C library is a page of code.

Light to import (the CLI pays it on every command): no dataclasses, and ctypes (4 ms) and the
library only on first use, so token mode pays nothing.
Both calls block on munged: the controller decodes on a worker thread (daemon/auth/handshake.py).

Every failure is a ``MungeError`` whose ``str()`` is one line and whose ``kind`` names the
condition (``replayed``, ``expired``, ``rewound``, ``invalid``, ``unreachable``, ...): the
controller logs a refused peer once per kind.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a CLI call's import; mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

LIBRARY = "libmunge.so.2"
DEFAULT_SOCKET = "/run/munge/munge.socket.2"  # munged's own default (munged --help)
SOCKET_ENV = "RECKON_MUNGE_SOCKET"

# munge.h: munge_opt_t and munge_err_t (libmunge 0.5; the numbers are the library's ABI).
MUNGE_OPT_TTL = 4
MUNGE_OPT_SOCKET = 8
EMUNGE_SUCCESS = 0
EMUNGE_SOCKET = 6
EMUNGE_TIMEOUT = 7
EMUNGE_BAD_CRED = 8
EMUNGE_BAD_VERSION = 9
EMUNGE_BAD_CIPHER = 10
EMUNGE_BAD_MAC = 11
EMUNGE_BAD_ZIP = 12
EMUNGE_BAD_REALM = 13
EMUNGE_CRED_INVALID = 14
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17
EMUNGE_CRED_UNAUTHORIZED = 18

# code -> (kind, the line's reason); the socket's failures name the socket (see MungeError).
_REASONS = {
    EMUNGE_CRED_REPLAYED: ("replayed", "replayed MUNGE credential: a credential is good for one connection only"),
    EMUNGE_CRED_EXPIRED: ("expired", "expired MUNGE credential: older than its time-to-live "
                                     "(are the machines' clocks in step?)"),
    EMUNGE_CRED_REWOUND: ("rewound", "MUNGE credential from the future (rewound): are the machines' clocks in step?"),
    EMUNGE_CRED_INVALID: ("invalid", "invalid MUNGE credential: not made with this cluster's key "
                                     "(is /etc/munge/munge.key the same on every machine?)"),
    EMUNGE_BAD_MAC: ("invalid", "invalid MUNGE credential: its MAC does not match (another cluster's key?)"),
    EMUNGE_BAD_CRED: ("malformed", "malformed MUNGE credential"),
    EMUNGE_BAD_VERSION: ("malformed", "MUNGE credential of an unknown version"),
    EMUNGE_BAD_CIPHER: ("malformed", "MUNGE credential with an unknown cipher"),
    EMUNGE_BAD_ZIP: ("malformed", "MUNGE credential with an unknown compression"),
    EMUNGE_BAD_REALM: ("malformed", "MUNGE credential of an unknown security realm"),
    EMUNGE_CRED_UNAUTHORIZED: ("unauthorized", "MUNGE credential restricted to another uid or gid"),
}


class MungeError(Exception):
    """A credential could not be made or was refused; ``str()`` is one line, ``kind`` the condition."""

    def __init__(self, kind: str, line: str, code: int = 0) -> None:
        super().__init__(line)
        self.kind = kind
        self.code = code


class Decoded:
    """What a good credential says: who made it (uid and primary gid on the encoding machine)."""

    __slots__ = ("uid", "gid", "payload")

    def __init__(self, uid: int, gid: int, payload: bytes = b"") -> None:
        self.uid, self.gid, self.payload = uid, gid, payload

    def __repr__(self) -> str:
        return f"Decoded(uid={self.uid}, gid={self.gid}, payload={self.payload!r})"


def resolve_socket(socket: str | os.PathLike | None) -> str:
    """--munge-socket, else $RECKON_MUNGE_SOCKET, else munged's default."""
    return str(socket or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


def error_of(code: int, socket: str, detail: str) -> MungeError:
    """The one-line error of a libmunge (or ``unmunge`` exit) status ``code``."""
    if code in (EMUNGE_SOCKET, EMUNGE_TIMEOUT):
        why = "did not answer in time" if code == EMUNGE_TIMEOUT else "cannot be reached"
        return MungeError("unreachable", f"munged at {socket} {why} (is munged running there? "
                                         f"--munge-socket names another): {detail}", code)
    kind, reason = _REASONS.get(code, ("other", f"MUNGE: {detail}"))
    return MungeError(kind, reason, code)


# ---- libmunge ---------------------------------------------------------------------------

_lib: Any = None  # ctypes.CDLL of libmunge, loaded on first use
_libc: Any = None


def _library() -> Any:
    global _lib, _libc
    if _lib is None:
        import ctypes

        try:
            lib = ctypes.CDLL(LIBRARY)
        except OSError as exc:
            raise MungeError("missing", f"cannot load {LIBRARY} ({exc}): install MUNGE "
                                        "(Debian/Ubuntu: apt-get install munge)") from None
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_strerror.restype = ctypes.c_char_p
        lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
        lib.munge_strerror.restype = ctypes.c_char_p
        lib.munge_strerror.argtypes = [ctypes.c_int]
        lib.munge_encode.restype = ctypes.c_int
        lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.munge_decode.restype = ctypes.c_int
        lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint32),
                                     ctypes.POINTER(ctypes.c_uint32)]
        # munge_ctx_set is variadic: its argtypes stay unset, each call passes explicit ctypes values.
        lib.munge_ctx_set.restype = ctypes.c_int
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        _lib, _libc = lib, libc
    return _lib


def _context(lib: Any, socket: str, ttl: int | None) -> Any:
    import ctypes

    ctx = lib.munge_ctx_create()
    if not ctx:
        raise MungeError("other", "MUNGE: out of memory creating a context")
    ctx = ctypes.c_void_p(ctx)
    status = lib.munge_ctx_set(ctx, ctypes.c_int(MUNGE_OPT_SOCKET), ctypes.c_char_p(os.fsencode(socket)))
    if status == EMUNGE_SUCCESS and ttl is not None:
        status = lib.munge_ctx_set(ctx, ctypes.c_int(MUNGE_OPT_TTL), ctypes.c_int(ttl))
    if status != EMUNGE_SUCCESS:
        detail = lib.munge_strerror(status).decode(errors="replace")
        lib.munge_ctx_destroy(ctx)
        raise error_of(status, socket, detail)
    return ctx


def _detail(lib: Any, ctx: Any, status: int) -> str:
    text = lib.munge_ctx_strerror(ctx) or lib.munge_strerror(status)
    return text.decode(errors="replace")


def encode(socket: str | None = None, *, payload: bytes = b"", ttl: int | None = None) -> str:
    """A fresh credential of this process's uid and gid from the munged at ``socket`` (blocking).
    ``ttl``: seconds it stays good (None: munged's default, 300 s)."""
    import ctypes

    lib = _library()
    socket = resolve_socket(socket)
    ctx = _context(lib, socket, ttl)
    try:
        cred = ctypes.c_char_p()
        status = lib.munge_encode(ctypes.byref(cred), ctx, payload or None, len(payload))
        if status != EMUNGE_SUCCESS:
            raise error_of(status, socket, _detail(lib, ctx, status))
        try:
            return cred.value.decode("ascii")
        finally:
            assert _libc is not None
            _libc.free(ctypes.cast(cred, ctypes.c_void_p))
    finally:
        lib.munge_ctx_destroy(ctx)


def decode(credential: str, socket: str | None = None) -> Decoded:
    """Who made ``credential``, as the munged at ``socket`` decodes it (blocking); ``MungeError``
    if it is replayed, expired, made with another key, malformed, or munged cannot be reached."""
    import ctypes

    lib = _library()
    socket = resolve_socket(socket)
    try:
        raw = credential.encode("ascii")
    except UnicodeEncodeError:
        raise error_of(EMUNGE_BAD_CRED, socket, "not ASCII") from None
    ctx = _context(lib, socket, None)
    try:
        buf, length = ctypes.c_void_p(), ctypes.c_int()
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        status = lib.munge_decode(raw, ctx, ctypes.byref(buf), ctypes.byref(length), ctypes.byref(uid),
                                  ctypes.byref(gid))
        payload = b""
        if buf.value:
            payload = ctypes.string_at(buf, length.value)
            assert _libc is not None
            _libc.free(buf)
        if status != EMUNGE_SUCCESS:
            raise error_of(status, socket, _detail(lib, ctx, status))
        return Decoded(uid=uid.value, gid=gid.value, payload=payload)
    finally:
        lib.munge_ctx_destroy(ctx)


# ---- the programs (compared by `reckon bench cli --munge`) -------------------------------


def encode_with_program(socket: str | None = None) -> str:
    """A credential from the ``munge`` program (a fork and an exec): what libmunge is measured against."""
    import subprocess

    socket = resolve_socket(socket)
    try:
        done = subprocess.run(["munge", "--no-input", "--socket", socket], capture_output=True, timeout=30)
    except OSError as exc:
        raise MungeError("missing", f"cannot run munge: {exc.strerror} (apt-get install munge)") from None
    if done.returncode != 0:
        raise error_of(done.returncode, socket, done.stderr.decode(errors="replace").strip())
    return done.stdout.decode("ascii").strip()


def decode_with_program(credential: str, socket: str | None = None) -> Decoded:
    """``decode`` through the ``unmunge`` program (its exit status is the libmunge status)."""
    import subprocess

    socket = resolve_socket(socket)
    try:
        done = subprocess.run(["unmunge", "--socket", socket, "--numeric", "--output", "/dev/null",
                               "--keys", "UID,GID"], input=credential.encode(), capture_output=True, timeout=30)
    except OSError as exc:
        raise MungeError("missing", f"cannot run unmunge: {exc.strerror} (apt-get install munge)") from None
    if done.returncode != 0:
        raise error_of(done.returncode, socket, done.stderr.decode(errors="replace").strip())
    fields = dict(line.split(":", 1) for line in done.stdout.decode().splitlines() if ":" in line)
    return Decoded(uid=int(fields["UID"].split()[0]), gid=int(fields["GID"].split()[0]))
