"""What polling the HTTP API costs: a real ``reckon controller --http`` holding N jobs (submitted
through the API, no agent: they stay PENDING), then the median of sequential requests of each
kind over one keep-alive connection.  A figure for docs/http-api.md, not a test::

    python -m tests.http.bench_poll [JOBS]
"""

from __future__ import annotations

import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

SPEC = {"name": "x", "command": ["true"], "slots": 1}


def median_ms(client: httpx.Client, path: str, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        client.get(path).raise_for_status()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main(jobs: int = 10_000) -> None:
    with tempfile.TemporaryDirectory(prefix="reckon-bench-http-") as tmp:
        log = Path(tmp) / "log"
        with log.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "reckon.daemon.cli", "controller", "--state-dir",
                                     f"{tmp}/c", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            url, deadline = None, time.monotonic() + 60
            while url is None and time.monotonic() < deadline:
                time.sleep(0.1)
                found = re.search(r"HTTP API on (http://[\d.:]+)/api/v1/", log.read_text())
                url = found.group(1) if found else None
            assert url is not None, log.read_text()
            with httpx.Client(base_url=url + "/api/v1", timeout=120) as client:
                for _ in range(jobs // 1000):
                    client.post("/jobs", json={"specs": [SPEC] * 1000, "queue_anyway": True}).raise_for_status()
                middle = str(jobs // 2)
                for path, n in [("/whoami", 300), (f"/query?ids={middle}", 300),
                                ("/query?states=PENDING&limit=10", 300), ("/status", 300),
                                ("/jobs", 20), (f"/jobs/{middle}", 20)]:
                    print(f"GET /api/v1{path}: median {median_ms(client, path, n):.1f} ms of {n} ({jobs} jobs)")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
