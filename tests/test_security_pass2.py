"""Untrusted code, second pass: the boundaries an outside red team broke (issue 22), each attacked again.

Every case here reproduces one attack; each failed against the code before this pass (run there).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandbox import Sandbox, Worker, WorkerFailed
from environments.sdk.testing import EnvHarness
from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess
from tests.test_agentworld_sandbox import LOAD, TOOLS, write_release
from tests.test_sandbox import escape

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

STOP_READING = """
signal = sys.modules["builtins"].__import__("signal")
signal.signal(signal.SIGALRM, signal.SIG_IGN)
os.write(1, b'{"call":"big","arguments":{}}\\n')
signal.pause()
"""
"""A program that ignores its alarm, asks for a tool call and never reads the answer (no CPU used)."""

PAUSE = """
signal = sys.modules["builtins"].__import__("signal")
signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.pause()
"""


# -- 1. every write to a sandboxed child is bounded by the deadline ---------------------------------


async def test_a_program_that_stops_reading_its_pipe_ends_at_its_deadline() -> None:
    """The answer (1 MB) is larger than the pipe; before, the server's write waited forever."""
    sandbox = Sandbox()
    try:
        start = time.perf_counter()
        run = await asyncio.wait_for(
            sandbox.run(lambda name, args: (True, "x" * 1_000_000), escape(STOP_READING), timeout_s=0.5),
            15,
        )
        elapsed = time.perf_counter() - start
        assert not run.ok and "ran longer than 0.5s" in (run.error or ""), run
        assert elapsed < 3, elapsed
        assert len(run.calls) == 1
    finally:
        await sandbox.aclose()


HANDLE_STOP_READING = """
import os, signal

def handle(message):
    if message.get("op") == "trap":  # answer first, then never read stdin again
        os.write(1, b'{"ok":true,"value":1}\\n')
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.pause()
    return len(str(message))
"""


def test_a_persistent_worker_that_stops_reading_is_killed_at_the_deadline() -> None:
    """BFCL's path (``Worker``): the next request is larger than the pipe; before, ``_write`` blocked
    the session's thread forever."""
    worker = Worker(HANDLE_STOP_READING, name="trap", preload=("signal",))
    outcome: list[BaseException | object] = []

    def second_request() -> None:
        try:
            outcome.append(worker.request({"op": "big", "pad": "x" * 1_000_000}, 0.5))
        except BaseException as exc:
            outcome.append(exc)

    try:
        assert worker.request({"op": "trap"}, 5) == 1
        start = time.perf_counter()
        thread = threading.Thread(target=second_request, daemon=True)
        thread.start()
        thread.join(10)
        elapsed = time.perf_counter() - start
        assert outcome and isinstance(outcome[0], WorkerFailed), outcome
        assert "ran longer than 0.5s" in str(outcome[0]) and elapsed < 3, elapsed
        assert worker.request({"op": "again"}, 5) > 0  # a fresh child serves the next request
    finally:
        worker.close()


@pytest.fixture
def own_server(testbed_ref: str) -> Iterator[ServerProcess]:
    server = ServerProcess(testbed_ref).start()
    yield server
    if server.alive():
        os.killpg(server.pid, signal.SIGKILL)
        server.proc.wait()  # type: ignore[union-attr]


async def test_closing_the_session_aborts_its_paused_program(control: ControlClient) -> None:
    """A program that pauses (no calls, no CPU) is ended when its session closes, not at its deadline."""
    sid = await control.create_session()
    body = {"source": escape(PAUSE), "timeout_s": 20}
    running = asyncio.create_task(
        control._request("POST", f"/control/sessions/{sid}/program", json_body=body)
    )
    await asyncio.sleep(0.5)
    start = time.perf_counter()
    await control.close_session(sid)
    with pytest.raises(ControlError) as err:
        await asyncio.wait_for(running, 10)
    assert err.value.status == 404 and time.perf_counter() - start < 3
    assert (await control.health())["ok"]


async def test_sigterm_stops_a_server_whose_programs_hang(own_server: ServerProcess) -> None:
    control = own_server.control()
    try:
        sid = await control.create_session()
        body = {"source": escape(PAUSE), "timeout_s": 30}
        running = asyncio.create_task(
            control._request("POST", f"/control/sessions/{sid}/program", json_body=body)
        )
        await asyncio.sleep(0.5)
        start = time.perf_counter()
        os.kill(own_server.pid, signal.SIGTERM)
        while own_server.alive() and time.perf_counter() - start < 10:
            await asyncio.sleep(0.1)
        assert not own_server.alive(), "the server ignored SIGTERM while a program hung"
        assert time.perf_counter() - start < 8
        running.cancel()
    finally:
        await control.aclose()


# -- 2. the server keeps a bounded amount of a run's tool calls ---------------------------------------


