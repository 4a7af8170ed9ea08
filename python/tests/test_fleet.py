"""Three replicas, each its own process on its own connection, share one quota: 30 admitted
of 120 checks, not 30 each."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from servers import Server


def test_three_processes_admit_one_quota(backend_server: tuple[str, Server]) -> None:
    _, server = backend_server
    start = time.time() + 1.5
    worker = Path(__file__).with_name("fleet_worker.py")
    processes = [
        subprocess.Popen(
            [sys.executable, str(worker), str(server.port), "40", str(start)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, out
        results.append(json.loads(out))
    assert sum(result["admitted"] for result in results) == 30, results
    assert all(set(result["sources"]) <= {"store", "cache"} for result in results), results
