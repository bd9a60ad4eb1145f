"""Task synthesis benchmark: throughput, solvability, wrong-answer rejection and measured difficulty.

Usage: python benchmarks/synth.py [--n TASKS_PER_ENV] [--envs a,b] [--seed S] [--samples FILE]

Runs offline synthesis (templates, no LLM) on the built-in environments through a local EnvPool, then
checks every kept task independently: its reference solution is re-run in a fresh session and must
pass its verifier; every answer key must be tied in words to the one call it comes from
(``ambiguous_share``: share of tasks with a key a reader cannot tie, ``task_synth.clarity``); wrong
answers (changed value, missing field, wrong entity, not an object; for state tasks also no change, a
write to another entity, an extra write) must all fail. Measured difficulty per level: reference chain
length, distinct tools, and the solve rate of a heuristic agent that follows strong edges only.
Throughput counts the CPU of this driver and of the environment servers (tasks per core-second); the
baseline is the same synthesis with one worker per environment.
Throughput rises with the batch: exploration calls at the seed state are answered from a memo shared by
the run, so the default is the batch of the issue's example (``arena synth env=airline n=200``); smaller
batches (``--n 50``) run at about 23 tasks per core-second against 29 at n=200. Discovery is measured
once and stored, as ``arena synth`` stores profiles. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from environments.registry import builtin_names  # noqa: E402
from task_synth import synthesizer  # noqa: E402
from task_synth.clarity import ambiguous_share  # noqa: E402
from task_synth.heuristic import attempt  # noqa: E402
from task_synth.model import Task  # noqa: E402
from task_synth.program import SolutionFailed, execute, run_fresh  # noqa: E402
from task_synth.quality import answer_probes, state_probes  # noqa: E402
from task_synth.runner import LeaseRunner  # noqa: E402
from task_synth.synthesizer import SynthResult, load_profile, synthesize  # noqa: E402
from task_synth.verify import verify  # noqa: E402

console = Console(stderr=True)


def _cpu_seconds() -> float:
    """CPU time of this process and of every environment server process."""
    total = sum(psutil.Process().cpu_times()[:2])
    for proc in psutil.process_iter(["cmdline"]):
        if "environments.serving" in (proc.info["cmdline"] or []):
            try:
                total += sum(proc.cpu_times()[:2])
            except psutil.Error:
                continue
    return total


class _Profiles:
    """Discovered profiles kept between runs, as the task store keeps them for ``arena synth``."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], dict] = {}

    def get(self, env: str, version: str) -> dict | None:
        return self.stored.get((env, version))

    def put(self, env: str, version: str, profile: dict) -> None:
        self.stored[(env, version)] = profile


async def _discover_all(
    pool: EnvPool, envs: list[str], seed: int, profiles: _Profiles
) -> tuple[float, float]:
    cpu, wall = _cpu_seconds(), time.perf_counter()
    await asyncio.gather(
        *(
            load_profile(pool, env, seed=seed, profile_cache=profiles.get, save_profile=profiles.put)
            for env in envs
        )
    )
    return time.perf_counter() - wall, _cpu_seconds() - cpu


async def _synthesize_all(
    pool: EnvPool, envs: list[str], n: int, seed: int, profiles: _Profiles
) -> tuple[list[SynthResult], float, float]:
    cpu, wall = _cpu_seconds(), time.perf_counter()
    results = await asyncio.gather(
        *(
            synthesize(pool, env, n=n, levels=[1, 2, 3, 4, 5], seed=seed, profile_cache=profiles.get)
            for env in envs
        )
    )
    return list(results), time.perf_counter() - wall, _cpu_seconds() - cpu


