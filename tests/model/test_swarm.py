"""The stronger random machine (tests/model/swarm.py) under the active Hypothesis profile.

``ci`` (the default) runs 50 examples of up to 50 steps in ``make test`` and 200 in ``make
test-long``; ``RECKON_HYPOTHESIS_PROFILE=fuzz`` for long runs.  What it reaches, against the
plain machine, and which re-injected bugs it catches: docs/checking.md.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.swarm import SwarmMachine


# `make test` runs CI_SHORT_EXAMPLES (about 20 s on 2 loaded cores), `make test-long` CI_EXAMPLES.
CI_SHORT_EXAMPLES, CI_EXAMPLES = 50, 200


def test_swarm_machine():
    fuzz = os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz"
    run_state_machine_as_test(SwarmMachine, settings=settings() if fuzz else settings(max_examples=CI_SHORT_EXAMPLES))


@pytest.mark.long
def test_swarm_machine_whole_draw():
    if os.environ.get("RECKON_HYPOTHESIS_PROFILE") == "fuzz":
        pytest.skip("`make fuzz` draws its examples in test_swarm_machine")
    run_state_machine_as_test(SwarmMachine, settings=settings(max_examples=CI_EXAMPLES))
