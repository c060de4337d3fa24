"""The command line's side of users (issue #20): ``jobs`` shows USER and filters by ``--user``;
``history --user U --since T`` (a date, a date and time, or a duration ago) lists past jobs with
their usage; the per-user limits are controller options and config file keys."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from reckon.daemon.cli import config as daemon_config
from reckon.daemon.cli.jobs import format_job, format_jobs, format_user_history
from reckon.daemon.cli.main import build_parser, daemon_parsers, parse
from reckon.daemon.durations import parse_since


def job(id_: str, user: str | None, **kw) -> dict:
    return {"id": id_, "name": "build", "user": user, "state": "COMPLETED", "agent": "n1", "attempt": 1,
            "exit_code": 0, "signal": None, "submitted_at": 1.0, "finished_at": 2.0, "reason": None, **kw}


def test_jobs_has_a_user_column():
    lines = format_jobs([job("1", "alice"), job("2", None)]).splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "STATE"] and lines[0].split()[-1] == "USER"  # the old columns stay
    assert lines[1].split()[-1] == "alice" and lines[2].split()[-1] == "-"
    assert "user:         alice" in format_job(job("1", "alice"))


def test_user_history_shows_usage_when_the_agent_measured_it():
    usage = {"cpu_user": 9.5, "cpu_system": 0.5, "max_rss": 200 << 20, "wall": 10.0, "source": "cgroup"}
    lines = format_user_history([job("1", "alice", usage=usage), job("2", "alice", usage=None)]).splitlines()
    assert lines[0].split() == ["ID", "NAME", "USER", "STATE", "FINISHED", "WALL", "CPU-USER", "CPU-SYS",
                                "MAX-RSS", "REASON"]
    assert lines[1].split()[-5:] == ["10.0s", "9.5s", "0.5s", "200.0M", "-"]
    assert lines[2].split()[-5:] == ["-", "-", "-", "-", "-"]


def test_since_takes_a_date_a_date_and_time_or_a_duration_ago():
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("1d", now=100_000.0) == 100_000.0 - 86400
    assert parse_since("2026-12-01") == datetime(2026, 12, 1).timestamp()
    assert parse_since("2026-12-01T09:30+00:00") == 1796117400.0
    with pytest.raises(ValueError, match="expected a date .* or a duration ago"):
        parse_since("last tuesday")
    args = parse(["history", "--user", "alice", "--since", "1h"])
    assert args.job is None and args.user == "alice" and abs(args.since - (time.time() - 3600)) < 60
    assert parse(["history", "12"]).job == "12"
    assert parse(["jobs", "--user", "bob"]).user == "bob"


def test_the_per_user_limits_are_options_and_config_keys(tmp_path):
    args = parse(["controller", "--max-running-per-user", "4", "--max-cpus-per-user", "16"])
    assert (args.max_running_per_user, args.max_cpus_per_user) == (4, 16)
    assert parse(["controller"]).max_running_per_user is None
    with pytest.raises(SystemExit):
        parse(["controller", "--max-running-per-user", "0"])
    path = tmp_path / "reckon.toml"
    path.write_text('[controller]\nstate-dir = "/x"\nmax-running-per-user = 4\nmax-cpus-per-user = 8\n')
    found = daemon_config.check(path, daemon_parsers(build_parser()))
    assert (found["controller"]["max_running_per_user"], found["controller"]["max_cpus_per_user"]) == (4, 8)


def test_the_default_memory_per_cpu_is_an_option_and_a_config_key(tmp_path, capsys):
    assert parse(["controller", "--default-mem-per-cpu", "2G"]).default_mem_per_cpu == 2 << 30
    assert parse(["controller", "--default-mem-per-cpu", "512"]).default_mem_per_cpu == 512 << 20  # MiB, as Slurm
    assert parse(["controller"]).default_mem_per_cpu is None  # no default: today's behaviour
    for bad in ("0", "lots", "2Q"):
        with pytest.raises(SystemExit):
            parse(["controller", "--default-mem-per-cpu", bad])
        assert "--default-mem-per-cpu: bad size" in capsys.readouterr().err
    path = tmp_path / "reckon.toml"
    path.write_text('[controller]\nstate-dir = "/x"\ndefault-mem-per-cpu = "1G"\n')
    assert daemon_config.check(path, daemon_parsers(build_parser()))["controller"]["default_mem_per_cpu"] == 1 << 30
    path.write_text('[controller]\nstate-dir = "/x"\ndefault-mem-per-cpu = "1Q"\n')
    with pytest.raises(daemon_config.ConfigError, match="controller.default-mem-per-cpu"):
        daemon_config.check(path, daemon_parsers(build_parser()))


@pytest.mark.parametrize("option", ["--max-running-per-user", "--max-cpus-per-user"])
def test_a_per_user_limit_in_token_mode_is_refused_in_one_line(option, tmp_path, capsys):
    """Token mode's jobs have no owner: a per-user limit there would limit nothing, silently."""
    from reckon.daemon.cli.main import main

    state = tmp_path / "controller"
    assert main(["controller", "--auth", "token", "--listen", "127.0.0.1:0", "--state-dir", str(state),
                 option, "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"reckon: {option} goes with --auth munge") and err.count("\n") == 1, err
    assert not state.exists()
