"""A minimal blocking WebSocket client (RFC 6455): what the command line needs, and no more.

Why not wsproto (which trio-websocket already brings): importing it imports
h11, which compiles its HTTP grammar into regular expressions at import;
that alone cost about as much as the rest of a `reckon submit` (measured with
``python -X importtime``; see docs/performance.md).  The client side of the
protocol is small: one HTTP upgrade request, masked frames out, unmasked
frames in, ping answered, close answered.  The server stays trio-websocket
(wsproto), which is strict: a frame this module got wrong would be refused
there, and every CLI test would fail.

Every read and write is bounded by a deadline (``time.monotonic()``); on
overrun ``WebSocketTimeout`` is raised, and the caller names the phase.
"""

from __future__ import annotations

import binascii
import os
import struct
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
MAX_HEADER_BYTES = 64 * 1024  # the controller's handshake answer is a few hundred bytes
MAX_REJECT_BODY = 64 * 1024  # a refusal's reason ("bad token") is one line

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocketTimeout(Exception):
    """A deadline passed while waiting for the peer."""


class WebSocketRejected(Exception):
    """The peer answered the upgrade request with an HTTP status other than 101."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class WebSocketClosed(Exception):
    """The connection ended: a close frame (its reason), a reset, or end of stream."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WebSocketProtocolError(Exception):
    """The peer broke the WebSocket protocol."""


def _sha1(data: bytes) -> bytes:
    """SHA-1 for the handshake's accept check: CPython's built-in ``_sha1`` when it has one, as
    ``hashlib`` loads OpenSSL first (a few ms of every CLI call)."""
    try:
        from _sha1 import sha1
    except ImportError:
        from hashlib import sha1
    return sha1(data).digest()


def mask(key: bytes, data: bytes) -> bytes:
    """``data`` XOR the 4-byte ``key`` repeated (RFC 6455 5.3), as one big-integer XOR (fast in CPython)."""
    n = len(data)
    if n == 0:
        return data
    repeated = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked frame from the client."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + mask(key, payload)


