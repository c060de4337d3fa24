"""`reckon bench failover` and `bench throughput --store`: their options (no processes started;
the runs themselves are too slow for `make test`: docs/ha.md, "Figures")."""

from __future__ import annotations

import pytest

from reckon.daemon.cli.main import build_parser


def parse(*argv: str):
    return build_parser().parse_args(["bench", *argv])


def test_failover_options_and_their_defaults():
    args = parse("failover")
    assert (args.variant, args.lease, args.slots, args.runs) == ("both", 5.0, 2, 5)
    args = parse("failover", "--variant", "freeze", "--lease", "2.5", "--runs", "1", "--json")
    assert (args.variant, args.lease, args.runs, args.json) == ("freeze", 2.5, 1, True)


@pytest.mark.parametrize("argv", [("failover", "--variant", "pause"), ("failover", "--lease", "0"),
                                  ("throughput", "--store", "mysql")])
def test_bad_bench_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2 and "argument --" in capsys.readouterr().err


def test_throughput_store_defaults_to_sqlite():
    assert parse("throughput").store == "sqlite"
    assert parse("throughput", "--store", "postgres").store == "postgres"
