"""`reckon chaos`: real processes, seeded faults, and a verdict on every job.

A controller and several agents run on loopback as real processes; the
agents reach the controller through proxies the run can cut or stall.  Jobs
record their own truth (``truth.py``); faults (SIGKILL, SIGTERM,
SIGSTOP/SIGCONT of the controller and of agents, connection cuts and
stalls, partitions) follow a schedule drawn from the seed (``schedule.py``);
``run.py`` drives it all, heals, waits and judges; ``main.py`` is the command
and ``options.py`` its options (light: every `reckon` call builds them).  Exit status 0 on PASS,
1 on FAIL.  How it works and a recorded long run: docs/chaos.md.
"""
