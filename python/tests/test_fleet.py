"""Three replicas, each its own process on its own connection, share one quota: 30 admitted
of 120 checks, not 30 each."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

from servers import Server


def test_three_processes_admit_one_quota(backend_server: tuple[str, Server]) -> None:
    _, server = backend_server
    worker = Path(__file__).with_name("fleet_worker.py")
    processes = [
        subprocess.Popen(
            [sys.executable, str(worker), str(server.port), "40"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        # The three check at once: each starts when all are connected.
        for process in processes:
            assert process.stdout is not None
            readable, _, _ = select.select([process.stdout], [], [], 30)
            assert readable, "a replica did not connect within 30 s"
            assert process.stdout.readline() == "ready\n"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0, out
            results.append(json.loads(out))
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert sum(result["admitted"] for result in results) == 30, results
    assert all(set(result["sources"]) <= {"store", "cache"} for result in results), results
