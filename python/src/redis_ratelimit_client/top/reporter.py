"""The reporting of a replica's top-keys summaries and the reading of the fleet's (the Rust
client's ``top/mod.rs``), for the async limiter (:class:`AsyncReporter`, a task) and the sync
one (:class:`SyncReporter`, a thread): every ``report_every`` the summaries that changed go
to Redis in one pipelined write, never retried (the next write carries the same summaries
whole); every ``concentration_every`` (and at every report until some limit is found) the
last ``window_minutes`` are read and each limit's concentration exported.

The minute a denial is counted in is read from the limiter's clock (the Clock seam); the
pauses between reports are this process's (as the sweeper's)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Sequence

from ..clock import LimiterClock
from ..metrics import Metrics
from ..protocol import StoreError, classify
from ..store_api import HashFields, HashStore, HashWrite, SyncHashStore
from .merge import TopDenied, limits_of, merge
from .options import TopQuery
from .recorder import Recorder
from .report import Report, ReportError, window_keys

log = logging.getLogger("redis_ratelimit_client")

#: The most policies and limits whose concentration gauges a reporter exports.
MAX_GAUGED = 1_024
#: The bound of a reader's store call, in seconds.
READ_TIMEOUT = 1.0


def decode_all(hashes: Sequence[HashFields]) -> tuple[list[Report], int]:
    """The stored reports of ``hashes``' values, those that cannot be read left out and
    counted."""
    reports, unreadable = [], 0
    for fields in hashes:
        for _, value in fields:
            try:
                reports.append(Report.decode(value))
            except ReportError:
                unreadable += 1
    return reports, unreadable


def unix_s(clock: LimiterClock) -> int:
    """Now in Unix seconds on the limiter's clock."""
    return clock.unix_us() // 1_000_000


def merged(hashes: Sequence[HashFields], query: TopQuery) -> list[TopDenied]:
    """The fleet's top denied keys ``query`` asks, from the window's hashes."""
    reports, _ = decode_all(hashes)
    return merge(reports, query.policy, query.limit, query.count)


async def read(store: HashStore, query: TopQuery, now_unix_s: int, timeout: float = READ_TIMEOUT) -> list[TopDenied]:
    """The fleet's top denied keys ``query`` asks, read from ``store`` at ``now_unix_s``
    (every replica's reports, in every client language); raises ``StoreError``."""
    try:
        hashes = await store.read_hashes(window_keys(now_unix_s, query.minutes), timeout)
    except Exception as error:
        raise classify(error) from error
    return merged(hashes, query)


def read_blocking(
    store: SyncHashStore, query: TopQuery, now_unix_s: int, timeout: float = READ_TIMEOUT
) -> list[TopDenied]:
    """:func:`read` on a sync store."""
    try:
        hashes = store.read_hashes_blocking(window_keys(now_unix_s, query.minutes), timeout)
    except Exception as error:
        raise classify(error) from error
    return merged(hashes, query)


