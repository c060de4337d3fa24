"""Controllers on PostgreSQL whose database goes away (a PostgreSQL server of this test's own).

The leader steps down: one ``stepping down: lost the database ...`` log line,
one ``reckon: controller stepped down: ...`` line on stderr, exit status 1,
no traceback.  The standby stays up: it logs ``lost the database at ...:
retrying`` once (each retry only with -v, at debug level), and when the server
is back it says so and, the old leader being gone, takes over.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_ha_tls_metrics import metrics_port, scrape

pytestmark = pytest.mark.e2e


@pytest.fixture
def own_postgres():
    """A PostgreSQL server for this test alone: it is stopped under the controllers."""
    from tests.pgserver import PgServer

    server = PgServer().start()
    try:
        yield server
    finally:
        server.stop()


def test_the_leader_steps_down_and_the_standby_waits_for_the_database_and_takes_over(own_postgres, cluster):  # the cluster stops first
    dsn = own_postgres.new_database()
    options = ("--lease", "1", "--rejoin-grace", "0")
    a = f"ws://127.0.0.1:{cluster.start_ha_controller('ctl-a', dsn, *options)}"
    cluster.wait_for(lambda: cluster.run("nodes", controller=a).returncode == 0, what="controller a to lead")
    b = f"ws://127.0.0.1:{cluster.start_ha_controller('ctl-b', dsn, '-v', '--metrics', '127.0.0.1:0', *options)}"
    cluster.wait_for(lambda: "standing by" in cluster.log_text("ctl-b"), what="controller b to stand by")
    b_metrics = metrics_port(cluster, "ctl-b")
    assert scrape(b_metrics)[("reckon_database_up", ())] == 1

    own_postgres.pause()  # every connection drops, new ones are refused

    leader = cluster.daemons["ctl-a"].proc
    cluster.wait_for(lambda: leader.poll() is not None, what="the leader to exit")
    assert leader.returncode == 1
    text = cluster.log_text("ctl-a")
    assert "Traceback" not in text, text
    stepping = [ln for ln in text.splitlines() if "stepping down" in ln]
    assert len(stepping) == 1 and "lost the database" in stepping[0], text
    reckon_lines = [ln for ln in text.splitlines() if ln.startswith("reckon: ")]
    assert reckon_lines == [text.strip().splitlines()[-1]], text  # stderr ends in one line
    assert reckon_lines[0].startswith("reckon: controller stepped down: lost the database (holding epoch 1): the "
                                      "lease renewal failed: the connection to postgresql://reckon@"), reckon_lines

    def lost() -> list[str]:
        return [ln for ln in cluster.log_text("ctl-b").splitlines() if "lost the database at" in ln]

    cluster.wait_for(lambda: cluster.log_text("ctl-b").count("still no database") >= 3,
                     what="the standby to retry a few times")
    assert len(lost()) == 1 and lost()[0].endswith(": retrying") and " WARNING " in lost()[0], lost()
    assert cluster.running("ctl-b")
    # Meanwhile it still answers as a standby (with the leader it last read), and its metrics say why.
    assert "not the leader" in cluster.run("nodes", controller=b).stderr
    standby = scrape(b_metrics)
    assert standby[("reckon_database_up", ())] == 0
    assert standby[("reckon_controller_role", (("role", "standby"),))] == 1

    own_postgres.resume()
    cluster.wait_for(lambda: cluster.run("nodes", controller=b).returncode == 0, what="controller b to lead")
    text = cluster.log_text("ctl-b")
    assert "is back after" in text and "leading: epoch 2" in text, text
    assert len(lost()) == 1 and "Traceback" not in text, text
    leading = scrape(b_metrics)
    assert leading[("reckon_database_up", ())] == 1 and leading[("reckon_controller_epoch", ())] == 2
