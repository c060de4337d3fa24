"""The CLI's blocking client over `wss://` (daemon/blocking/client.py): TLS with a given CA, the token, a reply.

The `opsec` work wires `--ca` into the CLI; here the client's own seam, an
``ssl.SSLContext``, is exercised against a small TLS WebSocket peer in a thread.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import socket
import ssl
import struct
import subprocess
import threading

import cbor2
import pytest

from reckon.daemon.client_common import ClientError
from reckon.daemon.blocking.client import SyncClient

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def _peer(server: ssl.SSLContext, seen: dict) -> int:
    """A TLS WebSocket peer that answers one request with {"ok": true, "op": <its op>}."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        with listener:
            raw, _ = listener.accept()
            try:
                conn = server.wrap_socket(raw, server_side=True)
            except ssl.SSLError:  # the client refused our certificate: that test's expected end
                raw.close()
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                headers = {name.lower(): value for name, value in
                           (line.split(b": ", 1) for line in data.split(b"\r\n")[1:] if b": " in line)}
                seen["authorization"] = headers.get(b"authorization")
                accept = base64.b64encode(hashlib.sha1(headers[b"sec-websocket-key"]
                                                       + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
                head = conn.recv(2)
                n = head[1] & 0x7F
                assert head[1] & 0x80, "a client frame must be masked"
                if n == 126:
                    n = struct.unpack("!H", conn.recv(2))[0]
                mask = conn.recv(4)
                payload = b""
                while len(payload) < n:
                    payload += conn.recv(n - len(payload))
                request = cbor2.loads(bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                reply = cbor2.dumps({"ok": True, "op": request["op"]})
                conn.sendall(bytes([0x82, len(reply)]) + reply)
                conn.recv(64)  # the client's close
                conn.sendall(b"\x88\x02\x03\xe8")

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_wss_with_the_given_ca_carries_the_token_and_gets_the_reply(tmp_path):
    cert, key = _certificate(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    seen: dict = {}
    port = _peer(server, seen)
    client_context = ssl.create_default_context(cafile=str(cert))
    with SyncClient(f"wss://127.0.0.1:{port}", "s3cret", timeout=10, ssl_context=client_context) as client:
        assert client.call("status") == {"ok": True, "op": "status"}
    assert seen["authorization"] == b"Bearer s3cret"


def test_wss_with_an_unknown_ca_fails_with_a_reason(tmp_path):
    cert, key = _certificate(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    port = _peer(server, {})
    url = f"wss://127.0.0.1:{port}"
    with pytest.raises(ClientError, match=r"cannot connect to wss://127\.0\.0\.1:\d+: TLS: .*not trusted"):
        SyncClient(url, None, timeout=10).connect()  # the system's trust store does not know this certificate
