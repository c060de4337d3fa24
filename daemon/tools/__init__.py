"""Project tooling that is not part of a daemon (the protocol document generator)."""
