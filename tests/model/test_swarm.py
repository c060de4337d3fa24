"""The stronger random machine (tests/model/swarm.py) under the active Hypothesis profile.

``ci`` (the default, ``make test``) runs 200 examples of up to 50 steps: with the
plain machine's 300 beside it, the pair stays within the suite's time budget;
``RECKON_HYPOTHESIS_PROFILE=fuzz`` for long runs.  What it reaches, against the
plain machine, and which re-injected bugs it catches: docs/checking.md.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.swarm import SwarmMachine


def test_swarm_machine():
    fuzz = os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz"
    run_state_machine_as_test(SwarmMachine, settings=settings() if fuzz else settings(max_examples=200))
