"""A synchronous MCP client for Celery workers and the admin, on the official `mcp` SDK (asyncio/anyio inside).

The invariant: no call into this module blocks longer than its timeout, whatever the server does.
- Every connection is owned by one coroutine on a per-process event-loop thread (`_background_loop`): the
  SDK's context managers (the stdio subprocess, the HTTP session) are entered and left in that task, as anyio
  requires. Callers hand it work through a queue and wait on a `concurrent.futures.Future` with a timeout.
- Connecting (spawn + handshake + tools/list) is bounded by the connect timeout; a call by its own timeout,
  enforced twice: by the SDK (`read_timeout_seconds`, which keeps the session usable) and, should the
  transport itself wedge, by the caller's wait, after which the connection is given up (the process killed).
- A server that fails to start, hangs or crashes ends in one of the typed errors of `agents.mcp.errors`, with
  the tail of its stderr (redacted) when it wrote any, never a hung worker.

Connections are pooled per process (`mcp_connection`), keyed by the server's whole config, so an idle stdio
server costs one subprocess per worker process (bench/bench_tools.py measures it) and a turn does not pay its
start-up. A dead connection is dropped and the next use starts a new one. The loop thread is started lazily
and again after a fork, so Celery's prefork children each get their own.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.mcp.config import STDIO, STREAMABLE_HTTP, McpServerConfig
from agents.mcp.errors import McpCallError, McpConnectError, McpConnectionLostError, McpError, McpTimeoutError
from agents.mcp.isolation import stdio_environment
from agents.mcp.output import redacted
from core.text import storable_text

logger = logging.getLogger(__name__)

# The caller's own wait exceeds the SDK's timeout by this much: the SDK's timeout normally fires first and
# leaves the session usable; the caller's only catches a wedged transport.
CALLER_GRACE_SECONDS = 2.0
CLOSE_WAIT_SECONDS = 5.0
STDERR_TAIL_CHARS = 400
MAX_POOLED_CONNECTIONS = 32


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class McpCallResult:
    blocks: tuple[Any, ...]  # the SDK's content blocks
    structured: Any
    is_error: bool


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_pid
    with _loop_lock:
        # After a fork the parent's loop thread does not exist in the child: start one of its own.
        if _loop is None or _loop_pid != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="mcp-client-loop", daemon=True).start()
            _loop, _loop_pid = loop, os.getpid()
        return _loop


def _sdk_error(exc: BaseException, *, config: McpServerConfig, during: str) -> McpError:
    """The SDK's (or the transport's) exception as one of ours; its message redacted of the server's secrets."""
    # The SDK is imported lazily on purpose: it pulls in starlette, uvicorn and pydantic models, which a web
    # process or a worker whose bots have no MCP server never needs.
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # anyio wraps the one real error in task-group groups
    name = config.name
    if isinstance(exc, McpError):
        return exc
    if isinstance(exc, MCPError):
        message = redacted(storable_text(exc.error.message), secrets=config.secrets())
        if exc.code == REQUEST_TIMEOUT:
            return McpTimeoutError(f"{name}: {during} timed out", server=name)
        if exc.code == CONNECTION_CLOSED:
            return McpConnectionLostError(f"{name}: the server closed the connection during {during}", server=name)
        return McpCallError(f"{name}: {during} failed: {message}", server=name)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return McpTimeoutError(f"{name}: {during} timed out", server=name)
    message = redacted(storable_text(f"{type(exc).__name__}: {exc}"), secrets=config.secrets())
    return McpConnectionLostError(f"{name}: {during} failed: {message}", server=name)


