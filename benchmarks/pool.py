"""Pool benchmark: lease latency, calls per backend, concurrent episodes with model think time.

Usage: python benchmarks/pool.py [--duration S] [--quick] [--no-container]

Each concurrent episode alternates one tool call with a simulated model think time (exponential, mean
500 ms), as in rollouts where episodes mostly wait for the model. Levels of 256 to 1,024 episodes find the
largest that keeps p99 call latency within 100 ms (the sweep stops at the first level that misses). Calls
go through ``Lease.call_tool`` (the lean client); 256 episodes are also run with one official SDK client
per lease as a baseline. Container cold start is measured from creating the container to its first MCP
response (the 1-worker pool start, with its Ray actor, is reported beside it). The last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import ray
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arena.runtime.backends import ContainerBackend, pool_owner_id  # noqa: E402
from arena.runtime.containers import reap_arena_containers  # noqa: E402
from arena.runtime.engine import engine_client  # noqa: E402
from arena.runtime.image import build_image  # noqa: E402
from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from benchmarks.stats import Row, percentile, print_table  # noqa: E402

console = Console(stderr=True)
READS: dict[str, tuple[str, dict[str, Any]]] = {
    "ecommerce": ("get_order", {"order_id": 1}),
    "project_tracker": ("get_issue", {"issue_key": "PAY-1"}),
    "airline": ("get_flight", {"flight_id": 1}),
    "banking": ("get_account", {"account_id": 1001}),
}
THINK_MEAN_S = 0.5
WARMUP_S = 3.0
LEVELS = (256, 384, 512, 768, 1024)


async def lease_release(pool: EnvPool, env: str, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        lease = await pool.lease(env)
        await pool.release(lease)
        samples.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.002)  # let the warm queue refill, as between real episodes
    return samples


async def calls_through_pool(pool: EnvPool, env: str, repeat: int) -> list[float]:
    samples = []
    async with pool.session(env) as lease:
        await lease.call_tool(*READS[env])
        for _ in range(repeat):
            start = time.perf_counter()
            result = await lease.call_tool(*READS[env])
            samples.append((time.perf_counter() - start) * 1000)
            assert not result.is_error
    return samples


async def verl_style_calls(pool: EnvPool, env: str, repeat: int) -> list[float]:
    """Baseline: verl's tool path creates, executes and releases a tool instance per call."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        async with pool.session(env) as lease, lease.client() as client:
            await client.call_tool(*READS[env])
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def concurrent_episodes(pool: EnvPool, episodes: int, duration: float) -> dict[str, float]:
    """``episodes`` concurrent episodes over the pool's environments; think, call, repeat for ``duration``.

    Episodes start together; only calls that start in the steady-state window (after ``WARMUP_S``, before
    the end) are counted, and calls/s is their number over the window's length."""
    envs = list(pool.workers)
    latencies: list[float] = []
    infra_errors = 0
    warmup_until = time.perf_counter() + WARMUP_S
    stop_at = warmup_until + duration
    rng = random.Random(7)

    async def episode(index: int) -> None:
        nonlocal infra_errors
        env = envs[index % len(envs)]
        async with pool.session(env) as lease:
            while time.perf_counter() < stop_at:
                await asyncio.sleep(rng.expovariate(1 / THINK_MEAN_S))
                start = time.perf_counter()
                try:
                    result = await lease.call_tool(*READS[env])
                except Exception:
                    infra_errors += 1
                    return
                assert not result.is_error, result
                if warmup_until < start < stop_at:
                    latencies.append((time.perf_counter() - start) * 1000)

    rss_before = _rss(pool)
    tasks = [asyncio.create_task(episode(i)) for i in range(episodes)]
    await asyncio.sleep(WARMUP_S + min(duration / 2, 3))
    rss_during = _rss(pool)
    await asyncio.gather(*tasks)
    return {
        "episodes": episodes,
        "calls_per_s": len(latencies) / duration,
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": percentile(latencies, 99) if latencies else float("nan"),
        "rss_per_episode_kib": (rss_during - rss_before) / 1024 / episodes,
        "infra_errors": infra_errors,
    }


