"""HTTP limits that make a server hold against hostile clients: connection cap, read timeouts, body cap.

``guarded_protocol`` subclasses uvicorn's httptools protocol: a connection past the cap is closed as
soon as it is accepted (it holds no file descriptor and no memory); a connection that does not deliver
a request's headers within ``header_timeout_s``, or its body within ``body_timeout_s``, is closed; a body
over ``max_body_bytes`` gets 413 (by ``Content-Length`` before it is read, or once the bytes pass the cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from dataclasses import dataclass, replace
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MIN_SPARE_FILES = 1024


@dataclass(frozen=True)
class HttpLimits:
    """Limits of one listener."""

    max_connections: int = 512
    backlog: int = 256
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = 1_000_000
    keep_alive_s: int = 60


DATA_LIMITS = HttpLimits()
CONTROL_LIMITS = HttpLimits(max_connections=256, backlog=128, max_body_bytes=8_000_000, keep_alive_s=120)


def from_env(limits: HttpLimits) -> HttpLimits:
    """``limits`` with overrides from ``ARENA_HTTP_HEADER_TIMEOUT_S``, ``ARENA_HTTP_BODY_TIMEOUT_S`` and
    ``ARENA_HTTP_MAX_CONNECTIONS`` (deployments and tests)."""
    changes: dict[str, float | int] = {}
    if value := os.environ.get("ARENA_HTTP_HEADER_TIMEOUT_S"):
        changes["header_timeout_s"] = float(value)
    if value := os.environ.get("ARENA_HTTP_BODY_TIMEOUT_S"):
        changes["body_timeout_s"] = float(value)
    if value := os.environ.get("ARENA_HTTP_MAX_CONNECTIONS"):
        changes["max_connections"] = int(value)
    return replace(limits, **changes)  # type: ignore[arg-type]


_TOO_LARGE = (
    b"HTTP/1.1 413 Content Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b'content-length: 38\r\n\r\n{"error":"the request body is too big"}'
)


def guarded_protocol(limits: HttpLimits) -> type[HttpToolsProtocol]:
    """An httptools protocol class enforcing ``limits`` (one class, and one count, per listener)."""
    active: set[Any] = set()

    class Guarded(HttpToolsProtocol):
        _refused = False
        _timer: asyncio.TimerHandle | None = None
        _body_bytes = 0
        _rejected = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(active) >= limits.max_connections:
                self._refused = True
                transport.abort()
                return
            active.add(self)
            super().connection_made(transport)
            self._arm(limits.header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            active.discard(self)
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expire(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                self.transport.abort()

        def on_message_begin(self) -> None:
            self._body_bytes = 0
            self._arm(limits.header_timeout_s)
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            length = None
            for name, value in self.headers:
                if name == b"content-length" and value.strip().isdigit():
                    length = int(value)
            if length is not None and length > limits.max_body_bytes:
                self._refuse_body()
                return
            self._arm(limits.body_timeout_s)
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self._rejected:
                return
            self._body_bytes += len(body)
            if self._body_bytes > limits.max_body_bytes:
                self._refuse_body()
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            if self._rejected:
                return
            self._disarm()
            super().on_message_complete()

        def _refuse_body(self) -> None:
            self._rejected = True
            self._disarm()
            if not self.transport.is_closing():
                self.transport.write(_TOO_LARGE)
                self.transport.close()
            if self.cycle is not None:
                self.cycle.disconnected = True

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()

    Guarded.__name__ = Guarded.__qualname__ = "GuardedHttpToolsProtocol"
    return Guarded


def raise_open_files(needed: int) -> int:
    """Raise the soft RLIMIT_NOFILE to at least ``needed`` plus spare (up to the hard limit); the new
    soft limit. The connection caps stay well below it, so accepting never fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed + MIN_SPARE_FILES
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
