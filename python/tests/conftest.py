"""Fixtures: real redis-server processes (stopped after the test, even when it fails)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servers import BACKENDS, Server, start


@pytest.fixture(params=list(BACKENDS))
def backend_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server]]:
    """A server for each backend: the module, the library, scripts (FUNCTION renamed away)."""
    server = start(request.param)
    try:
        yield request.param, server
    finally:
        server.stop()


@pytest.fixture
def module_server() -> Iterator[Server]:
    server = start("module")
    try:
        yield server
    finally:
        server.stop()
