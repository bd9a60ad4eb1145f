"""A long-lived MCP client for one lease, run in its own task.

The SDK client is built on anyio task groups: when its server dies, it cancels the task that entered
it. Entering it inside a dedicated task keeps such failures contained there; callers get a normal
exception on their request future instead of a stray cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp import Client

_STOP = object()


class SessionClient:
    """Serialises ``call_tool`` requests through one MCP client living in a background task."""

    def __init__(self, make_client: Callable[[], Client]) -> None:
        self._make_client = make_client
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        future: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()
        await self._queue.put((name, arguments, future))
        return await future

    async def _run(self) -> None:
        pending: asyncio.Future[Any] | None = None
        try:
            async with self._make_client() as client:
                while True:
                    item = await self._queue.get()
                    if item is _STOP:
                        return
                    name, arguments, pending = item
                    if pending.cancelled():
                        continue
                    result = await client.call_tool(name, arguments)
                    if not pending.done():
                        pending.set_result(result)
                    pending = None
        except BaseException as exc:  # every failure goes to the waiting caller
            self._fail_all(pending, exc if isinstance(exc, Exception) else ConnectionError(repr(exc)))

    def _fail_all(self, pending: asyncio.Future[Any] | None, exc: Exception) -> None:
        waiting = [pending] if pending is not None else []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not _STOP:
                waiting.append(item[2])
        for future in waiting:
            if not future.done():
                future.set_exception(exc)

    async def aclose(self) -> None:
        """Stop the background client (the server session itself is closed by the pool)."""
        if self._task is None or self._task.done():
            return
        await self._queue.put(_STOP)
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 2.0)
        except (TimeoutError, Exception):
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
