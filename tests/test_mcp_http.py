"""The lean MCP client against a real environment server: same results as the official `mcp` client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from arena.runtime.mcp_http import PROTOCOL_VERSION, McpHttpClient, McpTransportError
from environments.serving.control import ControlClient
from environments.serving.process import ServerProcess

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_account", {"account_id": 3}),  # success
    ("deposit", {"account_id": 3, "amount": 7}),  # a write
    ("get_account", {"account_id": 999}),  # a tool error: NOT_FOUND
    ("deposit", {"account_id": "one"}),  # invalid arguments: VALIDATION_ERROR
    ("reset", {}),  # unknown tool
    ("explode_after_write", {"account_id": 5}),  # a crashing tool: INTERNAL, rolled back
]


@pytest.fixture
async def lean(server: ServerProcess) -> AsyncIterator[McpHttpClient]:
    client = McpHttpClient(server.base_url)
    yield client
    await client.aclose()


async def test_same_results_as_the_official_client(control: ControlClient, lean: McpHttpClient) -> None:
    sdk_sid, lean_sid = await control.create_session(), await control.create_session()
    async with Client(control.mcp_url(sdk_sid), mode=PROTOCOL_VERSION) as client:
        for name, arguments in CALLS:
            expected = await client.call_tool(name, arguments)
            got = await lean.call_tool(lean_sid, name, arguments)
            assert got == expected, name
        assert await lean.list_tools(lean_sid) == await client.list_tools()
    results = [await lean.call_tool(lean_sid, n, a) for n, a in CALLS]
    codes = [r.structured_content.get("error", {}).get("code") for r in results]
    assert codes == [None, None, "NOT_FOUND", "VALIDATION_ERROR", "UNKNOWN_TOOL", "INTERNAL"]
    assert await control.state_hash(sdk_sid) != await control.state_hash(lean_sid), "two deposits vs one"
    for sid in (sdk_sid, lean_sid):
        await control.close_session(sid)


async def test_concurrent_sessions_share_one_client(control: ControlClient, lean: McpHttpClient) -> None:
    sids = [await control.create_session() for _ in range(16)]

    async def episode(index: int, sid: str) -> int:
        for _ in range(index % 4 + 1):
            assert not (await lean.call_tool(sid, "deposit", {"account_id": 1, "amount": 1})).is_error
        return len((await control.diff(sid))["entries"]["inserted"])

    inserted = await asyncio.gather(*(episode(i, s) for i, s in enumerate(sids)))
    assert inserted == [i % 4 + 1 for i in range(16)], "each session saw only its own writes"
    for sid in sids:
        await control.close_session(sid)


async def test_closed_session_and_dead_server_raise(testbed_ref: str) -> None:
    proc = ServerProcess(testbed_ref).start()
    own_control = proc.control()
    client = McpHttpClient(proc.base_url)
    try:
        live = await own_control.create_session()
        assert not (await client.call_tool(live, "get_account", {"account_id": 1})).is_error
        await own_control.close_session(live)
        with pytest.raises(MCPError) as err:  # as the official client reports it
            await client.call_tool(live, "get_account", {"account_id": 1})
        assert "not found" in str(err.value).lower()
        proc.stop()
        with pytest.raises(McpTransportError):
            await client.call_tool(live, "get_account", {"account_id": 1})
    finally:
        proc.stop()
        await own_control.aclose()
        await client.aclose()
    with pytest.raises(McpTransportError):
        await client.call_tool(live, "get_account", {"account_id": 1})
