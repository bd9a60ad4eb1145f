"""Generated programs run inside a real environment server (control route), never in the test process."""

from __future__ import annotations

import os
import time

import pytest

from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess

RUNAWAY = """
def solve(tools):
    while True:
        try:
            pass
        except Exception:
            pass
"""
SUM_BALANCES = """
def solve(tools):
    total = 0
    for account_id in range(1, 4):
        total += tools.call("get_account", account_id=account_id)["balance"]
    return {"total": total}
"""


async def test_a_program_calls_tools_and_returns_json(control: ControlClient) -> None:
    sid = await control.create_session()
    balances = [
        (await control.call(sid, "get_account", {"account_id": i}))["value"]["balance"] for i in (1, 2, 3)
    ]
    run = await control.run_program(sid, SUM_BALANCES)
    assert run["ok"] and run["value"] == {"total": sum(balances)}
    assert run["calls"] == [{"tool": "get_account", "arguments": {"account_id": i}} for i in (1, 2, 3)]


async def test_program_writes_are_real_writes_of_the_session(control: ControlClient) -> None:
    sid, other = await control.create_session(), await control.create_session()
    source = 'def solve(tools):\n    return tools.call("deposit", account_id=2, amount=5)'
    assert (await control.run_program(sid, source))["ok"]
    diff = await control.diff(sid)
    assert [row["key"] for row in diff["accounts"]["changed"]] == [{"id": 2}]
    assert await control.diff(other) == {}


async def test_tool_errors_reach_the_program_as_exceptions(control: ControlClient) -> None:
    sid = await control.create_session()
    source = """
def solve(tools):
    try:
        tools.call("get_account", account_id=999)
    except ToolCallError as exc:
        return {"code": exc.code}
"""
    assert (await control.run_program(sid, source))["value"] == {"code": "NOT_FOUND"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def solve(tools):\n    return {'x': 1 / 0}", "line 2, in solve\nZeroDivisionError"),
        ("import os\ndef solve(tools):\n    return {}", "ImportError: module 'os' is not available"),
        ("def solve(tools):\n    return open('/etc/passwd').read()", "NameError: name 'open'"),
        ("def solve(tools):\n    return {1, 2}", "the result is not JSON"),
        ("def main(tools):\n    return {}", "defines no function solve(tools)"),
        ("def solve(tools:\n", "SyntaxError"),
        (
            "def solve(tools):\n    while True:\n        tools.call('get_account', account_id=1)",
            "more than 500 tool calls",
        ),
    ],
)
async def test_program_failures_are_reported_with_their_cause(
    control: ControlClient, source: str, expected: str
) -> None:
    run = await control.run_program(await control.create_session(), source)
    assert not run["ok"] and expected in run["error"], run["error"]


async def test_a_runaway_program_is_stopped_and_the_server_keeps_serving(
    control: ControlClient, server: ServerProcess
) -> None:
    sid = await control.create_session()
    # Catching Exception cannot keep it alive: the time limit is not an Exception.
    source = RUNAWAY
    start = time.perf_counter()
    run = await control.run_program(sid, source, timeout_s=0.5)
    assert not run["ok"] and "ran longer than 0.5s" in run["error"]
    assert time.perf_counter() - start < 5
    assert (await control.run_program(sid, SUM_BALANCES))["ok"]
    assert server.alive() and os.getpid() != server.pid


async def test_bad_program_requests_are_clear_errors(control: ControlClient) -> None:
    sid = await control.create_session()
    with pytest.raises(ControlError, match="source"):
        await control._request("POST", f"/control/sessions/{sid}/program", json_body={"source": 3})
    with pytest.raises(ControlError, match="unknown session"):
        await control.run_program("nope", SUM_BALANCES)
