"""A short chaos run (`reckon chaos`) on real processes: the verdict must be PASS.

The seed is fixed and chosen so that the 30 s schedule holds every fault
kind: SIGKILL, SIGTERM and SIGSTOP of the controller and of agents, an
agent's connections cut and stalled, and a partition of every agent (11
faults).  The job mix is light (2 jobs/s over 3 agents x 4 slots) so that a
loaded 2-core machine keeps up; the run's own hang guard (``--settle-timeout``)
ends it before the test's.  Teardown kills anything the run left behind
(the ``cluster`` fixture's sweep of processes under ``tmp_path``).

Checks, on real processes: INV-TRUE-OUTCOME, INV-TRUE-START-TIME,
INV-FACTS-NO-DUPLICATE, INV-SINGLE-PROCESS (as "ran exactly once"),
INV-NO-INVENTED-WORK, INV-LIVENESS-OUTCOME, and in part INV-LIVENESS-QUIET and
INV-LIVENESS-AGREE (see docs/chaos.md for how each is judged).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e

SEED = 426
EVERY_FAULT = {"kill controller", "term controller", "stop controller", "partition controller",
               "kill agent", "term agent", "stop agent", "cut agent", "stall agent"}


@pytest.mark.long  # about 40 s; tests/daemon/test_chaos_parts.py checks its parts in `make test`
def test_short_chaos_run_passes(cluster, tmp_path):
    # The run starts its own daemons; `cluster` runs the CLI and, at teardown, kills anything
    # left under tmp_path (also when the run is killed by the timeout below).
    result = cluster.run("chaos", "--seed", str(SEED), "--duration", "30", "--agents", "3", "--slots", "4",
                         "--rate", "2", "--fault-every", "2.5", "--max-outage", "4", "--settle-timeout", "60",
                         "--json", "--dir", str(tmp_path / "run"), timeout=135)
    out, err = result.stdout, result.stderr
    print(err)  # the progress and fault lines, shown when the test fails
    report = json.loads(out)
    print(json.dumps(report, indent=1))
    assert set(report["faults_by_kind"]) == EVERY_FAULT, report["faults_by_kind"]
    assert report["seed"] == SEED
    assert report["jobs"] == 60 and report["executions"] == 60
    assert (report["lost"], report["invented"], report["run_twice"], report["stuck"]) == (0, 0, 0, 0), \
        report["problems"]
    assert report["start_missing"] == 0, report["problems"]["start_missing"]
    assert report["crashes"] == []
    assert report["verdict"] == "PASS" and result.returncode == 0
    assert report["controller_starts"] >= 3  # the first start, after the SIGTERM and after the SIGKILL
