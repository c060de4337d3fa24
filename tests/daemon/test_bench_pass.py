"""`reckon bench pass`: the scheduling pass timed on its own; its figures are a benchmark's
(docs/performance.md), so these check only what each pass placed and the refusals."""

from __future__ import annotations

import pytest

from reckon.daemon.bench import passcost
from reckon.daemon.cli.main import build_parser
from reckon.daemon.client_common import UsageError


def test_each_pass_places_what_its_cluster_allows():
    args = build_parser().parse_args(["bench", "pass", "--agents", "100", "--slots", "1", "--pending", "300",
                                      "--budget", "50", "--runs", "1"])
    figures, lines = passcost.run_pass_bench(args)
    by_policy = {r["policy"]: r for r in figures["pass"]}
    assert set(by_policy) == {"fifo", "backfill"}
    for r in by_policy.values():
        assert r["full"]["placed"] == 0  # every agent is full
        assert r["cold"]["placed"] == 50  # 100 slots free, 300 one-slot jobs: the budget is the bound
        assert r["one_freed"]["placed"] == 1  # the hole one ended job leaves
        assert r["full"]["median_ms"] > 0
    assert lines[0].startswith("one pass, 100 agents x 1 slots, 300 pending jobs")


def test_the_freed_job_is_one_the_cluster_runs():
    s, (agent, job, width, used) = passcost.build("fifo", 3, 4, 10, 2, full=True, now=100.0)
    assert s.place(now=100.0) == [] and used == 4 and 1 <= width <= 4
    passcost._free_one(s, (agent, job, width, used), 4)
    placed = s.place(now=100.0)
    assert placed and {a for _, a in placed} == {agent}


@pytest.mark.parametrize("flag", ["--agents", "--pending", "--runs"])
def test_a_count_below_one_is_refused_in_one_line(flag):
    args = build_parser().parse_args(["bench", "pass", flag, "0"])
    with pytest.raises(UsageError, match=f"^{flag} 0: give a positive number$"):
        passcost.run_pass_bench(args)
