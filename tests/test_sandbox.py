"""Generated programs run in a bubblewrap sandbox: escapes that gave a shell as the server's user now reach
nothing (no host files, no network, no other session, no server memory); deadlines hold whatever the
program does; results and errors are bounded. Each case ran as a hostile program against the old
in-process runner and got through."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest

from environments.sandbox import Sandbox, SandboxUnavailable
from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess

# Three ways out of restricted builtins, each ending with the real ``os`` module in hand.
VIA_SUBCLASSES = """
def grab(tools):
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"].modules["os"]
"""
VIA_GLOBALS = """
def grab(tools):
    return tools.call.__func__.__globals__["os"]
"""
VIA_FRAMES = """
def grab(tools):
    try:
        raise ValueError
    except ValueError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None:
        if "os" in frame.f_globals:
            return frame.f_globals["os"]
        frame = frame.f_back
"""
ESCAPES = {"subclasses": VIA_SUBCLASSES, "globals": VIA_GLOBALS, "frames": VIA_FRAMES}


def escape(body: str, via: str = "subclasses") -> str:
    """A program that escapes the restricted builtins, then runs ``body`` with ``os`` and ``sys`` bound."""
    return (
        ESCAPES[via]
        + "\ndef solve(tools):\n    os = grab(tools)\n    sys = os.sys\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("host") / "secret.txt"
    path.write_text("host-secret-4711")
    return path


@pytest.mark.parametrize("via", sorted(ESCAPES))
async def test_an_escaped_program_sees_no_host_files(
    control: ControlClient, secret_file: Path, via: str
) -> None:
    source = escape(
        f"""
found = {{"uid": os.getuid(), "root": sorted(os.listdir("/"))}}
for path in ({str(secret_file)!r}, "/etc/passwd", "/proc/1/environ", {f"/proc/{os.getpid()}/environ"!r}):
    try:
        found[path] = open_(path)
    except Exception as exc:
        found[path] = exc.__class__.__name__
return found
""".replace("open_(path)", "os.read(os.open(path, os.O_RDONLY), 100).decode(errors='replace')"),
        via,
    )
    run = await control.run_program(await control.create_session(), source)
    assert run["ok"], run["error"]
    found = run["value"]
    assert found["uid"] == 65534 and found["uid"] != os.getuid()
    assert "host-secret-4711" not in str(found) and "ARENA" not in str(found)
    assert found[str(secret_file)] == "FileNotFoundError" and found["/etc/passwd"] == "FileNotFoundError"
    assert "home" not in found["root"] and "work" not in found["root"]


async def test_an_escaped_program_has_no_network(control: ControlClient, listener: int) -> None:
    source = escape(f"""
socket = sys.modules["builtins"].__import__("socket")
try:
    socket.create_connection(("127.0.0.1", {listener}), timeout=1)
    return "connected"
except Exception as exc:
    return exc.__class__.__name__
""")
    run = await control.run_program(await control.create_session(), source)
    # The import is refused, or the connection is (a new network namespace has no host loopback).
    assert run["value"] != "connected", run


async def test_an_escaped_program_cannot_start_processes(control: ControlClient) -> None:
    source = escape("""
try:
    pid = os.fork()
except Exception as exc:
    return exc.__class__.__name__
if pid == 0:
    os._exit(0)
return "forked"
""")
    run = await control.run_program(await control.create_session(), source)
    assert run["ok"] and run["value"] == "BlockingIOError", run


async def test_a_program_reaches_only_its_own_session_through_tools(control: ControlClient) -> None:
    sid, other = await control.create_session(), await control.create_session()
    before = await control.state_hash(other)
    source = escape("""
leaks = [name for name in ("_state", "_env", "calls", "_max_calls") if name in tools.__dir__()]
tools.call("deposit", account_id=1, amount=7)
return leaks
""")
    run = await control.run_program(sid, source)
    assert run["ok"] and run["value"] == [], run
    poison = escape("""
sys.modules["json"].dumps = lambda *a, **k: "poisoned"
sys.modules["decimal"].getcontext().prec = 1
return 1
""")
    await control.run_program(sid, poison)  # it breaks its own answer, nothing else
    assert await control.state_hash(other) == before  # nothing reached the other session
    # The server's own modules are untouched: its answers still encode normally.
    account = await control.call(sid, "get_account", {"account_id": 1})
    assert account["ok"] and isinstance(account["value"]["balance"], int)
    assert list(await control.diff(sid)) == ["accounts", "entries"]


async def test_the_call_budget_is_counted_by_the_server(control: ControlClient) -> None:
    source = """
def solve(tools):
    try:
        tools._max_calls = 10**6  # the old runner's budget lived in the program's own object
    except:
        pass
    try:
        tools.calls = []
    except:
        pass
    done = 0
    for _ in range(600):
        try:
            tools.call("get_account", account_id=1)
            done += 1
        except:
            pass
    return done
