"""``limits``' own storage and strategy tests, run against our storages: the sdist of the
pinned ``limits`` is downloaded from PyPI (``pip download``, cached in a temporary directory,
never committed), its ``tests/`` copied beside a conftest of ours (a redis-server with the
module instead of their docker services, the database flushed before each test, coroutine
tests run with ``asyncio.run`` instead of pytest-asyncio, ``lazy_fixtures.lf`` a stub), our
URIs added to their storage parametrisations, and only the tests of our URIs run.

    python python/tests/limits_upstream.py      # prints the counts and each failure

``test_limits_upstream.py`` runs it in the suite and checks the outcome test by test against
:data:`EXPECTED_FAILURES` (each one a documented difference).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

LIMITS_VERSION = "5.8.0"
HERE = Path(__file__).resolve().parent
#: The id of our parameters in their suite (``-k`` selects them).
OUR_ID = "redis_ratelimit"
#: The test files that take their storage parametrisations.
SUITE_FILES = ("test_storage.py", "test_strategy.py", "aio/test_storage.py", "aio/test_strategy.py")

#: Tests of theirs that fail on our storages by design, and why (python/README.md, "limits").
EXPECTED_FAILURES = {
    r"(aio/)?test_strategy\.py::Test(Async)?SlidingWindow::.*": (
        "the sliding window counter strategy is not offered (RL.SLIDING through the client is)"
    ),
    r"(aio/)?test_strategy\.py::Test(Async)?FixedWindow::test_fixed_window\[.*": (
        "windows are aligned to the epoch, not started by the first hit (fails when a 2 s boundary"
        " falls inside the test's first second)"
    ),
    r"(aio/)?test_strategy\.py::Test(Async)?MovingWindow::test_moving_window_huge_cost\[.*": (
        "a moving window holds at most ratelimit.max-log-entries (10,000) entries; theirs is 1,000,000"
    ),
}

_CONFTEST = '''
"""Written by redis_ratelimit_client's limits_upstream.py: our redis-server, not docker."""
import asyncio
import inspect
import os
import sys

import pytest

sys.path.insert(0, {tests_dir!r})
import redis_ratelimit_client.contrib.limits_storage  # noqa: F401  (registers the schemes)
from servers import start

_SERVER = start("module")
os.environ["RL_LIMITS_PORT"] = str(_SERVER.port)


def pytest_unconfigure(config):
    _SERVER.stop()


