"""Environment server benchmark: reset, tool-call latency, throughput, idle-session memory, and baselines.

Usage: python benchmarks/env_server.py [--env NAME] [--duration SECONDS] [--quick]

Client and server share this machine's cores, as in the issue's reference figures. Calls are measured with
the arena's lean client (``arena/runtime/mcp_http.py``, what ``EnvPool`` uses) and, alongside, with the
official SDK client (``*_sdk_client`` keys). The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from arena.runtime.mcp_http import PROTOCOL_VERSION, McpHttpClient  # noqa: E402
from benchmarks.stats import Row, percentile, print_table, time_ms  # noqa: E402
from environments.registry import builtin_names, load_environment  # noqa: E402
from environments.sdk.state import StateStore, seed_path  # noqa: E402
from environments.serving.process import ServerProcess  # noqa: E402

console = Console(stderr=True)
PLAIN_SERVER = ROOT / "benchmarks" / "baselines" / "plain_mcp_server.py"
TESTBED = ROOT / "tests" / "fixtures" / "testbed"

# One repeatable read call and one repeatable write call per environment.
CALLS: dict[str, tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "ecommerce": (("get_order", {"order_id": 1}), ("adjust_stock", {"product_id": 1, "change": 1})),
    "project_tracker": (
        ("get_issue", {"issue_key": "PAY-1"}),
        ("add_comment", {"issue_key": "PAY-1", "author_id": 22, "body": "+1"}),
    ),
    "testbed": (("get_account", {"account_id": 3}), ("deposit", {"account_id": 3, "amount": 1})),
}


def bench_resets(names: list[str], repeat: int) -> dict[str, dict[str, float]]:
    """In-process: create a session copy, reset it, and (baseline) copy the database file per episode."""
    results: dict[str, dict[str, float]] = {}
    for name in names:
        env = load_environment(name)
        store = StateStore(env)
        state = store.create()
        reset = time_ms(state.reset, repeat)
        create = time_ms(lambda store=store: store.close(store.create().state_id), repeat)
        seed = seed_path(env)
        scratch = Path(tempfile.mkdtemp())

        def file_copy(seed: Path = seed, scratch: Path = scratch) -> None:
            target = scratch / "episode.sqlite"
            shutil.copyfile(seed, target)
            sqlite3.connect(target).execute("SELECT 1").fetchone()
            target.unlink()

        copy = time_ms(file_copy, repeat)
        shutil.rmtree(scratch)
        results[name] = {
            "reset_p50": statistics.median(reset),
            "reset_p99": percentile(reset, 99),
            "create_p50": statistics.median(create),
            "create_p99": percentile(create, 99),
            "file_copy_p50": statistics.median(copy),
            "db_kib": seed.stat().st_size / 1024,
        }
        store.close_all()
    return results


SessionCall = Callable[[], Awaitable[CallToolResult]]
Opener = Callable[[], AbstractAsyncContextManager[SessionCall]]


def sdk_opener(url: str, call: tuple[str, dict[str, Any]], mode: str = PROTOCOL_VERSION) -> Opener:
    """One official SDK client per session (what an agent framework would use)."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[SessionCall]:
        async with Client(url, mode=mode) as client:
            yield lambda: client.call_tool(*call)

    return opened