"""
    run = await control.run_program(await control.create_session(), source)
    assert run["ok"] and run["value"] == 500 and len(run["calls"]) == 500


@pytest.mark.parametrize(
    "body",
    [
        "while True:\n    try:\n        pass\n    except:\n        pass",
        "return sum(range(10**12))",
        "class Late:\n    def __del__(self):\n        while True:\n            pass\nkeep = Late()\nreturn 1",
    ],
    ids=["bare-except-loop", "long-c-call", "finalizer"],
)
async def test_the_deadline_holds_whatever_the_program_does(
    control: ControlClient, server: ServerProcess, body: str
) -> None:
    source = "def solve(tools):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    sid = await control.create_session()
    start = time.perf_counter()
    run = await control.run_program(sid, source, timeout_s=0.5)
    elapsed = time.perf_counter() - start
    assert elapsed < 3, elapsed
    if run["ok"]:  # the finalizer case: the result came back and the process was killed, not collected
        assert run["value"] == 1
    else:
        assert "ran longer than 0.5s" in run["error"], run["error"]
    assert server.alive() and (await control.health())["ok"]


@pytest.mark.parametrize("timeout_s", [0, -1, 31, float("nan")])
async def test_a_timeout_outside_the_allowed_range_is_refused(
    control: ControlClient, timeout_s: float
) -> None:
    sid = await control.create_session()
    body = {"source": "def solve(tools):\n    return 1", "timeout_s": timeout_s}
    with pytest.raises(ControlError) as err:
        await control._request("POST", f"/control/sessions/{sid}/program", json_body=body)
    assert err.value.status == 400 and "timeout_s" in str(err.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("x = []\nfor _ in range(5000):\n    x = [x]\nreturn x", "the result is not JSON"),
        ("return 'x' * 3_000_000", "larger than 1000000 bytes"),
        ("raise ValueError('e' * 15_000_000)", "ValueError"),
        ("x = ['m' * 10**6 for _ in range(2000)]\nreturn 1", "MemoryError|ended without a result"),
    ],
    ids=["nested", "huge-result", "huge-error", "memory-bomb"],
)
async def test_results_and_errors_are_bounded(control: ControlClient, body: str, expected: str) -> None:
    source = "def solve(tools):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    run = await control.run_program(await control.create_session(), source)
    assert not run["ok"] and re.search(expected, run["error"]), str(run)[:500]
    assert len(run["error"]) < 25_000


async def test_a_session_closed_while_its_program_runs_answers_404(control: ControlClient) -> None:
    sid = await control.create_session()
    loop = "    while True:\n        sum(range(10**5))\n        tools.call('get_account', account_id=1)"
    body = {"source": "def solve(tools):\n" + loop, "timeout_s": 10, "max_calls": 5000}
    running = asyncio.create_task(
        control._request("POST", f"/control/sessions/{sid}/program", json_body=body)
    )
    await asyncio.sleep(0.3)
    await control.close_session(sid)
    with pytest.raises(ControlError) as err:
        await running
    assert err.value.status == 404


async def test_without_bubblewrap_programs_are_refused_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    ran: list[str] = []
    sandbox = Sandbox()
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        await sandbox.run(
            lambda name, args: (ran.append(name), (True, None))[1], "def solve(tools):\n    return 1"
        )
    assert ran == []
    await sandbox.aclose()


async def test_auto_mode_in_a_container_falls_back_to_a_child_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ARENA_SANDBOX=auto`` (set by the container backend): without bubblewrap the program still runs in a
    child process of its own (the container is the OS boundary), and the server says so."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ARENA_SANDBOX", "auto")
    sandbox = Sandbox()
    pid = "tools.call.__func__.__globals__['os'].getpid()"
    source = f"def solve(tools):\n    return [tools.call('echo', n=1), {pid}]"
    run = await sandbox.run(lambda name, args: (True, dict(args)), source)
    await sandbox.aclose()
    assert sandbox.kind == "process"
    assert run.ok and run.value[0] == {"n": 1} and run.value[1] != os.getpid()


RELEASED_TOOL = """
import json, os, sqlite3

_DB = os.path.join(os.environ["MCP_DB_DIR"], "shop.db")


def add_item(name):
    conn = sqlite3.connect(_DB)
    conn.execute("insert into items(name) values (?)", (name,))
    conn.commit()
    print("tools print too")
    found = {"count": conn.execute("select count(*) from items").fetchone()[0], "uid": os.getuid()}
    for path in (SECRET, "/etc/passwd"):
        try:
            found[path] = open(path).read()
        except OSError as exc:
            found[path] = type(exc).__name__
    return found
"""


def test_third_party_tool_code_runs_sandboxed_on_its_own_files(tmp_path: Path, secret_file: Path) -> None:
    """``run_function``: released tool code (full builtins, sqlite3) writes its data folder and
    nothing else; it sees no host file, and a hang or ``exit()`` is its own error."""
    from environments.sandbox import run_function

    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "shop.db") as conn:
        conn.execute("create table items(name)")
    source = RELEASED_TOOL.replace("SECRET", repr(str(secret_file)))
    files = {"shop.db": (data / "shop.db").read_bytes()}
    result = run_function(source, "add_item", {"name": "pen"}, files=files, data_dir_env="MCP_DB_DIR")
    assert result.ok, result.error
    assert result.files is not None and set(result.files) == {"shop.db"}
    (data / "shop.db").write_bytes(result.files["shop.db"] or b"")
    assert result.value["count"] == 1 and result.value["uid"] == 65534
    assert (
        result.value[str(secret_file)] == "FileNotFoundError"
        and result.value["/etc/passwd"] == "FileNotFoundError"
    )
    with sqlite3.connect(data / "shop.db") as conn:
        assert conn.execute("select name from items").fetchall() == [("pen",)]
    hang = run_function("def f():\n    while True:\n        pass", "f", {}, timeout_s=0.5)
    assert not hang.ok and "ran longer than 0.5s" in (hang.error or "")
    leave = run_function("import sys\ndef f():\n    sys.exit(3)", "f", {})
    assert not leave.ok and "exit(3)" in (leave.error or "")