async def _check(pool: EnvPool, result: SynthResult, task: Task, rng: random.Random) -> dict[str, Any]:
    """Independent re-verification of one kept task, plus one heuristic-agent attempt."""
    assert task.solution is not None and result.profile is not None and result.graph is not None
    profile = result.profile
    async with pool.session(task.env) as lease:
        runner = LeaseRunner(lease, profile.mutating)
        try:
            run = await execute(task.solution, runner)
            diff = await runner.diff() if task.verifier.state else None
            reference_ok = verify(task, run.answer, diff).passed
        except SolutionFailed:
            reference_ok, diff = False, None
        probes = [(what, a, diff) for what, a in answer_probes(task.reference_answer or {}, profile, rng)]
        if task.verifier.state is not None:

            async def fresh(solution: Any, extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
                outcome = await run_fresh(runner, solution, extra)
                return None if outcome is None else outcome[1]

            probes += await state_probes(task, task.reference_answer, profile, fresh, rng)
        accepted = [
            {"task": task.id, "probe": what, "answer": answer}
            for what, answer, probe_diff in probes
            if verify(task, answer, probe_diff).passed
        ]
        await runner.reset(force=True)
        solved = (await attempt(task, profile, result.graph, runner)).passed
    return {
        "reference_ok": reference_ok,
        "probes": len(probes),
        "rejected": len(probes) - len(accepted),
        "accepted": accepted,
        "heuristic": solved,
    }


def _level_table(tasks: list[Task], checks: dict[str, dict[str, Any]]) -> tuple[Table, dict[str, Any]]:
    table = Table(title="measured difficulty per level (all environments)")
    for column in ("level", "kept", "mean chain length", "mean distinct tools", "weak/indep. step share",
                   "heuristic solve rate", "kinds"):  # fmt: skip
        table.add_column(column, justify="right")
    per_level: dict[str, Any] = {}
    for level in range(1, 6):
        group = [t for t in tasks if t.difficulty == level]
        if not group:
            continue
        edges = [e for t in group for e in t.provenance.get("edges", []) if e != "program"]
        figures = {
            "kept": len(group),
            "mean_chain_length": round(statistics.fmean(t.measured["chain_length"] for t in group), 2),
            "mean_distinct_tools": round(statistics.fmean(t.measured["distinct_tools"] for t in group), 2),
            "weak_step_share": round(sum(e != "strong" for e in edges) / len(edges), 2) if edges else 0.0,
            "heuristic_solve_rate": round(statistics.fmean(checks[t.id]["heuristic"] for t in group), 2),
            "kinds": dict(Counter(t.kind.value for t in group)),
        }
        per_level[str(level)] = figures
        table.add_row(str(level), *(str(figures[k]) for k in list(figures)[:-1]),
                      ", ".join(f"{k} {v}" for k, v in figures["kinds"].items()))  # fmt: skip
    return table, per_level


async def run(n: int, envs: list[str], seed: int, samples: Path | None) -> dict[str, Any]:
    config = PoolConfig(envs=dict.fromkeys(envs, 1), warm_sessions_per_worker=2 * synthesizer.WORKERS + 2)
    async with EnvPool(config) as pool:
        await pool.wait_healthy()
        profiles = _Profiles()
        with console.status("discovery of every environment (once per version, then stored)"):
            discovery_wall, discovery_cpu = await _discover_all(pool, envs, seed, profiles)
        with console.status("synthesizing (warm-up)"):
            await _synthesize_all(pool, envs, 2, seed + 1, profiles)
        with console.status(f"synthesizing {n} tasks per environment"):
            results, wall, cpu = await _synthesize_all(pool, envs, n, seed, profiles)
        synthesizer.WORKERS, workers = 1, synthesizer.WORKERS
        with console.status("baseline: one worker per environment"):
            base_results, base_wall, base_cpu = await _synthesize_all(pool, envs, n, seed, profiles)
        synthesizer.WORKERS = workers
        tasks = [t for r in results for t in r.tasks]
        rng = random.Random(seed)
        checks: dict[str, dict[str, Any]] = {}
        by_env = {r.env: r for r in results}
        with console.status(f"re-verifying {len(tasks)} kept tasks and running the heuristic agent"):
            for task in tasks:
                checks[task.id] = await _check(pool, by_env[task.env], task, rng)
    base_kept = sum(len(r.tasks) for r in base_results)
    env_table = Table(title="synthesis per environment")
    for column in ("env", "kept", "attempts", "top drop reasons"):
        env_table.add_column(column)
    for r in results:
        reasons = ", ".join(f"{k} {v}" for k, v in r.dropped.most_common(3))
        env_table.add_row(r.env, str(len(r.tasks)), str(r.attempts), reasons)
    level_table, per_level = _level_table(tasks, checks)
    throughput = Table(title="throughput (tasks kept per core-second of driver + servers)")
    for column in ("run", "kept", "wall s", "cpu s", "tasks/s/core", "ratio to baseline"):
        throughput.add_column(column, justify="right")
    per_core, base_per_core = len(tasks) / cpu, base_kept / base_cpu
    throughput.add_row(f"{synthesizer.WORKERS} workers/env", str(len(tasks)), f"{wall:.2f}", f"{cpu:.2f}",
                       f"{per_core:.1f}", f"{per_core / base_per_core:.2f}x")  # fmt: skip
    throughput.add_row("baseline: 1 worker/env", str(base_kept), f"{base_wall:.2f}", f"{base_cpu:.2f}",
                       f"{base_per_core:.1f}", "1.00x")  # fmt: skip
    throughput.add_row(f"discovery of {len(envs)} environments (once, stored)", "-", f"{discovery_wall:.2f}",
                       f"{discovery_cpu:.2f}", "-", "-")  # fmt: skip
    out = Console()
    for table in (env_table, level_table, throughput):
        out.print(table)
    if samples is not None:
        # One task per level, from a different environment each time where possible.
        chosen = []
        for level in range(1, 6):
            group = [t for t in tasks if t.difficulty == level]
            if group:
                envs_here = sorted({t.env for t in group})
                env = envs_here[(level - 1) % len(envs_here)]
                chosen.append(next(t for t in group if t.env == env))
        samples.write_text("\n".join(t.model_dump_json() for t in chosen) + "\n")
    return {
        "tasks_per_s_per_core": round(per_core, 1),
        "tasks_per_s_wall": round(len(tasks) / wall, 1),
        "cpu_seconds": round(cpu, 2),
        "discovery_cpu_seconds": round(discovery_cpu, 2),
        "kept": len(tasks),
        "attempts": sum(r.attempts for r in results),
        "kept_reference_failures": sum(not c["reference_ok"] for c in checks.values()),
        "ambiguous_share": round(ambiguous_share(tasks, {r.env: r.profile for r in results if r.profile}), 4),
        "wrong_answer_probes": sum(c["probes"] for c in checks.values()),
        "wrong_answer_rejected": sum(c["rejected"] for c in checks.values()),
        "wrong_answers_accepted": [a for c in checks.values() for a in c["accepted"]],
        "mean_chain_length": {lv: f["mean_chain_length"] for lv, f in per_level.items()},
        "mean_distinct_tools": {lv: f["mean_distinct_tools"] for lv, f in per_level.items()},
        "heuristic_solve_rate": {lv: f["heuristic_solve_rate"] for lv, f in per_level.items()},
        "per_level_kept": {lv: f["kept"] for lv, f in per_level.items()},
        "baseline_one_worker_tasks_per_s_per_core": round(base_per_core, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="tasks per environment (spread over levels 1-5)")
    parser.add_argument("--envs", default=",".join(builtin_names()), help="comma-separated environments")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=Path, help="write one kept task per level to this JSONL file")
    args = parser.parse_args()
    figures = asyncio.run(run(args.n, args.envs.split(","), args.seed, args.samples))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
