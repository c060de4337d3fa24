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
    p.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--dir", type=path, default=None, help="run in this (new) directory instead of a temporary one")
