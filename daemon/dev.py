"""`reckon dev`: a controller and N agents in one foreground process (like `nomad agent -dev`)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import trio

from .agent_daemon import AgentOptions, run_agent
from .client import resolve_token
from .controller_server import ControllerOptions, serve_controller


async def run_dev(args: argparse.Namespace) -> None:
    token = resolve_token(args.token_file)
    with tempfile.TemporaryDirectory(prefix="reckon-dev-") as tmp:
        base = args.state_dir or Path(tmp)
        host, port = args.listen
        async with trio.open_nursery() as nursery:
            port, _ = await nursery.start(serve_controller, ControllerOptions(
                host=host, port=port, state_dir=base / "controller", token=token))
            url = f"ws://{host}:{port}"
            for i in range(1, args.agents + 1):
                await nursery.start(run_agent, AgentOptions(
                    name=f"agent-{i}", slots=args.slots, state_dir=base / f"agent-{i}", controller=url,
                    token=token))
            print(f"reckon dev: controller on {url}, {args.agents} agent(s) x {args.slots} slots, state in {base}")
            print(f"  export RECKON_CONTROLLER={url}; reckon submit -- echo hello; reckon jobs")
            print("  Ctrl-C stops everything", flush=True)
