"""BFCL v4 multi-turn fidelity benchmark: the ground truth of every entry (800 over four categories)
replayed through the arena (real MCP server, one isolated session per episode, the ``reference``
policy), scored by BFCL's own checker in the environment server, compared with the checker run natively
on the same ground truth (a child process), plus deliberately wrong trajectories that must fail.

Usage: python benchmarks/bfcl.py [--per-category N] [--concurrency N] [--no-perturb] [--latency-tasks N]

Per-call overhead: an MCP tool call's round trip in the arena (median, episodes played one at a time on
the warm pool after the concurrent replay) minus the same ground-truth call
made directly on the backend objects in-process (median). The sandbox's share: the same calls through the
session store without MCP, BFCL's code in-process vs in the session's sandboxed child (the server's way),
on the first ``--latency-tasks`` entries of each category. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from arena.policies.scripted import ReferencePolicy  # noqa: E402
from arena.rollout.episode import EpisodeConfig, episodes, run_episode  # noqa: E402
from arena.rollout.records import EpisodeRecord  # noqa: E402
from arena.runtime.pool import EnvPool, PoolConfig  # noqa: E402
from benchmarks.stats import Row, percentile, print_table  # noqa: E402
from environments.bfcl import NAME, VERSION  # noqa: E402
from environments.bfcl.data import CATEGORIES  # noqa: E402
from environments.bfcl.package import require  # noqa: E402
from task_synth.bfcl import PERTURBATIONS, bfcl_tasks, perturb  # noqa: E402
from task_synth.model import CallStep, Task  # noqa: E402

CONFIG = EpisodeConfig(max_turns=200)


def native(trajectories: dict[str, Any], sandboxed_per_category: int) -> dict[str, Any]:
    """BFCL natively, in a child process: checker verdicts on the ground truth and on ``trajectories``,
    direct call times, and session-store call times with BFCL's code in-process and sandboxed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "environments.bfcl.native", str(sandboxed_per_category)],
        input=json.dumps(trajectories),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def reference_turns(task: Task) -> list[list[list[dict[str, Any]]]]:
    """The calls the reference policy makes, as the episode groups them: one call per step."""
    return [
        [[{"name": s.tool, "arguments": s.arguments}] for s in sol.steps if isinstance(s, CallStep)]
        for sol in task.turn_solutions
    ]


