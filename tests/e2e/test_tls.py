"""TLS end to end over real sockets: controller, agent and CLI over wss://, and who is refused.

Certificates are made by the test itself (``trustme``): a CA the cluster
trusts, a certificate for 127.0.0.1 signed by it, and another CA nobody
should trust.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trustme

pytestmark = pytest.mark.e2e

TOKEN = "e2e-tls-token-0123456789abcdef"


@pytest.fixture
def pki(tmp_path):
    """(cert chain, key, ca, other ca) PEM files."""
    ca, other = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca", "other")}
    cert.private_key_pem.write_to_path(str(paths["key"]))
    paths["key"].chmod(0o600)
    paths["cert"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other.cert_pem.write_to_path(str(paths["other"]))
    return paths


def test_a_job_runs_over_wss_and_untrusted_peers_are_refused_with_a_clear_reason(cluster, pki):
    cluster.use_token(TOKEN)
    cluster.use_tls(pki["cert"], pki["key"], pki["ca"])
    cluster.start_controller()
    assert cluster.url.startswith("wss://")
    cluster.start_agent("a1")  # trusts the cluster's CA (RECKON_CA)

    job = cluster.submit("/bin/sh", "-c", "echo over-tls; echo id=$RECKON_JOB_ID")
    done = cluster.wait_job(job)
    assert done["state"] == "COMPLETED" and done["exit_code"] == 0
    assert Path(done["stdout"]).read_text().splitlines() == ["over-tls", f"id={job}"]

    # The CLI with another CA, or with the system's store (which knows nothing of the test CA): exit 1, one line.
    for ca in (pki["other"], None):
        args = ["nodes"] + (["--ca", str(ca)] if ca else [])
        result = cluster.run(*args) if ca else _run_without_ca(cluster, *args)
        assert result.returncode == 1
        reason = cluster.one_line_reason(result)
        assert "not trusted" in reason and "certificate" in reason, reason

    # An agent with the wrong CA never joins, and says why, once (not once per attempt; -v shows each
    # further attempt as a debug line, so the test can see that there were several).
    cluster.start_agent("a2", "--ca", str(pki["other"]), "-v", wait_joined=False)
    cluster.wait_for(lambda: "refused again" in cluster.log_text("a2"), timeout=40,
                     what="a second attempt of the wrong-CA agent")
    warnings = [ln for ln in cluster.log_text("a2").splitlines() if "WARNING" in ln and "not trusted" in ln]
    assert len(warnings) == 1, warnings
    assert "certificate" in warnings[0] and "--ca" in warnings[0], warnings[0]
    # The controller logs failed handshakes once per peer and reason too (the CLI and the agent end
    # theirs differently: an alert, or a bare close), not once per attempt.
    refused = [ln.split(" WARNING ", 1)[1] for ln in cluster.log_text("controller").splitlines()
               if " WARNING " in ln and "TLS handshake failed" in ln]
    assert refused and len(refused) == len(set(refused)), refused
    assert all(ln.startswith("refused 127.0.0.1: TLS handshake failed") for ln in refused), refused
    assert "a2" not in cluster.nodes()


def _run_without_ca(cluster, *args):
    ca, cluster.ca = cluster.ca, None
    try:
        return cluster.run(*args)
    finally:
        cluster.ca = ca


def test_a_controller_with_a_key_that_does_not_match_refuses_to_start_with_exit_status_2(cluster, pki, tmp_path):
    other_key = tmp_path / "other.key"
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other_key))
    result = cluster.run("controller", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "c"),
                         "--tls-cert", str(pki["cert"]), "--tls-key", str(other_key))
    assert result.returncode == 2  # a usage error: the options name files that cannot work
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reckon: TLS certificate") and "not a usable pair" in lines[0]
    result = cluster.run("controller", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "c"),
                         "--tls-cert", str(pki["cert"]))
    assert result.returncode == 2 and "--tls-cert and --tls-key go together" in result.stderr


def test_plain_ws_to_a_tls_controller_is_named_as_such_by_the_cli_the_agent_and_the_controller(cluster, pki):
    """Not "the connection ended", "ConnectionTimeout" and "does the peer trust this controller's CA?"."""
    cluster.use_tls(pki["cert"], pki["key"], pki["ca"])
    cluster.start_controller()
    plain = f"ws://127.0.0.1:{cluster.port}"
    use_wss = f"the controller at {plain} speaks TLS: use wss://127.0.0.1:{cluster.port}"
    result = cluster.run("nodes", controller=plain)
    assert result.returncode == 2, result  # the URL is wrong: a usage error
    assert cluster.one_line_reason(result).startswith(f"reckon: {use_wss}"), result.stderr
    cluster.start_agent("a1", "--controller", plain, wait_joined=False)
    cluster.wait_for(lambda: use_wss in cluster.log_text("a1"), what="the agent to say why it cannot join")
    assert "ConnectionTimeout" not in cluster.log_text("a1")
    refused = [ln for ln in cluster.log_text("controller").splitlines() if "TLS handshake failed" in ln]
    assert refused and all("the peer sent a plain ws:// request: it must use wss://" in ln and "CA" not in ln
                           for ln in refused), refused
    assert "a1" not in cluster.nodes()