class WebSocket:
    """A client connection over a connected (possibly TLS) socket; see the module docstring."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self._buf = bytearray()
        self.closed = False

    # ---- the opening handshake ------------------------------------------------------------

    def handshake(self, host: str, target: str, headers: list[tuple[bytes, bytes]], deadline: float) -> None:
        """Send the upgrade request and check the answer; ``WebSocketRejected`` for a refusal."""
        key = binascii.b2a_base64(os.urandom(16), newline=False)
        lines = [b"GET " + target.encode() + b" HTTP/1.1", b"Host: " + host.encode(), b"Upgrade: websocket",
                 b"Connection: Upgrade", b"Sec-WebSocket-Key: " + key, b"Sec-WebSocket-Version: 13"]
        lines += [name + b": " + value for name, value in headers]
        self._send(b"\r\n".join(lines) + b"\r\n\r\n", deadline)
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise WebSocketProtocolError("the handshake answer is too long")
            self._fill(deadline)
        head = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        del self._buf[:end + 4]
        status_line, fields = head[0].split(" ", 2), {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not status_line[1].isdigit():
            raise WebSocketProtocolError(f"not an HTTP answer: {head[0][:80]!r}")
        status = int(status_line[1])
        if status != 101:
            raise WebSocketRejected(status, self._reject_body(fields, deadline))
        accept = binascii.b2a_base64(_sha1(key + GUID), newline=False).decode()
        if fields.get("upgrade", "").lower() != "websocket" or fields.get("sec-websocket-accept") != accept:
            raise WebSocketProtocolError("the peer did not accept the WebSocket upgrade")

    def _reject_body(self, fields: dict[str, str], deadline: float) -> bytes:
        length = fields.get("content-length", "")
        want = min(int(length), MAX_REJECT_BODY) if length.isdigit() else MAX_REJECT_BODY
        try:
            while len(self._buf) < want:
                self._fill(deadline)
        except (WebSocketClosed, WebSocketTimeout):
            pass  # no length given: the body ends with the connection
        return bytes(self._buf[:want])

    # ---- messages -----------------------------------------------------------------------------

    def send_binary(self, data: bytes, deadline: float) -> None:
        self._send(frame(OP_BINARY, data), deadline)

    def receive(self, deadline: float, limit: int) -> bytes | str:
        """The next whole data message (pings answered on the way); ``WebSocketClosed`` on a close."""
        parts: list[bytes] = []
        size = 0
        first: int | None = None
        while True:
            fin, opcode, payload = self._read_frame(deadline, limit)
            if opcode == OP_PING:
                self._send(frame(OP_PONG, payload), deadline)
            elif opcode == OP_PONG:
                pass
            elif opcode == OP_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                reason = payload[2:].decode(errors="replace") or (f"code {code}" if code else "no reason given")
                self._answer_close(payload[:2], deadline)
                raise WebSocketClosed(reason)
            else:
                if (opcode == OP_CONTINUATION) != (first is not None):
                    raise WebSocketProtocolError(f"unexpected frame opcode {opcode}")
                if first is None:
                    first = opcode
                size += len(payload)
                if size > limit:
                    raise WebSocketProtocolError(f"a message over {limit} bytes")
                parts.append(payload)
                if fin:
                    data = b"".join(parts)
                    return data.decode(errors="replace") if first == OP_TEXT else data

    def close(self, deadline: float) -> None:
        """Send our close and wait (until ``deadline``) for the peer's answer; then hang up."""
        try:
            if not self.closed:
                self.closed = True
                self._send(frame(OP_CLOSE, struct.pack("!H", 1000)), deadline)
                while True:
                    _, opcode, _ = self._read_frame(deadline, MAX_REJECT_BODY)
                    if opcode == OP_CLOSE:
                        break
        except (WebSocketClosed, WebSocketTimeout, WebSocketProtocolError):
            pass
        finally:
            self.abort()

    def abort(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- frames and bytes ---------------------------------------------------------------------

    def _answer_close(self, code: bytes, deadline: float) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._send(frame(OP_CLOSE, code), deadline)
            except (WebSocketClosed, WebSocketTimeout):
                pass

    def _read_frame(self, deadline: float, limit: int) -> tuple[bool, int, bytes]:
        head = self._read(2, deadline)
        fin, opcode, masked, n = head[0] & 0x80, head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
        if head[0] & 0x70:
            raise WebSocketProtocolError("a frame with reserved bits set (no extension was agreed)")
        if masked:
            raise WebSocketProtocolError("a masked frame from the server")
        if n == 126:
            n = struct.unpack("!H", self._read(2, deadline))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8, deadline))[0]
        if n > limit:
            raise WebSocketProtocolError(f"a frame of {n} bytes, over the limit of {limit}")
        return bool(fin), opcode, self._read(n, deadline)

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _fill(self, deadline: float) -> None:
        self._settimeout(deadline)
        try:
            chunk = self.sock.recv(256 * 1024)
        except TimeoutError:  # socket.timeout
            raise WebSocketTimeout() from None
        except OSError as exc:
            raise WebSocketClosed(exc.strerror or str(exc)) from None
        if not chunk:
            raise WebSocketClosed("the connection ended")
        self._buf += chunk

    def _send(self, data: bytes, deadline: float) -> None:
        self._settimeout(deadline)
        try:
            self.sock.sendall(data)
        except TimeoutError:  # socket.timeout
            raise WebSocketTimeout() from None
        except OSError as exc:
            raise WebSocketClosed(exc.strerror or str(exc)) from None

    def _settimeout(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WebSocketTimeout()
        self.sock.settimeout(left)


def connect(host: str, port: int, *, timeout: float, ssl_context: Any = None,
            server_hostname: str | None = None) -> Any:
    """A TCP connection (TLS when ``ssl_context`` is given), bounded by ``timeout``.

    ``OSError`` (``TimeoutError`` on overrun, ``ssl.SSLError`` for TLS) as the socket module raises it.
    A plain connection is a ``_socket.socket``: the ``socket`` module (with enum, selectors and io's
    wrappers) cost every CLI call its import, for ``create_connection``'s dozen lines.
    """
    if ssl_context is not None:
        import socket

        deadline = time.monotonic() + timeout
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            return ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        except BaseException:
            sock.close()
            raise
    return _plain(host, port, timeout)


def _plain(host: str, port: int, timeout: float) -> Any:
    """``socket.create_connection`` on ``_socket``: each address in turn, the last error raised."""
    import _socket

    try:  # an ASCII name as bytes: a str is encoded with the idna codec (unicodedata, stringprep)
        name: str | bytes = host.encode("ascii")
    except UnicodeEncodeError:
        name = host
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error if error is not None else OSError(f"no address found for {host}")