def lean_opener(lean: McpHttpClient, sid: str, call: tuple[str, dict[str, Any]]) -> Opener:
    """The arena's lean client (``arena/runtime/mcp_http.py``): one connection pool for all sessions."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[SessionCall]:
        yield lambda: lean.call_tool(sid, *call)

    return opened


async def bench_calls(opener: Opener, repeat: int) -> list[float]:
    samples = []
    async with opener() as call:
        await call()
        for _ in range(repeat):
            start = time.perf_counter()
            result = await call()
            samples.append((time.perf_counter() - start) * 1000)
            assert not result.is_error, result
    return samples


async def bench_throughput(
    openers: list[Opener], duration: float, server_pid: int | None = None
) -> dict[str, Any]:
    """Each opener is one session with its own caller; once all are connected, they call back to back for
    ``duration`` seconds. Returns calls per second, latencies (ms), and CPU ms per call of this process
    (the client) and of the server."""
    latencies: list[float] = []
    connected = 0
    all_connected = asyncio.Event()
    go = asyncio.Event()
    stop_at = 0.0

    async def worker(opener: Opener) -> int:
        nonlocal connected
        count = 0
        async with opener() as call:
            await call()
            connected += 1
            if connected == len(openers):
                all_connected.set()
            await go.wait()
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                result = await call()
                latencies.append((time.perf_counter() - start) * 1000)
                assert not result.is_error
                count += 1
        return count

    tasks = [asyncio.create_task(worker(o)) for o in openers]
    await asyncio.wait_for(all_connected.wait(), timeout=120)
    server = psutil.Process(server_pid) if server_pid else None
    server_cpu = sum(server.cpu_times()[:2]) if server else 0.0
    client_cpu = time.process_time()
    start = time.perf_counter()
    stop_at = start + duration
    go.set()
    counts = await asyncio.gather(*tasks)
    calls = sum(counts)
    return {
        "rate": calls / (time.perf_counter() - start),
        "latencies": latencies,
        "client_cpu_ms": (time.process_time() - client_cpu) / calls * 1000,
        "server_cpu_ms": (sum(server.cpu_times()[:2]) - server_cpu) / calls * 1000 if server else None,
    }


async def bench_server(name: str, duration: float, repeat: int) -> dict[str, Any]:
    read, write = CALLS[name]
    server = ServerProcess(name).start()
    control = server.control()
    lean = McpHttpClient(server.base_url)
    out: dict[str, Any] = {}
    try:
        sid = await control.create_session()
        out["read"] = await bench_calls(lean_opener(lean, sid, read), repeat)
        out["write"] = await bench_calls(lean_opener(lean, sid, write), repeat)
        out["read_sdk"] = await bench_calls(sdk_opener(control.mcp_url(sid), read), repeat)
        out["write_sdk"] = await bench_calls(sdk_opener(control.mcp_url(sid), write), repeat)
        create_reset = []
        for _ in range(repeat // 2):
            start = time.perf_counter()
            new = await control.create_session()
            await control.reset(new)
            create_reset.append((time.perf_counter() - start) * 1000)
            await control.close_session(new)
        out["control_create_reset"] = create_reset
        for concurrency in (1, 16, 64):
            sids = [await control.create_session() for _ in range(concurrency)]
            openers = [lean_opener(lean, s, read) for s in sids]
            out[f"lean_{concurrency}"] = await bench_throughput(openers, duration, server.pid)
            if concurrency > 1:
                openers = [sdk_opener(control.mcp_url(s), read) for s in sids]
                out[f"sdk_{concurrency}"] = await bench_throughput(openers, duration, server.pid)
            for s in sids:
                await control.close_session(s)
        proc = psutil.Process(server.pid)
        before = proc.memory_info().rss
        idle = [await control.create_session() for _ in range(1000)]
        out["idle_session_kib"] = (proc.memory_info().rss - before) / 1024 / len(idle)
        for s in idle:
            await control.close_session(s)
    finally:
        await lean.aclose()
        await control.aclose()
        server.stop()
    return out


async def bench_light_tool(duration: float) -> dict[str, Any]:
    """The server path with a light tool (testbed ``get_account``: one primary-key read), 64 sessions."""
    server = ServerProcess(str(TESTBED)).start()
    control = server.control()
    lean = McpHttpClient(server.base_url)
    try:
        sids = [await control.create_session() for _ in range(64)]
        openers = [lean_opener(lean, s, CALLS["testbed"][0]) for s in sids]
        return await bench_throughput(openers, duration, server.pid)
    finally:
        await lean.aclose()
        await control.aclose()
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def bench_plain_http(duration: float, repeat: int, json_response: bool) -> dict[str, Any]:
    """The plain SDK server with its default transport settings, driven by a handshake-era (legacy) client."""
    port = free_port()
    args = [sys.executable, str(PLAIN_SERVER), "http", str(port)] + (["json"] if json_response else [])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    call = ("get_item", {"item_id": 7})
    try:
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                await asyncio.sleep(0.1)

        async def legacy_calls(n: int) -> list[float]:
            samples = []
            async with Client(url, mode="legacy") as client:
                for _ in range(n):
                    start = time.perf_counter()
                    await client.call_tool(*call)
                    samples.append((time.perf_counter() - start) * 1000)
            return samples

        latency = await legacy_calls(repeat)
        rates = {}
        for concurrency in (16, 64):
            openers = [sdk_opener(url, call, mode="legacy")] * concurrency
            rates[concurrency] = (await bench_throughput(openers, duration))["rate"]
        return {"latency": latency, "rates": rates}
    finally:
        proc.terminate()
        proc.wait()


async def bench_stdio_per_episode(episodes: int) -> list[float]:
    """Baseline: start a plain stdio MCP server per episode, initialise, make one call, shut it down."""
    samples = []
    params = StdioServerParameters(command=sys.executable, args=[str(PLAIN_SERVER), "stdio"])
    for _ in range(episodes):
        start = time.perf_counter()
        async with Client(params) as client:
            await client.call_tool("get_item", {"item_id": 1})
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--env", default=None, help="environment for the call benchmarks (default: first built-in)"
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per throughput level")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = parser.parse_args()
    os.environ.setdefault("ARENA_CACHE_DIR", tempfile.mkdtemp(prefix="arena-bench-cache-"))
    names = builtin_names() or ["testbed"]
    env_name = args.env or next((n for n in names if n in CALLS), "testbed")
    if env_name == "testbed":
        CALLS[str(TESTBED)] = CALLS["testbed"]
        env_name = str(TESTBED)
        names = [env_name]
    repeat = 200 if args.quick else 1000
    duration = 1.5 if args.quick else args.duration

    console.print(f"resets on {len(names)} environment(s)...")
    resets = bench_resets(names, repeat)
    console.print(f"server benchmarks on {env_name}...")
    server = asyncio.run(bench_server(env_name, duration, repeat // 2))
    console.print("light tool (testbed get_account), 64 sessions...")
    light = asyncio.run(bench_light_tool(duration))
    console.print("baselines: plain SDK over HTTP (SSE and JSON), stdio server per episode...")
    plain_sse = asyncio.run(bench_plain_http(duration, repeat // 4, json_response=False))
    plain_json = asyncio.run(bench_plain_http(duration, repeat // 4, json_response=True))
    stdio = asyncio.run(bench_stdio_per_episode(3 if args.quick else 8))

    reset_all = [r["reset_p50"] for r in resets.values()]
    reset_p99 = max(r["reset_p99"] for r in resets.values())
    file_copy = statistics.median([r["file_copy_p50"] for r in resets.values()])
    stdio_p50 = statistics.median(stdio)
    plain_sse_p50 = statistics.median(plain_sse["latency"])
    plain_json_p50 = statistics.median(plain_json["latency"])
    rows = [
        Row(
            f"reset, in process ({name}, {r['db_kib']:.0f} KiB db)",
            r["reset_p50"],
            r["reset_p99"],
            target="p50 <= 1 ms",
            baseline_name="db file copy per episode",
            baseline=r["file_copy_p50"],
        )
        for name, r in resets.items()
    ]
    rows += [
        Row(
            f"session create, in process ({name})",
            r["create_p50"],
            r["create_p99"],
            baseline_name="stdio server per episode",
            baseline=stdio_p50,
        )
        for name, r in resets.items()
    ]
    rows.append(
        Row.from_samples(
            "session create+reset via control HTTP",
            server["control_create_reset"],
            baseline_name="stdio server per episode",
            baseline=stdio_p50,
        )
    )
    for kind, label in (("read", "read"), ("write", "write")):
        rows.append(
            Row.from_samples(
                f"{label} tool call over HTTP (lean client)",
                server[kind],
                target="p50 <= 2 ms" if kind == "read" else "",
                baseline_name=f"plain SDK, {'SSE' if kind == 'read' else 'JSON'} (legacy client)",
                baseline=plain_sse_p50 if kind == "read" else plain_json_p50,
            )
        )
        rows.append(
            Row.from_samples(f"{label} tool call over HTTP (official SDK client)", server[f"{kind}_sdk"])
        )
    for concurrency in (1, 16, 64):
        plain_rate = plain_sse["rates"].get(concurrency)
        level = server[f"lean_{concurrency}"]
        rows.append(
            Row(
                f"calls/s, {concurrency} concurrent sessions (lean client)",
                level["rate"],
                None,
                unit="calls/s",
                target=">= 1000 @64" if concurrency == 64 else "",
                baseline_name="plain SDK, SSE" if plain_rate else "",
                baseline=plain_rate,
                lower_is_better=False,
            )
        )
        lat = level["latencies"]
        rows.append(
            Row(f"  call latency at {concurrency} sessions", statistics.median(lat), percentile(lat, 99))
        )
        rows.append(Row("  server CPU per call", level["server_cpu_ms"], None))
        rows.append(Row("  client CPU per call", level["client_cpu_ms"], None))
        if f"sdk_{concurrency}" in server:
            sdk = server[f"sdk_{concurrency}"]
            rows.append(
                Row(
                    f"calls/s, {concurrency} sessions (official SDK client)",
                    sdk["rate"],
                    None,
                    unit="calls/s",
                    lower_is_better=False,
                )
            )
            rows.append(Row("  client CPU per call (official SDK client)", sdk["client_cpu_ms"], None))
    rows.append(
        Row(
            "calls/s, 64 sessions, light tool (testbed get_account)",
            light["rate"],
            None,
            unit="calls/s",
            target=">= 1000 @64",
            lower_is_better=False,
        )
    )
    rows.append(Row("  server CPU per call (light tool)", light["server_cpu_ms"], None))
    rows.append(
        Row("memory per idle session", server["idle_session_kib"], None, unit="KiB", target="<= 1024 KiB")
    )
    print_table(
        f"Environment server ({env_name}) — {os.cpu_count()} cores, client and server on one machine", rows
    )

    summary = {
        "env": Path(env_name).name,
        "reset_p50_ms": round(statistics.median(reset_all), 4),
        "reset_p99_ms": round(reset_p99, 4),
        "session_create_p50_ms": round(statistics.median([r["create_p50"] for r in resets.values()]), 4),
        "control_create_reset_p50_ms": round(statistics.median(server["control_create_reset"]), 3),
        "read_call_p50_ms": round(statistics.median(server["read"]), 3),
        "read_call_p99_ms": round(percentile(server["read"], 99), 3),
        "write_call_p50_ms": round(statistics.median(server["write"]), 3),
        "write_call_p99_ms": round(percentile(server["write"], 99), 3),
        "read_call_p50_ms_sdk_client": round(statistics.median(server["read_sdk"]), 3),
        "write_call_p50_ms_sdk_client": round(statistics.median(server["write_sdk"]), 3),
        "calls_per_s_1": round(server["lean_1"]["rate"], 1),
        "calls_per_s_16": round(server["lean_16"]["rate"], 1),
        "calls_per_s_64": round(server["lean_64"]["rate"], 1),
        "calls_per_s_16_sdk_client": round(server["sdk_16"]["rate"], 1),
        "calls_per_s_64_sdk_client": round(server["sdk_64"]["rate"], 1),
        "server_cpu_ms_per_call_64": round(server["lean_64"]["server_cpu_ms"], 3),
        "client_cpu_ms_per_call_64": round(server["lean_64"]["client_cpu_ms"], 3),
        "client_cpu_ms_per_call_64_sdk_client": round(server["sdk_64"]["client_cpu_ms"], 3),
        "calls_per_s_64_light_tool": round(light["rate"], 1),
        "server_cpu_ms_per_call_light_tool": round(light["server_cpu_ms"], 3),
        "idle_session_kib": round(server["idle_session_kib"], 1),
        "baseline_file_copy_reset_p50_ms": round(file_copy, 4),
        "baseline_stdio_per_episode_p50_ms": round(stdio_p50, 1),
        "baseline_plain_sdk_sse_call_p50_ms": round(plain_sse_p50, 3),
        "baseline_plain_sdk_json_call_p50_ms": round(plain_json_p50, 3),
        "baseline_plain_sdk_sse_calls_per_s_16": round(plain_sse["rates"][16], 1),
        "baseline_plain_sdk_sse_calls_per_s_64": round(plain_sse["rates"][64], 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
