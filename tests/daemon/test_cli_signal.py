"""`reckon signal`'s signal names (a table of Linux's numbers: the light path imports no enum)."""

from __future__ import annotations

import signal

import pytest

from reckon.daemon.cli.batch import parse_signal
from reckon.daemon.client_common import UsageError


@pytest.mark.parametrize("text", ["USR1", "SIGUSR1", "usr1", "10", " sigusr1 "])
def test_names_and_numbers(text):
    assert parse_signal(text) == signal.SIGUSR1


def test_the_table_is_the_kernels():
    for sig in signal.Signals:
        if sig.name not in ("SIGIOT", "SIGPOLL", "SIGCLD", "SIGRTMIN", "SIGRTMAX") and sig < 32:
            assert parse_signal(sig.name) == sig, sig.name
    assert (parse_signal("RTMIN"), parse_signal("RTMIN+2"), parse_signal("RTMAX-1")) == (
        signal.SIGRTMIN, signal.SIGRTMIN + 2, signal.SIGRTMAX - 1)


@pytest.mark.parametrize("text", ["NOPE", "0", "65", "RTMIN+40", "", "-9"])
def test_a_bad_signal_is_one_line(text):
    with pytest.raises(UsageError, match="unknown signal"):
        parse_signal(text)
