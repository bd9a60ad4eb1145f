"""Client for an environment server's control plane (the arena side; agents never get the token)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx


class ControlError(RuntimeError):
    """The control plane answered with an error (unknown session, bad token, server gone...)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ControlClient:
    """Async client for ``/control/...`` of one environment server (TCP URL or Unix socket)."""

    def __init__(self, base_url: str, token: str, *, uds: Path | None = None, timeout: float = 30.0) -> None:
        transport = httpx.AsyncHTTPTransport(uds=str(uds)) if uds is not None else None
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ControlError(
                f"{method} {path}: environment server unreachable ({type(exc).__name__}: {exc})"
            ) from exc
        if response.status_code >= 400:
            try:
                detail = response.json().get("error", response.text)
            except ValueError:
                detail = response.text
            raise ControlError(f"{method} {path}: {detail}", status=response.status_code)
        return response.json()

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/control/health")

    async def info(self) -> dict[str, Any]:
        """Environment metadata, full tool specs, table row counts, DDL and seed hash."""
        return await self._request("GET", "/control/info")

    async def sample(self, rows: int = 5) -> dict[str, list[dict[str, Any]]]:
        return await self._request("GET", "/control/sample", params={"rows": rows})

    async def create_session(self, session_id: str | None = None) -> str:
        body = {"session_id": session_id} if session_id else {}
        return (await self._request("POST", "/control/sessions", json=body))["session_id"]

    async def close_session(self, session_id: str) -> None:
        await self._request("DELETE", f"/control/sessions/{session_id}")

    async def reset(self, session_id: str) -> None:
        await self._request("POST", f"/control/sessions/{session_id}/reset")

    async def snapshot(self, session_id: str) -> str:
        return (await self._request("POST", f"/control/sessions/{session_id}/snapshot"))["snapshot_id"]

    async def restore(self, session_id: str, snapshot_id: str) -> None:
        await self._request(
            "POST", f"/control/sessions/{session_id}/restore", json={"snapshot_id": snapshot_id}
        )

    async def state_hash(self, session_id: str, ref: str = "current") -> str:
        return (await self._request("GET", f"/control/sessions/{session_id}/hash", params={"ref": ref}))[
            "hash"
        ]

    async def diff(self, session_id: str, before: str = "seed", after: str = "current") -> dict[str, Any]:
        params = {"before": before, "after": after}
        return (await self._request("GET", f"/control/sessions/{session_id}/diff", params=params))["diff"]

    async def call(
        self, session_id: str, tool: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run a tool as the arena (reference solutions); returns ``{"ok": bool, "value": ...}``."""
        body = {"name": tool, "arguments": arguments or {}}
        return await self._request("POST", f"/control/sessions/{session_id}/call", json=body)

    def mcp_url(self, session_id: str) -> str:
        """The agent-facing MCP endpoint of a session."""
        return f"{self.base_url}/s/{session_id}/mcp"

    async def aclose(self) -> None:
        await self._http.aclose()
