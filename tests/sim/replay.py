"""Replay one simulation scenario with the daemons' logs: ``python -m tests.sim.replay 'Scenario(...)'``.

The argument is the falsifying example Hypothesis printed (the ``scenario=`` value).
``-q`` hides the logs; the violations found are printed either way (exit status 1 if any).
"""

from __future__ import annotations

import logging
import sys

from tests.sim import scenario as S


def main(argv: list[str]) -> int:
    quiet = "-q" in argv
    args = [a for a in argv if a != "-q"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(name)s %(levelname)s %(message)s")
    namespace = {name: getattr(S, name) for name in dir(S) if not name.startswith("_")}
    scenario = eval(args[0], namespace)  # the repr Hypothesis printed: a test helper's own input
    found = S.run(scenario)
    for violation in found:
        print(violation)
    print("violations:", len(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
