"""The stronger random machine (tests/model/swarm.py) under the active Hypothesis profile.

``ci`` (the default) runs it as ``make test`` does; ``RECKON_HYPOTHESIS_PROFILE=fuzz``
for long runs.  What it reaches, against the plain machine, is in docs/checking.md.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from swarm import SwarmMachine


def test_swarm_machine():
    run_state_machine_as_test(SwarmMachine, settings=settings())
