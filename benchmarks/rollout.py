"""Rollout benchmark: the episode loop's own overhead per turn (model and tool time excluded), and
episodes per second with 256 concurrent episodes, on the built-in environments with the scripted
``reference`` policy (so no model time at all).

Usage: python benchmarks/rollout.py [--tasks-per-env N] [--episodes N]
       python benchmarks/rollout.py --startup [--repeat N]

Per turn, overhead = (episode wall time - time inside the policy - time waiting on tools) / turns: what
the loop itself adds (leasing, tool listing, bookkeeping, verification and the state diff, spread over
the turns). Baseline beside each figure: the same episodes with one official MCP SDK client per lease
(``PoolConfig(mcp_client="sdk")``). The last line printed is one JSON object.

``--startup``: where the wall time of ``arena eval policy=reference suite=core tasks_per_env=1`` goes
before the first episode, in fresh processes: Python imports, ``ray.init`` alone, starting the pool (Ray
included), preparing the suite (cold: synthesized into an empty ``ARENA_HOME``; warm: read from the
store), the episodes, and the whole command. Target: under 20 s warm on 2 idle cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
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
STARTUP_TARGET_S = 20.0
EVAL = ["policy=reference", "suite=core", "tasks_per_env=1"]
_STAGE = re.compile(r"^(starting \d+ environment\(s\)|preparing suite \w+) done in ([\d.]+) s$", re.M)
_EPISODES = re.compile(r": \d+/\d+ episodes .* (\d+) s$", re.M)


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


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - started, done.stdout


def _eval_once(home: str, run_id: str) -> dict[str, float]:
    """One ``arena eval`` process: its stages' times (from its plain progress lines) and its wall time."""
    env = {**os.environ, "ARENA_HOME": home}
    wall, out = _timed([sys.executable, "-m", "arena.cli.main", "eval", *EVAL, f"run_id={run_id}"], env)
    stages = {name.split()[0]: float(seconds) for name, seconds in _STAGE.findall(out)}
    episodes_s = [float(s) for s in _EPISODES.findall(out)]
    return {
        "wall": wall,
        "pool": stages["starting"],
        "suite": stages["preparing"],
        "episodes": episodes_s[-1] if episodes_s else 0.0,
    }


def startup(repeat: int) -> None:
    """Print where ``arena eval``'s start-up time goes (see the module docstring)."""
    env = dict(os.environ)
    import_cli = [sys.executable, "-c", "import arena.cli.main, arena.eval.runner"]
    imports = [_timed(import_cli, env)[0] for _ in range(repeat)]
    probe = (
        "import time, ray; t = time.perf_counter(); ray.init(include_dashboard=False); "
        "print(time.perf_counter() - t)"
    )
    ray_init = [float(_timed([sys.executable, "-c", probe], env)[1].split()[-1]) for _ in range(repeat)]
    with tempfile.TemporaryDirectory(prefix="arena-startup-") as home:
        cold = _eval_once(home, "cold")
        warm = [_eval_once(home, f"warm-{i}") for i in range(repeat)]

    def measured(key: str) -> list[float]:
        return [run[key] for run in warm]

    rows = [
        Row.from_samples("python imports (arena.cli.main, arena.eval.runner)", imports, unit="s"),
        Row.from_samples("ray.init alone", ray_init, unit="s"),
        Row.from_samples("start the pool (Ray included)", measured("pool"), unit="s"),
        Row.from_samples(
            "prepare suite core (warm: from the store)",
            measured("suite"),
            unit="s",
            baseline_name="cold (synthesized)",
            baseline=cold["suite"],
        ),
        Row.from_samples("play the episodes", measured("episodes"), unit="s"),
        Row.from_samples(
            "arena eval, whole command (warm)",
            measured("wall"),
            unit="s",
            target=f"< {STARTUP_TARGET_S:.0f} s on 2 idle cores",
            baseline_name="cold (synthesized)",
            baseline=cold["wall"],
        ),
    ]
    print_table(f"arena eval start-up ({' '.join(EVAL)}; {repeat} warm runs, {os.cpu_count()} cores)", rows)
    summary = {f"{key}_warm_p50_s": round(statistics.median(measured(key)), 2) for key in warm[0]}
    summary |= {f"{key}_cold_s": round(value, 2) for key, value in cold.items()}
    summary |= {
        "imports_p50_s": round(statistics.median(imports), 2),
        "ray_init_p50_s": round(statistics.median(ray_init), 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks-per-env", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=768, help="episodes in the concurrent burst")
    parser.add_argument("--startup", action="store_true", help="measure arena eval's start-up instead")
    parser.add_argument("--repeat", type=int, default=3, help="--startup: warm runs measured")
    args = parser.parse_args()
    if args.startup:
        startup(args.repeat)
        return
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