async def test_a_runs_retained_tool_calls_are_bounded_with_limit_exceeded() -> None:
    """Twenty 1 MB call lines (of ``{},``: many small objects) used to be parsed, kept and answered."""
    applied: list[str] = []
    source = (
        "def solve(tools):\n    for n in range(20):\n"
        "        tools.call('echo', pad=[{}] * 330_000)\n    return 'all applied'"
    )
    sandbox = Sandbox()
    try:
        run = await sandbox.run(
            lambda name, args: (applied.append(name), (True, None))[1], source, timeout_s=20
        )
    finally:
        await sandbox.aclose()
    assert not run.ok and "LIMIT_EXCEEDED" in (run.error or ""), str(run)[:300]
    assert 0 < len(applied) == len(run.calls) <= 4, len(applied)


# -- 3 and 4. imported tools' data folder: no links followed, bounded in size ------------------------

DATA_TOOLS = {
    "link": (
        LOAD + "def link(target, kind):\n"
        "    items = os.path.join(_DB, 'items.json')\n"
        "    json.dump(json.load(open(items)), open(items, 'w'))  # a tool that writes (mutates)\n"
        "    path = os.path.join(_DB, 'leak.txt')\n"
        "    if kind == 'fifo':\n"
        "        os.mkfifo(path)\n"
        "    else:\n"
        "        os.symlink(target, path)\n"
        "    return {'made': kind}\n",
        {"target": {"type": "string"}, "kind": {"type": "string"}},
    ),
    "dump": (
        LOAD + "def dump():\n"
        "    return {n: open(os.path.join(_DB, n), errors='replace').read()[:4000]\n"
        "            for n in sorted(os.listdir(_DB)) if os.path.isfile(os.path.join(_DB, n))}\n",
        {},
    ),
    "fill": (
        LOAD + "def fill(files):\n"
        "    for n in range(files):\n"
        "        with open(os.path.join(_DB, f'blob{n}.bin'), 'wb') as out:\n"
        "            out.write(os.urandom(1 << 20))\n"
        "    return {'written': files}\n",
        {"files": {"type": "integer"}},
    ),
    "count": TOOLS["count"],
}


@pytest.fixture(scope="module")
def data_harness_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from environments.importers.agentworld import import_directory

    base = tmp_path_factory.mktemp("data-folder")
    write_release(base / "environment_mix", DATA_TOOLS)
    import_directory(base / "environment_mix", base / "imported", replay=False, progress=False)
    return base / "imported"


@pytest.fixture
def data_harness(data_harness_env: Path) -> Iterator[EnvHarness]:
    from environments.importers.agentworld import load_imported

    with EnvHarness(load_imported("agentworld/0000001", data_harness_env)) as harness:
        yield harness


