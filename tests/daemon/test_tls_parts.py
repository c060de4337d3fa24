"""The pieces of TLS that need no network: warnings, certificate and CA files (daemon/wsconnect.py, controller/tls.py)."""

from __future__ import annotations

import pytest
import trustme

from reckon.daemon.client_common import UsageError, client_ssl_context
from reckon.daemon.controller.tls import TLSConfigError, check_tls_files
from reckon.daemon.wsconnect import cleartext_munge_warning, cleartext_token_warning, is_loopback_host


@pytest.mark.parametrize("url,token,warned", [
    ("ws://10.0.0.5:7420", "t", True),
    ("ws://controller.example:7420", "t", True),
    ("ws://127.0.0.1:7420", "t", False),  # loopback: never leaves the machine
    ("ws://[::1]:7420", "t", False),
    ("ws://localhost:7420", "t", False),
    ("wss://controller.example:7420", "t", False),
    ("ws://10.0.0.5:7420", None, False),  # no token to leak
])
def test_a_token_over_plain_ws_to_another_host_is_warned_about(url, token, warned):
    warning = cleartext_token_warning(url, token)
    assert (warning is not None) == warned
    if warned:
        assert "unencrypted" in warning and "wss://" in warning


@pytest.mark.parametrize("url,warned", [("ws://10.0.0.5:7420", True), ("ws://controller.example:7420", True),
                                        ("ws://127.0.0.1:7420", False), ("wss://controller.example:7420", False)])
def test_a_munge_agent_over_plain_ws_to_another_host_is_warned_about(url, warned):
    """Munge authenticates the agent, not the controller: only TLS does that."""
    warning = cleartext_munge_warning(url)
    assert (warning is not None) == warned
    if warned:
        assert url in warning and "wss://" in warning and "--ca" in warning


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                           ("[::1]", True), ("0.0.0.0", False), ("10.1.2.3", False), ("node1", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback_host(host) is loopback


def test_an_unusable_ca_file_is_a_one_line_error(tmp_path):
    with pytest.raises(UsageError, match="cannot load CA file .*No such file"):
        client_ssl_context(tmp_path / "missing.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(UsageError, match="cannot load CA file"):
        client_ssl_context(garbage)
    good = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(good))
    assert client_ssl_context(good).check_hostname  # host names are checked


def test_tls_files_go_together_and_must_match(tmp_path):
    ca = trustme.CA()
    cert, key, other_key = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "o.pem"
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ca.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other_key))
    check_tls_files(None, None)
    check_tls_files(cert, key)
    with pytest.raises(TLSConfigError, match="go together"):
        check_tls_files(cert, None)
    with pytest.raises(TLSConfigError, match="not a usable pair"):
        check_tls_files(cert, other_key)
    with pytest.raises(TLSConfigError, match="cannot read TLS file .*nope.pem"):
        check_tls_files(tmp_path / "nope.pem", key)
