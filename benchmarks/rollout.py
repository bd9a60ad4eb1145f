"""Rollout benchmark: the episode loop's own overhead per turn (model and tool time excluded), and
episodes per second with 256 concurrent episodes, on the built-in environments with the scripted
``reference`` policy (so no model time at all).

Usage: python benchmarks/rollout.py [--tasks-per-env N] [--episodes N]

Per turn, overhead = (episode wall time - time inside the policy - time waiting on tools) / turns: what
the loop itself adds (leasing, tool listing, bookkeeping, verification and the state diff, spread over
the turns). Baseline beside each figure: the same episodes with one official MCP SDK client per lease
(``PoolConfig(mcp_client="sdk")``). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arena.policies.scripted import ReferencePolicy  # noqa: E402
from arena.rollout.episode import EpisodeConfig, episodes  # noqa: E402
from arena.rollout.records import EpisodeRecord  # noqa: E402
from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from benchmarks.stats import Row, percentile, print_table  # noqa: E402
from environments.registry import builtin_names  # noqa: E402
from task_synth.model import Task  # noqa: E402
from task_synth.synthesizer import synthesize  # noqa: E402

CONCURRENT = 256


def _overheads(records: list[EpisodeRecord]) -> tuple[list[float], list[float]]:
    """Per-turn loop overhead and per-call tool latency, in ms, of scored episodes."""
    overhead, calls = [], []
    for record in records:
        if record.passed is None or not record.turns:
            continue
        m = record.metrics()
        overhead.append((m["wall_s"] - m["policy_s"] - m["tool_wait_s"]) / m["turns"] * 1000)
        calls += [c.latency_s * 1000 for c in record.tool_calls]
    return overhead, calls


async def _measure(client: str, tasks_per_env: int, total: int) -> dict[str, Any]:
    envs = builtin_names()
    config = PoolConfig(envs={env: 1 for env in envs}, warm_sessions_per_worker=64, mcp_client=client)
    async with EnvPool(config) as pool:
        tasks: list[Task] = []
        for env in envs:
            tasks += (await synthesize(pool, env, n=tasks_per_env, levels=[1, 3], seed=11)).tasks
        limits, policy = EpisodeConfig(max_turns=64), ReferencePolicy()
        sequential = [r async for r in episodes(pool, [(t, 0) for t in tasks], policy, limits, 1)]
        overhead, calls = _overheads(sequential)
        items = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(total)]
        started = time.perf_counter()
        burst = [r async for r in episodes(pool, items, policy, limits, CONCURRENT)]
        elapsed = time.perf_counter() - started
    return {
        "overhead": overhead,
        "calls": calls,
        "turns": statistics.fmean(len(r.turns) for r in sequential),
        "success": sum(bool(r.passed) for r in sequential) / len(sequential),
        "episodes_per_s": len(burst) / elapsed,
        "infra_errors": sum(r.passed is None for r in [*sequential, *burst]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks-per-env", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=768, help="episodes in the concurrent burst")
    args = parser.parse_args()
    lean = asyncio.run(_measure("lean", args.tasks_per_env, args.episodes))
    sdk = asyncio.run(_measure("sdk", args.tasks_per_env, args.episodes))
    baseline = "official SDK client per lease"
    rows = [
        Row.from_samples(
            "episode-loop overhead per turn (no model, no tool time)",
            lean["overhead"],
            target="p50 <= 3 ms",
            baseline_name=baseline,
            baseline=statistics.median(sdk["overhead"]),
        ),
        Row.from_samples(
            "tool call latency seen by the episode",
            lean["calls"],
            baseline_name=baseline,
            baseline=statistics.median(sdk["calls"]),
        ),
        Row(
            f"episodes/s, {CONCURRENT} concurrent (reference policy)",
            lean["episodes_per_s"],
            unit="ep/s",
            baseline_name=baseline,
            baseline=sdk["episodes_per_s"],
            lower_is_better=False,
        ),
    ]
    print_table(
        f"Rollout ({len(builtin_names())} built-in environments, {lean['turns']:.1f} turns/episode)", rows
    )
    result = {
        "turn_overhead_p50_ms": round(statistics.median(lean["overhead"]), 3),
        "turn_overhead_p99_ms": round(percentile(lean["overhead"], 99), 3),
        "tool_call_p50_ms": round(statistics.median(lean["calls"]), 3),
        "episodes_per_s_256": round(lean["episodes_per_s"], 1),
        "reference_success": lean["success"],
        "infra_errors": lean["infra_errors"] + sdk["infra_errors"],
        "baseline_sdk_turn_overhead_p50_ms": round(statistics.median(sdk["overhead"]), 3),
        "baseline_sdk_episodes_per_s_256": round(sdk["episodes_per_s"], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