class McpConnection:
    """One open session with one server; thread-safe; see the module docstring."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.tools: tuple[McpTool, ...] = ()
        self.is_alive = False
        self._queue: asyncio.Queue | None = None
        self._owner: concurrent.futures.Future | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")

    # --- the caller's side (any thread) ------------------------------------------------------------------

    def open(self) -> "McpConnection":
        """Start or connect to the server, handshake and list its tools, within the connect timeout."""
        loop = _background_loop()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._owner = asyncio.run_coroutine_threadsafe(self._own(ready), loop)
        try:
            self.tools = ready.result(timeout=self.config.connect_timeout_seconds)
        except concurrent.futures.TimeoutError:
            self._give_up()
            raise McpConnectError(
                f"{self.config.name}: the server did not answer within "
                f"{self.config.connect_timeout_seconds:g} s{self._stderr_tail()}",
                server=self.config.name,
            ) from None
        except McpError as error:
            self._give_up()
            raise McpConnectError(f"{error.message}{self._stderr_tail()}", server=self.config.name) from None
        self.is_alive = True
        return self

    def call_tool(self, name: str, arguments: dict[str, Any], *, timeout_seconds: float) -> McpCallResult:
        async def call(client: Any) -> McpCallResult:
            result = await client.call_tool(name, arguments, read_timeout_seconds=timeout_seconds)
            return McpCallResult(
                blocks=tuple(result.content or ()), structured=result.structured_content, is_error=result.is_error
            )

        return self._submit(call, timeout_seconds=timeout_seconds, during=f"tool {name!r}")

    def close(self) -> None:
        self.is_alive = False
        owner, queue = self._owner, self._queue
        if owner is None or owner.done():
            return
        if queue is not None:
            _background_loop().call_soon_threadsafe(queue.put_nowait, None)
        try:
            owner.result(timeout=CLOSE_WAIT_SECONDS)
        except BaseException:  # noqa: BLE001 - closing: whatever the session ended in, it is over
            owner.cancel()

    def _submit(self, work: Callable[[Any], Awaitable[Any]], *, timeout_seconds: float, during: str) -> Any:
        if not self.is_alive or self._queue is None:
            raise McpConnectionLostError(f"{self.config.name}: the connection is closed", server=self.config.name)
        done: concurrent.futures.Future = concurrent.futures.Future()
        _background_loop().call_soon_threadsafe(self._queue.put_nowait, (work, done, during))
        try:
            return done.result(timeout=timeout_seconds + CALLER_GRACE_SECONDS)
        except concurrent.futures.TimeoutError:
            # The SDK's own timeout did not fire: the transport is wedged. Give the connection up.
            self._give_up()
            raise McpTimeoutError(f"{self.config.name}: {during} timed out", server=self.config.name) from None
        except McpConnectionLostError as error:
            self.is_alive = False
            raise McpConnectionLostError(f"{error.message}{self._stderr_tail()}", server=error.server) from None

    def _give_up(self) -> None:
        self.is_alive = False
        if self._owner is not None:
            self._owner.cancel()  # cancels the owner task: the SDK leaves its contexts, the process is killed

    def _stderr_tail(self) -> str:
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            # Redacted whole, then cut (issue 30, finding 4): a tail cut first can keep half a secret.
            text = redacted(storable_text(self._stderr.read()), secrets=self.config.secrets())
        except (OSError, ValueError):
            return ""
        text = text[-STDERR_TAIL_CHARS:].strip()
        return f" (server stderr: {text})" if text else ""

    # --- the owner's side (the loop thread) --------------------------------------------------------------

    def _transport(self, *, http_client: Any) -> Any:
        # Lazy SDK import: see _sdk_error.
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if self.config.transport == STDIO:
            parameters = StdioServerParameters(
                command=self.config.command,
                args=list(self.config.args),
                env=stdio_environment(configured=self.config.environment),
            )
            return stdio_client(parameters, errlog=self._stderr)
        if self.config.transport == STREAMABLE_HTTP:
            return streamable_http_client(self.config.url, http_client=http_client)
        raise McpConnectError(f"{self.config.name}: unknown transport {self.config.transport!r}")

    async def _own(self, ready: concurrent.futures.Future) -> None:
        # Lazy SDK import: see _sdk_error.
        import anyio
        import httpx2
        from mcp import Client
        from mcp.shared._httpx_utils import create_mcp_http_client

        self._queue = asyncio.Queue()
        try:
            async with contextlib.AsyncExitStack() as stack:
                http_client = None
                if self.config.transport == STREAMABLE_HTTP:
                    timeout = httpx2.Timeout(
                        self.config.call_timeout_seconds, connect=self.config.connect_timeout_seconds
                    )
                    http_client = await stack.enter_async_context(
                        create_mcp_http_client(headers=dict(self.config.headers), timeout=timeout)
                    )
                client = await stack.enter_async_context(
                    Client(
                        self._transport(http_client=http_client),
                        read_timeout_seconds=self.config.call_timeout_seconds,
                    )
                )
                listed = await client.list_tools()
                ready.set_result(
                    tuple(
                        McpTool(name=tool.name, description=tool.description or "", input_schema=tool.input_schema)
                        for tool in listed.tools
                    )
                )
                async with anyio.create_task_group() as group:
                    while (item := await self._queue.get()) is not None:
                        group.start_soon(self._serve, client, *item)
                    group.cancel_scope.cancel()
        except BaseException as exc:
            self.is_alive = False
            error = _sdk_error(exc, config=self.config, during="the session" if ready.done() else "connecting")
            if not ready.done():
                ready.set_exception(error)
            self._fail_pending(error)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.is_alive = False

    async def _serve(self, client: Any, work: Callable, done: concurrent.futures.Future, during: str) -> None:
        try:
            result = await work(client)
        except Exception as exc:  # noqa: BLE001 - every failure of one call goes back to its caller, typed
            error = _sdk_error(exc, config=self.config, during=during)
            if isinstance(error, McpConnectionLostError):
                self.is_alive = False
            if not done.done():
                done.set_exception(error)
            return
        if not done.done():
            done.set_result(result)

    def _fail_pending(self, error: McpError) -> None:
        while self._queue is not None and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and not item[1].done():
                item[1].set_exception(error)


_pool: dict[McpServerConfig, McpConnection] = {}
_pool_lock = threading.Lock()


def mcp_connection(*, config: McpServerConfig) -> McpConnection:
    """The process's open connection for `config`, connecting (within the connect timeout) when there is none."""
    with _pool_lock:
        connection = _pool.get(config)
        if connection is not None and connection.is_alive:
            return connection
        _pool.pop(config, None)
    connection = McpConnection(config).open()
    evicted: list[McpConnection] = []
    with _pool_lock:
        existing = _pool.get(config)
        if existing is not None and existing.is_alive:  # another thread connected meanwhile: keep one
            evicted.append(connection)
            connection = existing
        else:
            _pool[config] = connection
        while len(_pool) > MAX_POOLED_CONNECTIONS:
            evicted.append(_pool.pop(next(iter(_pool))))
    for stale in evicted:
        stale.close()
    return connection


def mcp_connection_discard(*, config: McpServerConfig) -> None:
    with _pool_lock:
        connection = _pool.pop(config, None)
    if connection is not None:
        connection.close()


def mcp_connections_close_all() -> None:
    with _pool_lock:
        connections = list(_pool.values())
        _pool.clear()
    for connection in connections:
        connection.close()
