"""pytest plugin (``-p mutant_plugin``, used by mutants.py): install the mutant named by RECKON_MUTANT."""

import os


def pytest_configure(config):
    mid = os.environ.get("RECKON_MUTANT")
    if mid:
        import tests.model.mutants as mutants
        mutants.apply(mutants.ALL[mid])