@pytest.fixture(autouse=True)
def _flushed():
    _SERVER.client().flushall()
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {{name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
'''

_INI = """[pytest]
markers =
    unit
    integration
    redis
    redis_sentinel
    redis_cluster
    memory
    mongodb
    memcached
    valkey
    valkey_cluster
    asyncio
    flaky
    benchmark
"""

_LAZY_FIXTURES_STUB = '''"""A stub of pytest-lazy-fixtures: our parameters need no fixture."""


def lf(name):
    return None
'''

_OURS_SYNC = (
    f'    "{OUR_ID}": pytest.param("redis-ratelimit://127.0.0.1:" + os.environ["RL_LIMITS_PORT"], {{}}, None,'
    f' id="{OUR_ID}"),\n'
)
_OURS_ASYNC = (
    f'    "{OUR_ID}": pytest.param("async+redis-ratelimit://127.0.0.1:" + os.environ["RL_LIMITS_PORT"], {{}}, None,'
    f' id="{OUR_ID}"),\n'
)
_CONCRETE = (
    '        pytest.param({scheme} + "://127.0.0.1:" + __import__("os").environ["RL_LIMITS_PORT"], {{}},'
    ' __import__("redis_ratelimit_client.contrib.{module}", fromlist=["x"]).{cls}, None,'
    f' id="{OUR_ID}"),\n'
)


@dataclass
class Outcome:
    passed: list[str]
    failed: dict[str, str]

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed)


def sdist(cache: Path) -> Path:
    """The pinned sdist's extracted directory (downloaded once into ``cache``)."""
    extracted = cache / f"limits-{LIMITS_VERSION}"
    if not (extracted / "tests").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             f"limits=={LIMITS_VERSION}", "-d", str(cache)],
            check=True,
        )  # fmt: skip
        with tarfile.open(cache / f"limits-{LIMITS_VERSION}.tar.gz") as archive:
            archive.extractall(cache, filter="data")
    return extracted


def _insert_before(text: str, marker: str, addition: str) -> str:
    if marker not in text:
        raise RuntimeError(f"limits' tests changed: '{marker.strip()}' is gone")
    return text.replace(marker, addition + marker, 1)


def prepare(source: Path, workdir: Path) -> Path:
    """Their tests with ours added, in ``workdir``; returns the tests' root."""
    root = workdir / "suite"
    shutil.copytree(source / "tests", root / "tests")
    (root / "tests" / "conftest.py").write_text(_CONFTEST.format(tests_dir=str(HERE)))
    (root / "pytest.ini").write_text(_INI)
    (root / "pytest_lazy_fixtures.py").write_text(_LAZY_FIXTURES_STUB)
    utils = root / "tests" / "utils.py"
    text = utils.read_text()
    text = _insert_before(text, "}\nALL_STORAGES_ASYNC = {", _OURS_SYNC)
    text = _insert_before(text, "}\n\nall_storage = ", _OURS_ASYNC)
    utils.write_text(text)
    for name, scheme, module, cls in (
        ("test_storage.py", '"redis-ratelimit"', "limits_storage", "RedisRateLimitStorage"),
        ("aio/test_storage.py", '"async+redis-ratelimit"', "limits_storage_async", "AsyncRedisRateLimitStorage"),
    ):
        path = root / "tests" / name
        text = path.read_text()
        marker = "    ],\n)\nclass TestConcreteStorages:"
        path.write_text(_insert_before(text, marker, _CONCRETE.format(scheme=scheme, module=module, cls=cls)))
    return root


def run(cache: Path | None = None) -> Outcome:
    """Runs their tests of our URIs; each test's outcome."""
    cache = cache or Path(tempfile.gettempdir()) / "redis-ratelimit-limits-sdist"
    source = sdist(cache)
    with tempfile.TemporaryDirectory(prefix="rl-limits-suite-") as workdir:
        root = prepare(source, Path(workdir))
        report = Path(workdir) / "report.xml"
        environment = dict(os.environ, PYTHONPATH=str(root))
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(root / "pytest.ini"),
             "--rootdir", str(root), "-k", OUR_ID, f"--junitxml={report}",
             *(str(root / "tests" / name) for name in SUITE_FILES)],
            cwd=root, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        if not report.is_file():
            raise RuntimeError("limits' suite did not run (no report)")
        return _outcome(report)


def _outcome(report: Path) -> Outcome:
    passed: list[str] = []
    failed: dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").removeprefix("tests.").replace(".", "/")
        module = re.sub(r"/(Test\w+)$", r".py::\1", module) if "/Test" in module else module + ".py"
        name = f"{module}::{case.get('name')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None:
            continue
        if problem is None:
            passed.append(name)
        else:
            failed[name] = (problem.get("message") or "").splitlines()[0][:200] if problem.get("message") else ""
    return Outcome(passed, failed)


def expected(name: str) -> str | None:
    """Why ``name`` fails by design, or ``None``."""
    for pattern, why in EXPECTED_FAILURES.items():
        if re.fullmatch(pattern, name):
            return why
    return None


def main() -> None:
    outcome = run()
    sync = [n for n in [*outcome.passed, *outcome.failed] if not n.startswith("aio/")]
    print(
        f"limits {LIMITS_VERSION}'s tests of our storages: {len(outcome.passed)} of {outcome.total} pass "
        f"(sync {sum(1 for n in outcome.passed if not n.startswith('aio/'))} of {len(sync)}, "
        f"async {sum(1 for n in outcome.passed if n.startswith('aio/'))} of {outcome.total - len(sync)})"
    )
    for name, message in sorted(outcome.failed.items()):
        print(f"FAILED {name}: {expected(name) or 'UNEXPECTED'}: {message}")


if __name__ == "__main__":
    main()
