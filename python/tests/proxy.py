"""A TCP proxy on a free loopback port in front of a real server, for the tests of commands
whose reply is lost: it forwards both ways, and once armed (:meth:`CuttingProxy.cut_after`),
forwards the next command holding a marker, reads the server's reply to it (so the server
ran it), drops that reply and closes the client's connection. Runs its own event loop on a
thread; :meth:`close` (or the context manager) stops it even when a test fails."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType


class CuttingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        #: How many client connections were cut after their command ran.
        self.cuts = 0
        #: How many commands holding the marker went through (cut or not).
        self.marked = 0
        #: How many connections the client closed (redis-py closes one after a timeout).
        self.closed_by_client = 0
        self._marker: bytes | None = None
        self._armed = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._run, name="cutting-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10) or self._server is None:
            raise RuntimeError("the proxy did not start")
        self.port: int = self._server.sockets[0].getsockname()[1]

    def cut_after(self, marker: bytes, times: int = 1) -> None:
        """Cuts the connection of the next ``times`` commands holding ``marker`` once the
        server has answered them (the reply never reaches the client)."""
        with self._lock:
            self._marker, self._armed, self.marked = marker, times, 0

    def disarm(self) -> None:
        with self._lock:
            self._armed = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._track, "127.0.0.1", 0)
            self._started.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def _doomed_by(self, chunk: bytes) -> bool:
        with self._lock:
            if self._marker is None or self._marker not in chunk:
                return False
            self.marked += 1
            if self._armed <= 0:
                return False
            self._armed -= 1
            return True

    async def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.discard(task)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        doomed = asyncio.Event()

        async def upstream() -> None:
            while chunk := await client_reader.read(65536):
                if self._doomed_by(chunk):
                    doomed.set()
                server_writer.write(chunk)
                await server_writer.drain()
            with self._lock:
                self.closed_by_client += 1

        async def downstream() -> None:
            while chunk := await server_reader.read(65536):
                if doomed.is_set():
                    with self._lock:
                        self.cuts += 1
                    return
                client_writer.write(chunk)
                await client_writer.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (client_writer, server_writer):
                writer.close()

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
