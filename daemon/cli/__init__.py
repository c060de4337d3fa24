"""`reckon`: the command line, and the commands that run daemons for a user (demo, dev)."""