@pytest.mark.parametrize("kind", ["host-file", "server-environ", "fifo"])
def test_a_link_or_special_file_in_the_data_folder_is_refused_not_followed(
    data_harness: EnvHarness, tmp_path: Path, kind: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host-secret-0815")
    target = {"host-file": str(secret), "server-environ": f"/proc/{os.getpid()}/environ", "fifo": ""}[kind]
    outcome = data_harness.outcome("link", target=target, kind="fifo" if kind == "fifo" else "symlink")
    assert not outcome.ok, outcome.value
    message = outcome.value["message"]
    assert "refused" in message and "leak.txt" in message, message
    seen = json.dumps(data_harness.call("dump"))
    assert "host-secret-0815" not in seen and "ARENA" not in seen and "leak.txt" not in seen, seen
    assert data_harness.call("count") == {"count": 1}


def test_the_data_folder_is_bounded_in_total_size(data_harness: EnvHarness) -> None:
    """40 files of 1 MB (each under the 8 MB file limit): before, all went to host /tmp and were read
    back into the server's memory; now the folder is a 32 MB tmpfs and the call fails with ENOSPC."""
    outcome = data_harness.outcome("fill", files=40)
    assert not outcome.ok and "No space left" in outcome.value["message"], outcome.value
    assert data_harness.call("count") == {"count": 1}
    small = data_harness.call("fill", files=2)
    assert small == {"written": 2}


# -- 6. arena-only tools are not on the agent's surface ------------------------------------------------


@pytest.fixture(scope="module")
def bfcl_server() -> Iterator[ServerProcess]:
    from environments.bfcl import NAME, BfclMissing, fetch, is_fetched

    if not is_fetched():
        try:
            fetch()
        except BfclMissing as exc:
            pytest.skip(f"bfcl-eval is not unpacked and PyPI is unreachable: {exc}")
    server = ServerProcess(NAME).start()
    yield server
    server.stop()


async def test_arena_only_bfcl_tools_are_not_on_the_agents_mcp_endpoint(bfcl_server: ServerProcess) -> None:
    """An agent speaking MCP on its own URL neither sees nor calls the checker, the setup or the probe;
    the arena still reaches them on the control plane (and a generated program does not)."""
    from arena.runtime.mcp_http import McpHttpClient

    control, mcp = bfcl_server.control(), McpHttpClient(bfcl_server.base_url)
    arena_tools = ("bfcl_check", "bfcl_load_scenario", "bfcl_state_hash")
    try:
        sid = await control.create_session()
        listed = {tool.name for tool in (await mcp.list_tools(sid)).tools}
        assert "mkdir" in listed and not listed.intersection(arena_tools), sorted(listed)
        for name in arena_tools:
            arguments = {"entry_id": "multi_turn_base_0", "turns": []} if name == "bfcl_check" else {}
            if name == "bfcl_load_scenario":
                arguments = {"entry_id": "multi_turn_base_0"}
            result = await mcp.call_tool(sid, name, arguments)
            assert result.is_error and "UNKNOWN_TOOL" in result.content[0].text, (name, result)
            assert "bfcl_" not in result.content[0].text.split("tools:")[-1]
        program = "def solve(tools):\n    return tools.call('bfcl_state_hash')"
        run = await control.run_program(sid, program)
        assert not run["ok"] and "UNKNOWN_TOOL" in run["error"], run
        loaded = await control.call(sid, "bfcl_load_scenario", {"entry_id": "multi_turn_base_0"})
        assert loaded["ok"], loaded
        assert (await control.call(sid, "bfcl_state_hash"))["ok"]
    finally:
        await control.aclose()
        await mcp.aclose()


# -- 5. a token-less connection flood does not make the pool drop episodes ---------------------------


async def test_a_control_listener_flood_does_not_get_a_healthy_worker_condemned(testbed_ref: str) -> None:
    """300 idle connections (no token) fill the control listener's cap of 256 for 7 s; before, the
    pool's next health probe (a new connection each time) failed and the worker was restarted at
    once, losing every session on it."""
    import ray

    from arena.runtime.pool import EnvPool, PoolConfig
    from tests.test_server_hardening import port_of, raise_own_file_limit

    raise_own_file_limit(2048)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = PoolConfig(envs={testbed_ref: 1}, warm_sessions_per_worker=1, health_interval_s=0.2)
    flood: list[socket.socket] = []
    try:
        async with EnvPool(config) as pool:
            lease = await pool.lease(testbed_ref)
            assert await lease.worker.actor.health.remote() == "ok"  # its probe connection is open
            port = port_of(lease.worker.endpoint.control_base)
            for _ in range(300):
                flood.append(socket.create_connection(("127.0.0.1", port)))
            await asyncio.sleep(7)
            assert pool.replacements == 0 and lease.broken is None, pool.stats()
            assert lease.generation == lease.worker.generation and lease.worker.healthy
            assert (await lease.call_tool("get_account", {"account_id": 1})).is_error is False
    finally:
        for sock in flood:
            sock.close()
        if started:
            ray.shutdown()


# -- minor: a forged result line is held to the documented depth ---------------------------------------


async def test_a_forged_result_nested_900_deep_is_refused() -> None:
    forge = """
os.write(1, b'{"result":{"ok":true,"value":' + b'[' * 900 + b']' * 900 + b'}}\\n')
signal = sys.modules["builtins"].__import__("signal")
signal.pause()
"""
    honest = "def solve(tools):\n    x = 1\n    for _ in range(63):\n        x = [x]\n    return x"
    sandbox = Sandbox()
    try:
        forged = await sandbox.run(lambda name, args: (True, None), escape(forge), timeout_s=5)
        deepest = await sandbox.run(lambda name, args: (True, None), honest, timeout_s=5)
    finally:
        await sandbox.aclose()
    assert not forged.ok and "deeper than 64" in (forged.error or ""), str(forged)[:200]
    assert deepest.ok, deepest.error


# -- 7. auto mode's plain child never shares the server's uid -----------------------------------------


async def test_the_plain_fallback_child_runs_under_another_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bubblewrap (``ARENA_SANDBOX=auto``) a root server's child drops to nobody: it cannot
    signal the server (SIGSTOP froze it when they shared a uid)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ARENA_SANDBOX", "auto")
    stop = escape("""
found = {"uid": os.getuid()}
try:
    os.kill(os.getppid(), 0)
    found["signal"] = "sent"
except Exception as exc:
    found["signal"] = exc.__class__.__name__
return found
""")
    sandbox = Sandbox()
    try:
        run = await sandbox.run(lambda name, args: (True, None), stop)
    finally:
        await sandbox.aclose()
    assert sandbox.kind == "process" and run.ok, run
    assert run.value["uid"] != os.geteuid() and run.value["signal"] == "PermissionError", run.value


async def test_the_plain_fallback_is_refused_where_the_child_would_share_the_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that is not root cannot give its child another uid: no plain child then, programs and
    third-party calls are an infrastructure error (503) instead."""
    from environments.sandbox import SandboxUnavailable, run_function, runner

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ARENA_SANDBOX", "auto")
    monkeypatch.setattr(runner.os, "geteuid", lambda: 10001)
    ran: list[str] = []
    sandbox = Sandbox()
    try:
        with pytest.raises(SandboxUnavailable, match="share this server's uid 10001"):
            await sandbox.run(lambda name, args: (ran.append(name), (True, None))[1], escape(PAUSE))
    finally:
        await sandbox.aclose()
    with pytest.raises(SandboxUnavailable, match="share this server's uid"):
        run_function("def f():\n    return 1", "f", {})
    with pytest.raises(SandboxUnavailable, match="share this server's uid"):
        Worker(HANDLE_STOP_READING, name="plain").request({"op": "x"}, 5)
    assert ran == []
