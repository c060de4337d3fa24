"""pytest plugin (``-p mutant_plugin``, used by mutants.py): install the mutant named by RECKON_MUTANT."""

import os


def pytest_configure(config):
    mid = os.environ.get("RECKON_MUTANT")
    if mid:
        import mutants

        mutants.apply(mutants.ALL[mid])
