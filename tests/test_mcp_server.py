"""The MCP server, driven by the official `mcp` client over streamable HTTP and stdio (no mocks)."""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest
from mcp import Client, StdioServerParameters

from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess

CONTROL_OPERATIONS = {
    "reset",
    "snapshot",
    "restore",
    "state_hash",
    "hash",
    "diff",
    "create_session",
    "close_session",
}


async def test_http_tools_listed_without_control_operations(
    server: ServerProcess, control: ControlClient
) -> None:
    sid = await control.create_session()
    async with Client(control.mcp_url(sid)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert {"get_account", "deposit", "spin"} <= names
    assert not names & CONTROL_OPERATIONS
    await control.close_session(sid)


async def test_http_read_and_write_calls(control: ControlClient) -> None:
    sid = await control.create_session()
    async with Client(control.mcp_url(sid)) as client:
        read = await client.call_tool("get_account", {"account_id": 3})
        assert not read.is_error and read.structured_content["id"] == 3
        balance = read.structured_content["balance"]
        write = await client.call_tool("deposit", {"account_id": 3, "amount": 7})
        assert not write.is_error and write.structured_content["balance"] == balance + 7
        again = await client.call_tool("get_account", {"account_id": 3})
        assert again.structured_content["balance"] == balance + 7
    diff = await control.diff(sid)
    assert diff["accounts"]["changed"][0]["key"] == {"id": 3}
    await control.close_session(sid)


async def test_concurrent_sessions_are_isolated_and_reset_restores_seed(control: ControlClient) -> None:
    info = await control.info()
    sids = [await control.create_session() for _ in range(8)]

    async def episode(index: int, sid: str) -> None:
        async with Client(control.mcp_url(sid)) as client:
            for _ in range(index + 1):
                result = await client.call_tool("deposit", {"account_id": 1, "amount": 100})
                assert not result.is_error

    await asyncio.gather(*(episode(i, sid) for i, sid in enumerate(sids)))
    for i, sid in enumerate(sids):
        inserted = (await control.diff(sid))["entries"]["inserted"]
        assert len(inserted) == i + 1, "each session sees exactly its own writes"
    hashes = {await control.state_hash(sid) for sid in sids}
    assert len(hashes) == len(sids)
    for sid in sids:
        await control.reset(sid)
        assert await control.state_hash(sid) == info["seed_hash"]
        await control.close_session(sid)


async def test_http_error_results_and_server_stays_up(server: ServerProcess, control: ControlClient) -> None:
    sid = await control.create_session()
    async with Client(control.mcp_url(sid)) as client:
        bad_args = await client.call_tool("deposit", {"account_id": "one"})
        assert bad_args.is_error and bad_args.structured_content["error"]["code"] == "VALIDATION_ERROR"
        assert {e["field"] for e in bad_args.structured_content["error"]["details"]["errors"]} == {
            "account_id",
            "amount",
        }
        unknown = await client.call_tool("reset", {})
        assert unknown.is_error and unknown.structured_content["error"]["code"] == "UNKNOWN_TOOL"
        crash = await client.call_tool("explode_after_write", {"account_id": 5})
        assert crash.is_error and crash.structured_content["error"]["code"] == "INTERNAL"
        missing = await client.call_tool("get_account", {"account_id": 999})
        assert missing.structured_content["error"]["code"] == "NOT_FOUND"
        assert "NOT_FOUND" in missing.content[0].text
        ok = await client.call_tool("get_account", {"account_id": 5})
        assert ok.structured_content["balance"] >= 0, "the crashed call's write was rolled back"
    assert server.alive()
    assert await control.diff(sid) == {}
    await control.close_session(sid)


async def test_control_plane_is_not_reachable_by_agents(
    control: ControlClient, server: ServerProcess
) -> None:
    sid = await control.create_session()
    for base_url, status in ((server.control_url, 401), (server.base_url, 404)):  # data plane: no such route
        async with httpx.AsyncClient(base_url=base_url) as anonymous:
            for method, path in (
                ("POST", f"/control/sessions/{sid}/reset"),
                ("GET", f"/control/sessions/{sid}/diff"),
                ("POST", "/control/sessions"),
                ("GET", "/control/info"),
            ):
                response = await anonymous.request(method, path)
                assert response.status_code == status, (base_url, path)
    await control.close_session(sid)
    with pytest.raises(ControlError) as err:
        await control.reset(sid)
    assert err.value.status == 404 and sid in str(err.value)


async def test_closed_session_is_rejected_on_the_data_plane(control: ControlClient) -> None:
    sid = await control.create_session()
    await control.close_session(sid)
    with pytest.raises(Exception) as err:
        async with Client(control.mcp_url(sid)) as client:
            await client.call_tool("get_account", {"account_id": 1})
    assert "not found" in repr(err.value).lower()


async def test_stdio_transport(testbed_ref: str) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "environments.serving", testbed_ref, "--transport", "stdio"]
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "deposit" in names and not names & CONTROL_OPERATIONS
        first = await client.call_tool("deposit", {"account_id": 2, "amount": 5})
        second = await client.call_tool("get_account", {"account_id": 2})
        assert second.structured_content["balance"] == first.structured_content["balance"]
        bad = await client.call_tool("deposit", {"account_id": 2})
        assert bad.is_error and bad.structured_content["error"]["code"] == "VALIDATION_ERROR"
        crash = await client.call_tool("explode_after_write", {"account_id": 2})
        assert crash.is_error and crash.structured_content["error"]["code"] == "INTERNAL"
        after = await client.call_tool("get_account", {"account_id": 2})
        assert after.structured_content == second.structured_content
