"""The options of `reckon chaos` (argparse alone: the command line builds every parser on every call)."""

from __future__ import annotations

import argparse
from typing import Any

from reckon.daemon.args import path, positive
from reckon.daemon.durations import duration


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("chaos", parents=[common],
                       help="a chaos run: real daemons, seeded faults, every job checked against its own truth")
    p.add_argument("--seed", type=int, default=None, help="replay this fault schedule and job mix (default: random)")
    p.add_argument("--duration", type=duration, default=60.0, help="seconds of submissions and faults (default 60)")
    p.add_argument("--agents", type=int, default=3, help="agents (default 3)")
    p.add_argument("--slots", type=int, default=4, help="slots per agent (default 4)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--jobs", type=int, default=None, help="jobs in all, spread over the duration")
    group.add_argument("--rate", type=positive, default=3.0, help="jobs per second (default 3)")
    p.add_argument("--fault-every", type=duration, default=4.0, help="mean seconds between faults (default 4)")
    p.add_argument("--max-outage", type=duration, default=6.0, help="longest fault, seconds (default 6)")
    p.add_argument("--settle-timeout", type=duration, default=300.0,
                   help="seconds after the last fault for every job to end (default 300)")
    p.add_argument("--users", type=_users, default=(),
                   help="comma-separated existing Unix users who submit the jobs, on a MUNGE cluster the run "
                        "starts (--auth munge; run as root; each job's record must name its submitter, and it "
                        "must run as that user)")
    p.add_argument("--munge-socket", type=str, default=None, help="the munged socket (with --users; default munged's)")
    p.add_argument("--mem", type=_size, default=None, help="every job's memory limit, e.g. 64M (needs enforcement "
                                                          "on the agents: cgroups)")
    p.add_argument("--hog-share", type=float, default=0.1,
                   help="with --mem: the share of jobs that allocate twice their limit and must end FAILED "
                        "reason oom (default 0.1)")
    p.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--dir", type=path, default=None, help="run in this (new) directory instead of a temporary one")


def _users(text: str) -> tuple[str, ...]:
    import pwd

    users = tuple(u for u in text.split(",") if u)
    for user in users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise argparse.ArgumentTypeError(f"no Unix user {user!r} on this machine") from None
    return users


def _size(text: str) -> int:
    from reckon.model.resources import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