async def replay(
    items: list[Task], concurrency: int, probe: list[Task] | None = None
) -> tuple[list[EpisodeRecord], float, list[float]]:
    """Replay ``items`` with ``concurrency`` episodes at once (tasks/s); then, on the warm pool, the
    ``probe`` tasks one at a time: their tool calls' latency, free of queueing behind other episodes."""
    async with EnvPool(PoolConfig(envs={NAME: 2}, warm_sessions_per_worker=8)) as pool:
        started = time.perf_counter()
        pairs = [(t, 0) for t in items]
        records = [r async for r in episodes(pool, pairs, ReferencePolicy(), CONFIG, concurrency)]
        seconds = time.perf_counter() - started
        latencies: list[float] = []
        for task in probe or []:
            record = await run_episode(pool, task, ReferencePolicy(), CONFIG)
            latencies += [c.latency_s * 1000 for t in record.turns for c in t.tool_calls]
        return records, seconds, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-category", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-perturb", action="store_true")
    parser.add_argument("--latency-tasks", type=int, default=10, help="per category, played one at a time")
    args = parser.parse_args()
    require()
    tasks = [t for c in CATEGORIES for t in bfcl_tasks([c])[: args.per_category]]
    bad: list[tuple[str, Task]] = []
    if not args.no_perturb:
        for task in tasks:
            for how in PERTURBATIONS:
                try:
                    bad.append((how, perturb(task, how)))
                except (ValueError, StopIteration):
                    continue  # no string argument, or no later turn to play late
    renamed = [t.model_copy(update={"id": f"{t.id}~{how}"}) for how, t in bad]
    baseline = native(
        {t.id: {"entry_id": t.provenance["bfcl_id"], "turns": reference_turns(t)} for t in renamed},
        args.latency_tasks,
    )
    probe = [t for c in CATEGORIES for t in bfcl_tasks([c])[: args.latency_tasks]]
    records, seconds, calls = asyncio.run(replay(tasks, args.concurrency, probe))
    by_id = {t.id: t for t in tasks}
    bad_records: list[EpisodeRecord] = []
    if bad:
        bad_records, _, _ = asyncio.run(replay(renamed, args.concurrency))

    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for record in records:
        task = by_id[record.task_id]
        row = table[str(task.provenance["category"])]
        native_pass = baseline["passed"][task.provenance["bfcl_id"]]
        arena_pass = record.verdict is not None and record.verdict.passed
        row["tasks"] += 1
        row["native"] += native_pass
        row["arena"] += arena_pass
        row["agree"] += arena_pass == native_pass
        row["infra"] += record.infra_error is not None
    for record in bad_records:
        base_id, how = record.task_id.split("~")
        row = table[str(by_id[base_id].provenance["category"])]
        failed = record.verdict is not None and not record.verdict.passed
        row[f"{how}_n"] += 1
        row[f"{how}_failed"] += failed
        row[f"{how}_native_failed"] += not baseline["checked"][record.task_id]
        row["perturbed_agree"] += failed == (not baseline["checked"][record.task_id])

    console = Console(width=170)
    grid = Table(title=f"BFCL v4 multi-turn ground-truth replay through the arena (bfcl-eval {VERSION})")
    wrong = [f"{h} fail arena/native/n" for h in PERTURBATIONS]
    for column in ("category", "tasks", "native pass", "arena pass", "agreement", "infra", *wrong):
        grid.add_column(column, justify="right")
    totals: dict[str, int] = defaultdict(int)
    for category in CATEGORIES:
        row = table[category]
        for key, value in row.items():
            totals[key] += value
        grid.add_row(category, *_cells(row))
    grid.add_row("all", *_cells(totals))
    console.print(grid)

    direct = baseline["call_ms"]
    in_process, sandboxed = baseline["store_call_ms"], baseline["sandboxed_store_call_ms"]
    overhead = statistics.median(calls) - statistics.median(direct)
    print_table(
        "BFCL tool calls",
        [
            Row.from_samples(
                "tool call over MCP (arena, one episode at a time)",
                calls,
                baseline_name="direct",
                baseline=statistics.median(direct),
            ),
            Row.from_samples("tool call via the session store, no MCP, BFCL in-process", in_process),
            Row.from_samples(
                "tool call via the session store, no MCP, BFCL sandboxed (the server's way)",
                sandboxed,
                baseline_name="in-process",
                baseline=statistics.median(in_process),
            ),
            Row("replay throughput", len(records) / seconds, unit="tasks/s", lower_is_better=False),
        ],
    )
    agreed_native = sum(
        1
        for r in records
        if baseline["passed"][by_id[r.task_id].provenance["bfcl_id"]]
        and r.verdict is not None
        and r.verdict.passed
    )
    native_passed = sum(1 for r in records if baseline["passed"][by_id[r.task_id].provenance["bfcl_id"]])
    result = {
        "bfcl_version": VERSION,
        "tasks": len(records),
        "native_passed": native_passed,
        "arena_passed": totals["arena"],
        "agreement": round(agreed_native / native_passed, 4) if native_passed else None,
        "verdict_agreement": round(totals["agree"] / len(records), 4) if records else None,
        "infra_errors": totals["infra"],
        "perturbed": len(bad_records),
        "perturbed_failed": sum(totals[f"{h}_failed"] for h in PERTURBATIONS),
        "perturbed_native_failed": sum(totals[f"{h}_native_failed"] for h in PERTURBATIONS),
        "perturbed_agreement": round(totals["perturbed_agree"] / len(bad_records), 4)
        if bad_records
        else None,
        "replay_tasks_per_s": round(len(records) / seconds, 1),
        "call_p50_ms": round(statistics.median(calls), 3),
        "call_p99_ms": round(percentile(calls, 99), 3),
        "direct_call_p50_ms": round(statistics.median(direct), 4),
        "store_call_p50_ms": round(statistics.median(in_process), 3),
        "store_call_p99_ms": round(percentile(in_process, 99), 3),
        "sandboxed_call_p50_ms": round(statistics.median(sandboxed), 3),
        "sandboxed_call_p99_ms": round(percentile(sandboxed, 99), 3),
        "sandboxed_call_overhead_p50_ms": round(
            statistics.median(sandboxed) - statistics.median(in_process), 3
        ),
        "call_overhead_p50_ms": round(overhead, 3),
    }
    print(json.dumps(result))


def _cells(row: dict[str, int]) -> list[str]:
    agreement = f"{row['agree'] / row['tasks']:.1%}" if row["tasks"] else "-"
    perturbed = [f"{row[f'{h}_failed']}/{row[f'{h}_native_failed']}/{row[f'{h}_n']}" for h in PERTURBATIONS]
    return [
        str(row["tasks"]),
        str(row["native"]),
        str(row["arena"]),
        agreement,
        str(row["infra"]),
        *perturbed,
    ]


if __name__ == "__main__":
    main()
