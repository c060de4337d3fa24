"""The status page in a real headless Chromium (Debian's ``chromium``; ``make test-browser``
installs it when missing and root): against a real controller and agent with one finished job,
the DOM after the page's JavaScript ran shows the job (its state, its output) and the node.
Skips, in one line, when Chromium is not there or cannot start.  A screenshot is kept when
$RECKON_STATUS_SCREENSHOT names a file (docs/status-page.png is made that way)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import trio

from tests.http.cluster import DEADLINE, cluster

pytestmark = pytest.mark.browser

# The flags known to work here (a closed network: no background connections), and a fresh profile.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
HELLO = {"name": "hello", "command": ["sh", "-c", "echo hello from the status page"], "slots": 1}


def run_browser(binary: str, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="reckon-chromium-")
    try:
        return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=DEADLINE * 2)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def chromium() -> str:
    """Chromium's binary, once it has shown it starts here; else the test skips, saying why (a sync
    fixture: a skip raised inside the trio run loses its reason)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not installed (make test-browser installs Debian's chromium when root)")
    try:
        probe = run_browser(binary, "--dump-dom", "about:blank")
    except subprocess.TimeoutExpired:
        pytest.skip("chromium does not start here (no page within the deadline)")
    if probe.returncode != 0 or "<html" not in probe.stdout:
        pytest.skip(f"chromium does not start here (exit {probe.returncode})")
    return binary


async def test_the_status_page_shows_the_job_and_the_node(tmp_path, chromium):
    binary = chromium
    with trio.fail_after(DEADLINE * 4):
        async with cluster(tmp_path) as c:
            await c.until(lambda: _joined(c), "the agent joined")
            job = (await c.client.post("/api/v1/jobs", json={"spec": HELLO})).json()["job"]["id"]
            assert (await c.finished(job))["state"] == "COMPLETED"
            waiting = (await c.client.post("/api/v1/jobs", json={"spec": {"name": "wide", "command": ["true"],
                                                                          "slots": 64}, "queue_anyway": True}))
            waiting = waiting.json()["job"]["id"]  # a live job: the page's query of live and recent jobs
            page = f"{c.url}/?job={job}#token=t0ken"  # the token once in the fragment, never sent to the server
            # --virtual-time-budget: the page's fetches and a refresh or two run before the DOM is dumped.
            shown = await trio.to_thread.run_sync(run_browser, binary, "--virtual-time-budget=5000",
                                                  "--dump-dom", page)
            dom = shown.stdout
            assert shown.returncode == 0, shown.stderr[-2000:]
            row = re.search(rf'<tr data-job="{job}"[^>]*>(.*?)</tr>', dom)
            assert row is not None, dom
            assert "hello" in row.group(1) and "COMPLETED" in row.group(1) and "node1" in row.group(1)
            live = re.search(rf'<tr data-job="{waiting}"[^>]*>(.*?)</tr>', dom)
            assert live is not None and "wide" in live.group(1) and "PENDING" in live.group(1), dom
            node = re.search(r'<tr data-node="node1">(.*?)</tr>', dom)
            assert node is not None and "IDLE" in node.group(1) and "0 / 2" in node.group(1), dom
            assert re.search(r'<pre id="output">hello from the status page\s*</pre>', dom), dom
            assert re.search(r'<p id="error" class="error" hidden', dom), dom  # no error shown
            assert 'name="viewport" content="width=device-width' in dom  # laid out for a phone (status.css)

            shot = tmp_path / "status-page.png"
            taken = await trio.to_thread.run_sync(run_browser, binary, "--virtual-time-budget=5000",
                                                  "--window-size=1100,820", f"--screenshot={shot}", page)
            assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]
            keep = os.environ.get("RECKON_STATUS_SCREENSHOT")
            if keep:
                shutil.copyfile(shot, Path(keep))


async def _joined(c):
    return (await c.client.get("/api/v1/nodes")).json()["nodes"] or None
