"""Imported (third-party) tool code runs in the OS sandbox, not in the environment server's process.

A synthetic release whose tools try to read a host file, open a socket, signal the server or its own
parent, print to stdout and exit; the honest tools still work, write their files back, and stay
deterministic under replay. Without bubblewrap a call is an infrastructure error, never unsandboxed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from environments.importers.agentworld import import_directory, load_imported
from environments.sandbox import SandboxUnavailable, functions
from environments.sdk.testing import EnvHarness

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

LOAD = "import json, os, uuid, random\n_DB = os.environ['MCP_DB_DIR']\n"
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "create_item": (
        LOAD + "def create_item(name):\n"
        "    path = os.path.join(_DB, 'items.json')\n"
        "    items = json.load(open(path))\n"
        "    item = {'id': 'itm_' + uuid.uuid4().hex, 'name': name, 'lucky': random.randint(0, 10**9)}\n"
        "    items.append(item)\n"
        "    json.dump(items, open(path, 'w'))\n"
        "    print('noise on stdout')\n"
        "    return {'item': item, 'count': len(items)}\n",
        {"name": {"type": "string"}},
    ),
    "count": (
        LOAD + "def count():\n    return {'count': len(json.load(open(os.path.join(_DB, 'items.json'))))}\n",
        {},
    ),
    "read_host": (
        LOAD + "def read_host(path):\n    return {'content': open(path).read()}\n",
        {"path": {"type": "string"}},
    ),
    "connect": (
        "import socket\n"
        "def connect(port):\n"
        "    with socket.create_connection(('127.0.0.1', port), timeout=2) as s:\n"
        "        s.sendall(b'hello from the sandbox')\n"
        "    return {'connected': True}\n",
        {"port": {"type": "integer"}},
    ),
    "signal_pid": (
        "import os, signal\n"
        "def signal_pid(pid):\n"
        "    out = {}\n"
        "    for name, target in (('server', pid), ('parent', os.getppid())):\n"
        "        try:\n"
        "            os.kill(target, signal.SIGKILL)\n"
        "            out[name] = 'sent'\n"
        "        except OSError as exc:\n"
        "            out[name] = type(exc).__name__\n"
        "    return out\n",
        {"pid": {"type": "integer"}},
    ),
    "leave": ("import sys\ndef leave():\n    sys.exit(3)\n", {}),
    "missing": (
        "def missing():\n    return {'error': {'code': 'ITEM_NOT_FOUND', 'message': 'no such item'}}\n",
        {},
    ),
}


def write_release(folder: Path, tools_by_name: dict[str, tuple[str, dict[str, Any]]] | None = None) -> None:
    env_id = "0000001"
    (folder / env_id).mkdir(parents=True)
    (folder / "questions").mkdir()
    (folder / env_id / "items.json").write_text(json.dumps([{"id": "itm_seed", "name": "seed"}]))
    tools = [
        {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
            "implementation": source,
        }
        for name, (source, props) in (tools_by_name or TOOLS).items()
    ]
    checkpoint = {
        "local_files_dir": f"./environment_mix/{env_id}",
        "data": {
            "DatabaseAgent": {"files_summary": {"items.json": "rows"}},
            "ToolDesignAgent": {"tool_schemas": tools},
        },
        "metadata": {"name": "Hostile"},
    }
    (folder / f"{env_id}_step4_checkpoint.json").write_text(json.dumps(checkpoint))
    (folder / "questions" / f"{env_id}.json").write_text(json.dumps({"tasks": []}))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    write_release(base / "environment_mix")
    report = import_directory(base / "environment_mix", base / "imported", replay=False, progress=False)
    assert [r.env_id for r in report.imported] == ["0000001"]
    return base / "imported"


@pytest.fixture
def harness(imported: Path) -> Iterator[EnvHarness]:
    with EnvHarness(load_imported("agentworld/0000001", imported)) as h:
        yield h


def test_honest_tools_work_write_back_and_replay_identically(
    imported: Path, harness: EnvHarness, capfd: pytest.CaptureFixture[str]
) -> None:
    first = harness.call("create_item", name="Widget")
    assert first["count"] == 2 and first["item"]["id"].startswith("itm_")
    assert harness.call("count") == {"count": 2}, "the file the sandboxed code wrote is stored back"
    assert "noise on stdout" not in capfd.readouterr().out, "its prints never reach our stdout"
    with EnvHarness(load_imported("agentworld/0000001", imported)) as again:
        assert again.call("create_item", name="Widget") == first, "same state and call: same answer"
        assert again.call("create_item", name="Widget") != first, "a new state moves the seed on"


def test_released_code_reads_no_host_file(harness: EnvHarness, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    for path in (str(secret), "/etc/hostname", "/proc/1/environ"):
        outcome = harness.outcome("read_host", path=path)
        assert not outcome.ok and "host secret" not in json.dumps(outcome.value), path
        assert outcome.value["code"] == "INTERNAL"


def test_released_code_has_no_network(harness: EnvHarness) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        outcome = harness.outcome("connect", port=server.getsockname()[1])
        assert not outcome.ok and "Error" in outcome.value["message"]
        with pytest.raises(TimeoutError):
            server.accept()


def test_released_code_cannot_signal_the_server(harness: EnvHarness) -> None:
    result = harness.call("signal_pid", pid=os.getpid())
    assert result["server"] in ("ProcessLookupError", "PermissionError"), result
    assert harness.call("count") == {"count": 1}, "the server (this process) is alive and serving"


def test_exit_and_released_errors_keep_their_meaning(harness: EnvHarness) -> None:
    leave = harness.outcome("leave")
    assert not leave.ok and leave.value["code"] == "INTERNAL" and "exit(3)" in leave.value["message"]
    missing = harness.outcome("missing")
    assert missing.value["code"] == "NOT_FOUND" and missing.value["message"] == "no such item"


def test_without_bubblewrap_a_call_is_an_infrastructure_error(
    harness: EnvHarness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    monkeypatch.setattr(functions, "_fallback", [])
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        harness.outcome("count")
    monkeypatch.setenv("ARENA_SANDBOX", "auto")  # a hardened container: a plain child, same rlimits
    assert harness.call("count") == {"count": 1}
    monkeypatch.setenv("ARENA_SANDBOX", "off")
    with pytest.raises(SandboxUnavailable, match="ARENA_SANDBOX"):
        harness.outcome("count")


async def test_a_server_without_bubblewrap_answers_503_and_a_protocol_error(
    imported: Path, tmp_path: Path
) -> None:
    """Over the control plane 503, over MCP a JSON-RPC error: the arena sees infrastructure, not a
    tool result it would score."""
    from mcp.shared.exceptions import MCPError

    from arena.runtime.mcp_http import McpHttpClient
    from environments.importers.agentworld.store import IMPORTED_DIR_ENV
    from environments.serving.control import ControlError
    from environments.serving.process import ServerProcess

    no_bwrap = {IMPORTED_DIR_ENV: str(imported), "PATH": str(tmp_path)}
    server = ServerProcess("agentworld/0000001", extra_env=no_bwrap).start()
    try:
        control = server.control()
        lean = McpHttpClient(server.base_url)
        try:
            sid = await control.create_session()
            with pytest.raises(ControlError) as refused:
                await control.call(sid, "count", {})
            assert refused.value.status == 503 and "bubblewrap" in str(refused.value)
            with pytest.raises(MCPError, match="sandbox unavailable"):
                await lean.call_tool(sid, "count", {})
        finally:
            await lean.aclose()
            await control.aclose()
    finally:
        server.stop()
