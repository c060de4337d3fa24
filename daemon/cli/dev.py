"""`reckon dev`: a controller and N agents in one foreground process (like `nomad agent -dev`).

Stopping it (Ctrl-C, SIGTERM) stops the daemons.  Jobs run under supervisors
of their own and outlive an agent, so what happens to them depends on where
the state is:

* a temporary state directory (the default) is deleted on stop, and a job
  still running would go on writing into a directory that no longer exists,
  with nobody left to learn its outcome.  So its jobs are stopped first
  (SIGTERM, SIGKILL after ``KILL_GRACE``) and their supervisors waited for;
  only then is the directory deleted.  If some supervisor does not end in
  time the directory is kept, and the message says where;
* with ``--state-dir`` nothing is deleted and running jobs go on, as with real
  agents: the next ``reckon dev --state-dir`` on it adopts them.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from pathlib import Path

import trio

from reckon.daemon.agent.daemon import AgentOptions, run_agent
from reckon.daemon.client import resolve_token
from reckon.daemon.controller.server import ControllerOptions, serve_controller
from reckon.daemon.ops.logformat import announce
from reckon.daemon.agent.runner import JobRunner

log = logging.getLogger("reckon.dev")

KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of a job still running at stop
SUPERVISOR_WAIT = 10.0  # more seconds for the supervisors to record the ends


async def run_dev(args: argparse.Namespace) -> None:
    token = resolve_token(args.token_file)

    def say(text: str) -> None:
        announce(text, args.log_format, logger="reckon.dev")

    temporary = args.state_dir is None
    base = Path(tempfile.mkdtemp(prefix="reckon-dev-")) if temporary else args.state_dir
    agent_dirs = [base / f"agent-{i}" for i in range(1, args.agents + 1)]
    try:
        host, port = args.listen
        async with trio.open_nursery() as nursery:
            port, _ = await nursery.start(serve_controller, ControllerOptions(
                host=host, port=port, state_dir=base / "controller", token=token))
            url = f"ws://{host}:{port}"
            for i, state_dir in enumerate(agent_dirs, start=1):
                await nursery.start(run_agent, AgentOptions(
                    name=f"agent-{i}", slots=args.slots, state_dir=state_dir, controller=url,
                    token=token))
            say(f"reckon dev: controller on {url}, {args.agents} agent(s) x {args.slots} slots, state in {base}")
            say(f"  export RECKON_CONTROLLER={url}; reckon submit -- echo hello; reckon jobs")
            say("  Ctrl-C stops everything")
    finally:
        with trio.CancelScope(shield=True):
            if temporary:
                left = await stop_jobs(agent_dirs)
                if left:
                    say(f"reckon dev: {left} job(s) did not stop in time; keeping the state in {base}")
                else:
                    shutil.rmtree(base, ignore_errors=True)
            else:
                say(f"reckon dev: stopped; jobs still running go on, state in {base}")


async def stop_jobs(agent_dirs: list[Path]) -> int:
    """Stop every job still running under these agents' state directories and wait
    for its supervisor to record the end; the number of jobs that did not end in time."""
    left = 0
    for state_dir in agent_dirs:
        if not (state_dir / "jobs").is_dir():
            continue
        async with JobRunner(state_dir) as runner:
            adopted = await runner.adopt(runner.on_disk())
            running = {key for key, what in adopted.items() if what == "running"}
            for job, attempt in sorted(running):
                log.info("stopping job %s attempt %s", job, attempt)
                await runner.kill(job, attempt, grace=KILL_GRACE)
            with trio.move_on_after(KILL_GRACE + SUPERVISOR_WAIT):
                while running:
                    outcome = await runner.exits.receive()
                    running.discard((outcome.job, outcome.attempt))
            left += len(running)
    return left
