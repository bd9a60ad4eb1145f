"""How the arena reaches one environment server: TCP URL or Unix socket, plus its control token."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the clients are imported where they are made: a Ray worker only carries endpoints
    from mcp import Client

    from arena.runtime.mcp_http import McpHttpClient
    from environments.serving.control import ControlClient

UDS_BASE_URL = "http://localhost"


@dataclass(frozen=True)
class Endpoint:
    """Address of a running environment server (picklable: it crosses Ray actor boundaries)."""

    env: str
    worker_id: str
    base_url: str
    control_token: str
    uds: str | None = None
    control_url: str | None = None
    """The control plane's own listener (TCP); ``control_uds`` over a Unix socket."""
    control_uds: str | None = None

    @property
    def control_base(self) -> str:
        return self.control_url or self.base_url

    def control(self, timeout: float = 30.0) -> ControlClient:
        from environments.serving.control import ControlClient

        uds = self.control_uds or self.uds
        return ControlClient(
            self.control_base, self.control_token, uds=Path(uds) if uds else None, timeout=timeout
        )

    def mcp_url(self, session_id: str) -> str:
        return f"{self.base_url}/s/{session_id}/mcp"

    def mcp_http(self, connections: int = 256) -> McpHttpClient:
        """The lean MCP client for all sessions of this server (create it in the loop that uses it)."""
        from arena.runtime.mcp_http import McpHttpClient

        return McpHttpClient(self.base_url, uds=self.uds, connections=connections)

    def mcp_client(self, session_id: str) -> Client:
        """An official MCP client bound to one session (over the Unix socket for containers)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        from arena.runtime.mcp_http import PROTOCOL_VERSION

        url = self.mcp_url(session_id)
        if self.uds is None:
            return Client(url, mode=PROTOCOL_VERSION)
        http = httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=self.uds), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        return Client(streamable_http_client(url, http_client=http), mode=PROTOCOL_VERSION)