def _rss(pool: EnvPool) -> int:
    """Resident memory of this driver plus every environment server process of the pool."""
    total = psutil.Process().memory_info().rss
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "environments.serving" in cmdline and any(env in cmdline for env in pool.workers):
            total += proc.memory_info().rss
    return total


async def container_cold_starts(image: str, repeat: int) -> list[float]:
    """Seconds from creating a hardened container (as the pool's container backend does) to the first MCP
    response from it: container start, server ready, one session created, one tool call over its socket."""
    samples = []
    owner = pool_owner_id()
    try:
        for index in range(repeat):
            backend = ContainerBackend("ecommerce", f"bench-cold-{index}", owner, image)
            start = time.perf_counter()
            try:
                endpoint = backend.start(timeout=60)
                control, mcp = endpoint.control(), endpoint.mcp_http()
                try:
                    session_id = await control.create_session()
                    result = await mcp.call_tool(session_id, *READS["ecommerce"])
                    samples.append(time.perf_counter() - start)
                    assert not result.is_error
                finally:
                    await control.aclose()
                    await mcp.aclose()
            finally:
                backend.stop()
    finally:
        client = engine_client()
        if client is not None:  # a container whose start failed is not tracked by its backend
            reap_arena_containers(client, owner)
    return samples


async def container_section(repeat: int) -> dict[str, Any] | None:
    if engine_client() is None:
        console.print("[yellow]no container engine reachable: container figures are null[/yellow]")
        return None
    image = build_image().tag
    cold = await container_cold_starts(image, repeat)
    pool_cold: list[float] = []
    for _ in range(max(3, repeat // 3)):
        start = time.perf_counter()
        async with EnvPool(
            PoolConfig(envs={"ecommerce": 1}, backend="container", warm_sessions_per_worker=1)
        ) as pool:
            async with pool.session("ecommerce") as lease:
                await lease.call_tool(*READS["ecommerce"])
            pool_cold.append(time.perf_counter() - start)
    async with EnvPool(PoolConfig(envs={"ecommerce": 1}, backend="container")) as pool:
        calls = await calls_through_pool(pool, "ecommerce", 300)
    return {"cold_start_s": cold, "pool_cold_start_s": pool_cold, "calls": calls}


async def run(duration: float, quick: bool, with_container: bool) -> dict[str, Any]:
    repeat = 200 if quick else 1000
    config = PoolConfig(envs={env: 1 for env in READS}, warm_sessions_per_worker=16, call_timeout_s=30)
    async with EnvPool(config) as pool:
        console.print("lease/release and calls through the pool (process backend)...")
        lease = await lease_release(pool, "ecommerce", repeat)
        calls = await calls_through_pool(pool, "ecommerce", repeat)
        verl = await verl_style_calls(pool, "ecommerce", repeat // 10)
        results = []
        for episodes in [256, 512] if quick else LEVELS:
            console.print(f"{episodes} concurrent episodes for {duration:.0f}s...")
            results.append(await concurrent_episodes(pool, episodes, duration))
            if results[-1]["p99_ms"] > 100:
                break
    console.print(f"baseline: 256 episodes with the official SDK client per lease, {duration:.0f}s...")
    async with EnvPool(replace(config, mcp_client="sdk")) as pool:
        sdk_256 = await concurrent_episodes(pool, 256, duration)
    container = await container_section(3 if quick else 10) if with_container else None
    return {
        "lease": lease,
        "calls": calls,
        "verl": verl,
        "levels": results,
        "sdk_256": sdk_256,
        "container": container,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per concurrency level")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-container", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("ARENA_CACHE_DIR", tempfile.mkdtemp(prefix="arena-bench-cache-"))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    out = asyncio.run(run(8.0 if args.quick else args.duration, args.quick, not args.no_container))
    ray.shutdown()

    levels = out["levels"]
    at_256 = levels[0]
    holding = [lv["episodes"] for lv in levels if lv["p99_ms"] <= 100]
    verl_p50 = statistics.median(out["verl"])
    container = out["container"]
    cold = container["cold_start_s"] if container else None
    pool_cold = container["pool_cold_start_s"] if container else None
    sdk_256 = out["sdk_256"]
    rows = [
        Row.from_samples(
            "lease + release (warm pool)",
            out["lease"],
            target="p50 <= 2 ms",
            baseline_name="verl: create+release per call",
            baseline=verl_p50,
        ),
        Row.from_samples(
            "tool call through pool (process)",
            out["calls"],
            baseline_name="verl: create+execute+release",
            baseline=verl_p50,
        ),
    ]
    if container:
        rows.append(Row.from_samples("tool call through pool (container)", container["calls"]))
        rows.append(
            Row(
                "container cold start -> first MCP response",
                statistics.median(cold),
                percentile(cold, 99),
                unit="s",
                target="p50 <= 1.5 s",
                baseline_name="Docker start (design.md anchor)",
                baseline=2.0,
            )
        )
        rows.append(
            Row(
                "  plus Ray actor and pool start (1-worker pool to first call)",
                statistics.median(pool_cold),
                percentile(pool_cold, 99),
                unit="s",
            )
        )
    for level in levels:
        rows.append(
            Row(
                f"{level['episodes']} episodes, 4 envs: call latency",
                level["p50_ms"],
                level["p99_ms"],
                target="p99 <= 100 ms",
            )
        )
        rows.append(
            Row(
                f"{level['episodes']} episodes: calls/s",
                level["calls_per_s"],
                None,
                unit="calls/s",
                lower_is_better=False,
            )
        )
    rows.append(
        Row(
            "256 episodes, official SDK client per lease: latency",
            sdk_256["p50_ms"],
            sdk_256["p99_ms"],
            baseline_name="(baseline for the lean client)",
        )
    )
    rows.append(Row("memory per concurrent episode (256)", at_256["rss_per_episode_kib"], None, unit="KiB"))
    rows.append(Row("  with the official SDK client", sdk_256["rss_per_episode_kib"], None, unit="KiB"))
    print_table(f"EnvPool — {os.cpu_count()} cores, driver and servers on one machine", rows)
    summary = {
        "lease_p50_ms": round(statistics.median(out["lease"]), 3),
        "lease_p99_ms": round(percentile(out["lease"], 99), 3),
        "call_p50_ms_process": round(statistics.median(out["calls"]), 3),
        "call_p50_ms_container": round(statistics.median(container["calls"]), 3) if container else None,
        "p99_call_ms_256": round(at_256["p99_ms"], 2),
        "calls_per_s_256": round(at_256["calls_per_s"], 1),
        "container_cold_start_p50_s": round(statistics.median(cold), 3) if cold else None,
        "container_pool_cold_start_p50_s": round(statistics.median(pool_cold), 3) if pool_cold else None,
        "rss_per_episode_kib": round(at_256["rss_per_episode_kib"], 1),
        "max_episodes_p99_100ms": max(holding) if holding else 0,
        "p99_call_ms_by_episodes": {str(lv["episodes"]): round(lv["p99_ms"], 2) for lv in levels},
        "infra_errors": sum(lv["infra_errors"] for lv in levels),
        "baseline_verl_create_execute_release_p50_ms": round(verl_p50, 3),
        "baseline_docker_start_s": 2.0,
        "baseline_p99_call_ms_256_sdk_client": round(sdk_256["p99_ms"], 2),
        "baseline_rss_per_episode_kib_sdk_client": round(sdk_256["rss_per_episode_kib"], 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
