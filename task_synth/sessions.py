"""What synthesis and verification need from the arena's runtime, as protocols task_synth owns.

The arena passes its ``EnvPool`` in (it satisfies ``SessionProvider``); task_synth never imports arena.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class ControlPlane(Protocol):
    """Read-only facts about an environment server."""

    async def info(self) -> dict[str, Any]: ...

    async def sample(self, rows: int) -> dict[str, list[dict[str, Any]]]: ...


class ServerHandle(Protocol):
    """The server a session lives on."""

    @property
    def control(self) -> ControlPlane: ...


class SessionLease(Protocol):
    """One isolated session of one environment: tool calls as the arena, programs, reset and diff."""

    @property
    def worker(self) -> ServerHandle: ...

    async def call_as_arena(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]: ...

    async def run_program(self, source: str, *, timeout_s: float = 5.0) -> dict[str, Any]: ...

    async def reset(self) -> None: ...

    async def diff(self, before: str = "seed", after: str = "current") -> dict[str, Any]: ...


class SessionProvider(Protocol):
    """Hands out fresh sessions of an environment reference (``async with sessions.session(ref)``)."""

    def session(self, env: str) -> AbstractAsyncContextManager[SessionLease]: ...
