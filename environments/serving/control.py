"""Client for an environment server's control plane (the arena side; agents never get the token)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp


class ControlError(RuntimeError):
    """The control plane answered with an error (unknown session, bad token, server gone...)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ControlClient:
    """Async client for ``/control/...`` of one environment server (TCP URL or Unix socket).

    ``base_url`` is the control plane's listener; ``data_url`` the data plane's (for ``mcp_url``).

    Built on aiohttp (about a fifth of httpx's CPU per request: synthesis makes thousands of these
    calls). The connection pool is opened on first use, in the event loop that uses it.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        uds: Path | None = None,
        timeout: float = 30.0,
        data_url: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.data_url = (data_url or base_url).rstrip("/")
        self._headers = {"authorization": f"Bearer {token}"}
        self._uds = str(uds) if uds is not None else None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            connector = (
                aiohttp.UnixConnector(path=self._uds, limit=256)
                if self._uds is not None
                else aiohttp.TCPConnector(limit=256)
            )
            self._http = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=self._timeout,
                skip_auto_headers=("User-Agent",),
            )
        return self._http

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        data = None if json_body is None else json.dumps(json_body, separators=(",", ":"))
        headers = None if data is None else {"content-type": "application/json"}
        query = None if params is None else {k: str(v) for k, v in params.items()}
        try:
            async with self._session().request(
                method, self.base_url + path, data=data, params=query, headers=headers
            ) as response:
                status, raw = response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ControlError(
                f"{method} {path}: environment server unreachable ({type(exc).__name__}: {exc})"
            ) from exc
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if status >= 400:
            detail = body.get("error", raw.decode(errors="replace")) if isinstance(body, dict) else raw
            raise ControlError(f"{method} {path}: {detail}", status=status)
        if not isinstance(body, dict):
            raise ControlError(f"{method} {path}: not a JSON object ({raw[:200]!r})", status=status)
        return body

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/control/health")

    async def info(self) -> dict[str, Any]:
        """Environment metadata, full tool specs, table row counts, DDL and seed hash."""
        return await self._request("GET", "/control/info")

    async def sample(self, rows: int = 5) -> dict[str, list[dict[str, Any]]]:
        return await self._request("GET", "/control/sample", params={"rows": rows})

    async def create_session(self, session_id: str | None = None) -> str:
        body = {"session_id": session_id} if session_id else {}
        return (await self._request("POST", "/control/sessions", json_body=body))["session_id"]

    async def close_session(self, session_id: str) -> None:
        await self._request("DELETE", f"/control/sessions/{session_id}")

    async def reset(self, session_id: str) -> None:
        await self._request("POST", f"/control/sessions/{session_id}/reset")

    async def snapshot(self, session_id: str) -> str:
        return (await self._request("POST", f"/control/sessions/{session_id}/snapshot"))["snapshot_id"]

    async def restore(self, session_id: str, snapshot_id: str) -> None:
        await self._request(
            "POST", f"/control/sessions/{session_id}/restore", json_body={"snapshot_id": snapshot_id}
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
        return await self._request("POST", f"/control/sessions/{session_id}/call", json_body=body)

    async def run_program(
        self, session_id: str, source: str, timeout_s: float = 5.0, entry: str = "solve"
    ) -> dict[str, Any]:
        """Run a generated program in the server against the session: ``{ok, value, error, calls}``."""
        body = {"source": source, "entry": entry, "timeout_s": timeout_s}
        return await self._request("POST", f"/control/sessions/{session_id}/program", json_body=body)

    def mcp_url(self, session_id: str) -> str:
        """The agent-facing MCP endpoint of a session."""
        return f"{self.data_url}/s/{session_id}/mcp"

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
