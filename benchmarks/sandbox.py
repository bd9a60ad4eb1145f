"""What the bubblewrap sandbox costs a generated program, against the old in-process runner.

Usage: python benchmarks/sandbox.py [--runs N] [--calls N] [--gap-ms MS]

Both paths run against the same testbed session in this process (no HTTP), so the difference is the
sandbox alone. ``in-process`` is the old runner (``exec`` with restricted builtins in the server, no
isolation), kept here only as the baseline. Program overhead: a program that returns at once, run
``--runs`` times with ``--gap-ms`` between runs (the warm children are refilled meanwhile, as between
programs of one synthesis step) and back to back (a burst that outruns the refill: cold starts).
Tool call overhead: a program making ``--calls`` ``get_account`` calls, per call, sandboxed minus
in-process. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.stats import Row, percentile, print_table  # noqa: E402
from environments.registry import load_environment  # noqa: E402
from environments.sandbox import Sandbox  # noqa: E402
from environments.sdk.environment import Environment  # noqa: E402
from environments.sdk.execution import execute_tool  # noqa: E402
from environments.sdk.state import EpisodeState, StateStore  # noqa: E402

TESTBED = ROOT / "tests" / "fixtures" / "testbed"
TRIVIAL = "def solve(tools):\n    return {'ok': 1}"


def calls_program(n: int) -> str:
    loop = f"    for _ in range({n}):\n        tools.call('get_account', account_id=1)\n"
    return f"def solve(tools):\n{loop}    return {n}"


def cpu_ms() -> float:
    """CPU time of this process and its reaped children (the sandboxes), in ms."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


def in_process(env: Environment, state: EpisodeState, source: str) -> Any:
    """The old path: exec in the server's own process with restricted builtins (baseline only)."""

    class Tools:
        def call(self, name: str, **arguments: Any) -> Any:
            outcome = execute_tool(env, state, name, arguments)
            if not outcome.ok:
                raise RuntimeError(outcome.value)
            return outcome.value

    safe = {n: getattr(builtins, n) for n in ("range", "len", "dict", "list", "int", "str")}
    namespace: dict[str, Any] = {"__builtins__": safe}
    exec(compile(source, "<program>", "exec"), namespace)
    value = namespace["solve"](Tools())
    json.dumps(value)
    return value


async def measure(runs: int, calls: int, gap_ms: float) -> list[Row]:
    env = load_environment(str(TESTBED))
    store = StateStore(env)
    state = store.create()

    def call(name: str, arguments: Any) -> tuple[bool, Any]:
        outcome = execute_tool(env, state, name, arguments)
        return outcome.ok, outcome.value

    sandbox = Sandbox()
    await sandbox.run(call, TRIVIAL)  # starts the warm children
    await asyncio.sleep(0.5)

    async def timed_sandbox(source: str) -> float:
        start = time.perf_counter()
        run = await sandbox.run(call, source)
        elapsed = (time.perf_counter() - start) * 1000
        assert run.ok, run.error
        return elapsed

    def timed_in_process(source: str) -> float:
        start = time.perf_counter()
        in_process(env, state, source)
        return (time.perf_counter() - start) * 1000

    base = [timed_in_process(TRIVIAL) for _ in range(runs)]
    spaced = []
    for _ in range(runs):
        spaced.append(await timed_sandbox(TRIVIAL))
        await asyncio.sleep(gap_ms / 1000)
    burst = [await timed_sandbox(TRIVIAL) for _ in range(max(10, runs // 5))]

    source = calls_program(calls)
    base_calls, box_calls, base_cpu, box_cpu = [], [], [], []
    for _ in range(max(5, runs // 20)):
        before = cpu_ms()
        base_calls.append(timed_in_process(source))
        middle = cpu_ms()
        box_calls.append(await timed_sandbox(source))
        after = cpu_ms()
        base_cpu.append(middle - before)
        box_cpu.append(after - middle)
        await asyncio.sleep(gap_ms / 1000)
    await sandbox.aclose()
    store.close_all()

    base_p50, base_p99 = statistics.median(base), percentile(base, 99)
    per_call = [(b - a) / calls for a, b in zip(sorted(base_calls), sorted(box_calls), strict=True)]
    in_process_per_call = statistics.median(base_calls) / calls
    return [
        Row("program, in-process (old, no isolation)", base_p50, base_p99, baseline_name="-"),
        Row(
            f"program overhead, sandboxed, {gap_ms:g} ms apart",
            statistics.median(spaced) - base_p50,
            percentile(spaced, 99) - base_p99,
            target="<= 20 ms",
        ),
        Row(
            "program overhead, sandboxed, back to back",
            statistics.median(burst) - base_p50,
            percentile(burst, 99) - base_p99,
            target="(cold starts)",
        ),
        Row("tool call, in-process (old)", in_process_per_call, None, baseline_name="-"),
        Row(
            "tool call overhead, sandboxed (wall)",
            statistics.median(per_call),
            percentile(per_call, 99),
            target="<= 0.5 ms",
        ),
        Row(
            "tool call overhead, sandboxed (CPU, server + sandbox)",
            (statistics.median(box_cpu) - statistics.median(base_cpu)) / calls,
            None,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=100.0)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.runs, args.calls, args.gap_ms))
    print_table("Generated programs: bubblewrap sandbox vs the old in-process runner", rows)
    spaced, burst, call, cpu = rows[1], rows[2], rows[4], rows[5]
    print(
        json.dumps(
            {
                "program_overhead_p50_ms": round(spaced.p50 or 0.0, 3),
                "program_overhead_p99_ms": round(spaced.p99 or 0.0, 3),
                "program_overhead_back_to_back_p50_ms": round(burst.p50 or 0.0, 3),
                "sandboxed_call_overhead_p50_ms": round(call.p50 or 0.0, 4),
                "sandboxed_call_overhead_p99_ms": round(call.p99 or 0.0, 4),
                "sandboxed_call_cpu_overhead_ms": round(cpu.p50 or 0.0, 4),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
                "runs": args.runs,
                "calls": args.calls,
            }
        )
    )


if __name__ == "__main__":
    main()
