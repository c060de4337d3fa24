"""Controllers on PostgreSQL with --tls-cert/--tls-key and --metrics: a standby serves both.

Two real controllers on the session's PostgreSQL, both serving wss:// and
metrics.  The standby's "not the leader" answer goes over TLS and the CLI,
given the standby first, is sent on to the leader; the standby's metrics say
standby, the epoch and how far behind the log it is; after the leader's
SIGKILL the same endpoint shows the new leader's role, epoch and takeover
time next to the usual controller metrics.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

TOKEN = "e2e-ha-tls-token-0123456789abcdef"


@pytest.fixture
def pki(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    cert.private_key_pem.write_to_path(str(paths["key"]))
    paths["key"].chmod(0o600)
    paths["cert"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    return paths


def metrics_port(cluster, key: str) -> int:
    def port() -> int | None:
        found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", cluster.log_text(key))
        return int(found[1]) if found else None

    return cluster.wait_for(port, what=f"{key}'s metrics port in its log")


def scrape(port: int) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def standby_answer(url: str, ca) -> dict:
    """The raw reply of the controller at ``url`` to a client request, over TLS."""
    import trio
    from trio_websocket import open_websocket_url

    from reckon.daemon import wire
    from reckon.daemon.client_common import auth_headers, client_ssl_context

    async def ask() -> dict:
        with trio.fail_after(30):
            async with open_websocket_url(url + "/client", ssl_context=client_ssl_context(ca),
                                          extra_headers=auth_headers(TOKEN)) as ws:
                await ws.send_message(wire.dumps({"op": "status"}))
                return wire.loads(await ws.get_message(), limit=wire.MAX_CLIENT_MESSAGE)

    return trio.run(ask)


def test_a_standby_serves_tls_and_metrics_and_so_does_it_after_taking_over(cluster, pg_dsn, pki):
    cluster.use_token(TOKEN)
    cluster.scheme, cluster.ca = "wss", pki["ca"]  # the CLI trusts the test CA (RECKON_CA)
    options = ("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), "--metrics", "127.0.0.1:0",
               "--lease", "2", "--rejoin-grace", "0")
    a = f"wss://127.0.0.1:{cluster.start_ha_controller('ctl-a', pg_dsn, *options)}"
    cluster.wait_for(lambda: cluster.run("nodes", controller=a).returncode == 0, what="controller a to lead")
    b = f"wss://127.0.0.1:{cluster.start_ha_controller('ctl-b', pg_dsn, *options)}"
    cluster.wait_for(lambda: "standing by" in cluster.log_text("ctl-b"), what="controller b to stand by")

    reply = standby_answer(b, pki["ca"])  # over TLS, with the leader's wss:// URL
    assert reply == {"ok": False, "error": f"not the leader: the leader is {a}", "leader": a}, reply
    cluster.controller_urls = f"{b},{a}"  # the CLI asks the standby first and is sent to the leader
    job = cluster.submit("true")
    assert cluster.job(job)["state"] == "PENDING"
    # A list whose first URL is plain ws:// still trusts --ca (RECKON_CA) for the wss:// ones.
    assert cluster.run("nodes", controller=f"ws://127.0.0.1:1,{a}").returncode == 0

    a_metrics, b_metrics = metrics_port(cluster, "ctl-a"), metrics_port(cluster, "ctl-b")
    leader = scrape(a_metrics)
    assert leader[("reckon_controller_role", (("role", "leader"),))] == 1
    assert leader[("reckon_controller_role", (("role", "standby"),))] == 0
    assert leader[("reckon_controller_epoch", ())] == 1
    assert leader[("reckon_jobs", (("state", "PENDING"),))] == 1  # the usual controller metrics too
    assert leader[("reckon_jobs_submitted_total", ())] == 1
    assert ("reckon_fact_log_bytes", ()) not in leader  # no controller.db file on this store

    def standby_caught_up() -> dict | None:
        m = scrape(b_metrics)
        return m if m[("reckon_standby_facts_behind", ())] == 0 and \
            m[("reckon_fact_log_last_seq", ())] == leader[("reckon_fact_log_last_seq", ())] else None

    standby = cluster.wait_for(standby_caught_up, what="the standby to follow the log")
    assert standby[("reckon_controller_role", (("role", "standby"),))] == 1
    assert standby[("reckon_controller_role", (("role", "leader"),))] == 0
    assert standby[("reckon_controller_epoch", ())] == 1 and standby[("reckon_database_up", ())] == 1
    assert ("reckon_controller_last_takeover_timestamp_seconds", ()) not in standby  # none seen yet

    killed = time.time()
    cluster.kill("ctl-a")
    cluster.controller_urls = f"{a},{b}"

    def b_leads() -> dict | None:
        m = scrape(b_metrics)
        return m if m[("reckon_controller_role", (("role", "leader"),))] == 1 else None

    new = cluster.wait_for(b_leads, what="the standby's metrics to say it leads")
    assert new[("reckon_controller_epoch", ())] == 2
    assert new[("reckon_controller_last_takeover_timestamp_seconds", ())] >= killed - 1
    assert ("reckon_standby_facts_behind", ()) not in new
    assert new[("reckon_jobs", (("state", "PENDING"),))] == 1
    assert cluster.job(job)["state"] == "PENDING"  # over wss://, past the dead controller, to b