class _Reporter:
    """What both reporters share: the recorder, where they export, the limiter's clock. The
    recorder is the limiter's, held here weakly: a limiter dropped without being closed
    stops its reporter at the next round (as the Rust reporter holds a ``Weak``)."""

    def __init__(self, recorder: Recorder, metrics: Metrics, clock: LimiterClock) -> None:
        self._recorder = weakref.ref(recorder)
        self.options = recorder.options
        self.metrics = metrics
        self.clock = clock
        #: The policies and limits whose concentration was exported last.
        self._gauged: set[tuple[str, str]] = set()
        self._last_read: float | None = None

    @property
    def _write_timeout(self) -> float:
        return max(self.options.report_every, 0.1)

    @property
    def _read_timeout(self) -> float:
        return max(self.options.report_every, READ_TIMEOUT)

    def _writes(self) -> tuple[Recorder | None, list[HashWrite]]:
        """The recorder (``None`` once its limiter is gone) and the writes of a report now."""
        recorder = self._recorder()
        return recorder, [] if recorder is None else recorder.report(unix_s(self.clock))

    def _written(self, recorder: Recorder, error: BaseException | None) -> None:
        self.metrics.top_reported(error is None)
        if error is not None:
            recorder.unwritten()

    def _concentration_due(self) -> bool:
        """Every ``concentration_every``; and at every report until some limit is found (a
        few reads of empty hashes), so the gauges appear within a report of a denial."""
        every = self.options.concentration_every
        if every <= 0:
            return False
        if not self._gauged or self._last_read is None or time.monotonic() - self._last_read >= every:
            self._last_read = time.monotonic()
            return True
        return False

    def _window(self, now_unix_s: int) -> list[str]:
        return window_keys(now_unix_s, self.options.window_minutes)

    def _export(self, hashes: Sequence[HashFields]) -> None:
        """Exports every policy and limit's concentration and denials over the window (those
        exported before and gone now set to 0)."""
        reports, _ = decode_all(hashes)
        now_gauged: set[tuple[str, str]] = set()
        for policy, limit in limits_of(reports)[:MAX_GAUGED]:
            for top in merge(reports, policy, limit, 0):
                self.metrics.top_concentration(policy, limit, top.top10_share, top.denials)
            now_gauged.add((policy, limit))
        for policy, limit in self._gauged - now_gauged:
            self.metrics.top_concentration(policy, limit, 0.0, 0)
        self._gauged = now_gauged


class AsyncReporter(_Reporter):
    """Reports from a task of the running event loop (started by the limiter's first check,
    stopped by ``aclose``)."""

    def __init__(self, recorder: Recorder, store: HashStore, metrics: Metrics, clock: LimiterClock) -> None:
        super().__init__(recorder, metrics, clock)
        self.store = store
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts the task unless it runs in this event loop already (a limiter used by
        several ``asyncio.run`` calls starts one in each)."""
        task = self._task
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            return
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def report_once(self) -> bool:
        """Writes the summaries that changed now, once; raises the store's error. Whether
        the limiter is still there."""
        recorder, writes = self._writes()
        if recorder is None or not writes:
            return recorder is not None
        try:
            await self.store.write_hashes(writes, self._write_timeout)
        except Exception as error:
            self._written(recorder, error)
            raise classify(error) from error
        self._written(recorder, None)
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.options.report_every)
            try:
                if not await self.report_once():
                    return
            except StoreError as error:
                log.debug("redis-ratelimit: top keys not reported: %s", error)
            if self._concentration_due():
                try:
                    hashes = await self.store.read_hashes(self._window(unix_s(self.clock)), self._read_timeout)
                except Exception as error:
                    log.debug("redis-ratelimit: top keys not read: %s", error)
                    continue
                self._export(hashes)


class SyncReporter(_Reporter):
    """Reports from a daemon thread (started by the limiter's first check, stopped by
    ``close``)."""

    def __init__(self, recorder: Recorder, store: SyncHashStore, metrics: Metrics, clock: LimiterClock) -> None:
        super().__init__(recorder, metrics, clock)
        self.store = store
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="redis-ratelimit-top-keys", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._write_timeout + self._read_timeout + 1)

    def report_once(self) -> bool:
        """Writes the summaries that changed now, once; raises the store's error. Whether
        the limiter is still there."""
        recorder, writes = self._writes()
        if recorder is None or not writes:
            return recorder is not None
        try:
            self.store.write_hashes_blocking(writes, self._write_timeout)
        except Exception as error:
            self._written(recorder, error)
            raise classify(error) from error
        self._written(recorder, None)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.options.report_every):
            try:
                if not self.report_once():
                    return
            except StoreError as error:
                log.debug("redis-ratelimit: top keys not reported: %s", error)
            if self._concentration_due():
                try:
                    hashes = self.store.read_hashes_blocking(self._window(unix_s(self.clock)), self._read_timeout)
                except Exception as error:
                    log.debug("redis-ratelimit: top keys not read: %s", error)
                    continue
                self._export(hashes)
