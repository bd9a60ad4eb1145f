"""What the sandbox costs one imported (Agent-World) tool call, against the old in-process runner.

Usage: python benchmarks/agentworld_sandbox.py [--calls N]

A synthetic imported environment (``tests/test_agentworld_sandbox.py``'s release); each call goes through
``execute_tool`` in this process (no HTTP): the session's files are written out, the released code runs,
its changes are stored back. ``in-process`` is the old runner (``exec`` with the seeded builtins in the
server process, no isolation), kept here only as the baseline; ``sandboxed`` is a fresh bubblewrap
child per call. The last line is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.stats import Row, print_table  # noqa: E402
from environments.importers.agentworld import import_directory, load_imported  # noqa: E402
from environments.importers.agentworld.determinism import seeded_builtins  # noqa: E402
from environments.importers.agentworld.tools import DB_DIR_ENV, ImplementationRunner  # noqa: E402
from environments.sdk.testing import EnvHarness  # noqa: E402
from tests.test_agentworld_sandbox import write_release  # noqa: E402


@contextlib.contextmanager
def _db_dir(directory: Path) -> Iterator[None]:
    previous = os.environ.get(DB_DIR_ENV)
    os.environ[DB_DIR_ENV] = str(directory)
    try:
        yield
    finally:
        os.environ.pop(DB_DIR_ENV, None) if previous is None else os.environ.update({DB_DIR_ENV: previous})


def _in_process(
    self: ImplementationRunner, files: dict[str, bytes], arguments: Mapping[str, Any], seed: int, running: Any
) -> tuple[Any, dict[str, bytes | None]]:
    """The old ``_invoke``: the released code in the server's own process, on a host folder."""
    namespace: dict[str, Any] = {"__name__": f"agentworld_tool_{self.tool_name}"}
    namespace["__builtins__"] = seeded_builtins(seed)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for path, data in files.items():
            (directory / path).parent.mkdir(parents=True, exist_ok=True)
            (directory / path).write_bytes(data)
        with _db_dir(directory), contextlib.redirect_stdout(sys.stderr):
            exec(compile(self.source, self.tool_name, "exec"), namespace)
            value = namespace[self.tool_name](**arguments)
        current = {
            p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()
        }
    changed: dict[str, bytes | None] = {p: d for p, d in current.items() if files.get(p) != d}
    changed.update({p: None for p in files if p not in current})
    return value, changed


def _cpu_s() -> float:
    """This (the server's) process only: bwrap's pid-namespace children are not all accounted to us."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _time(harness: EnvHarness, calls: int) -> tuple[list[float], float]:
    samples: list[float] = []
    cpu = _cpu_s()
    for index in range(calls):
        tool, arguments = ("create_item", {"name": f"n{index}"}) if index % 2 else ("count", {})
        start = time.perf_counter()
        outcome = harness.outcome(tool, **arguments)
        samples.append((time.perf_counter() - start) * 1000)
        assert outcome.ok, outcome.value
    return samples, (_cpu_s() - cpu) * 1000 / calls


def measure(calls: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        write_release(Path(tmp) / "environment_mix")
        import_directory(Path(tmp) / "environment_mix", Path(tmp) / "imported", replay=False, progress=False)
        env = load_imported("agentworld/0000001", Path(tmp) / "imported")
        with EnvHarness(env) as harness:
            _time(harness, 4)  # warm-up
            boxed, boxed_cpu = _time(harness, calls)
        original = ImplementationRunner._invoke
        ImplementationRunner._invoke = _in_process  # type: ignore[method-assign]
        try:
            with EnvHarness(env) as harness:
                _time(harness, 4)
                base, base_cpu = _time(harness, calls)
        finally:
            ImplementationRunner._invoke = original  # type: ignore[method-assign]
    base_row = Row.from_samples("tool call, in-process (old, unsandboxed)", base)
    return [
        base_row,
        Row.from_samples(
            "tool call, sandboxed (bubblewrap child per call)",
            boxed,
            target="< 100 ms",
            baseline_name="in-process",
            baseline=base_row.p50,
        ),
        Row("server CPU per call, in-process", base_cpu),
        Row(
            "server CPU per call, sandboxed",
            boxed_cpu,
            baseline_name="in-process",
            baseline=base_cpu,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    rows = measure(args.calls)
    print_table("Imported tool calls: bubblewrap sandbox vs the old in-process runner", rows)
    base, boxed, base_cpu, boxed_cpu = rows
    print(
        json.dumps(
            {
                "in_process_p50_ms": round(base.p50 or 0.0, 3),
                "sandboxed_p50_ms": round(boxed.p50 or 0.0, 3),
                "sandboxed_p99_ms": round(boxed.p99 or 0.0, 3),
                "overhead_p50_ms": round((boxed.p50 or 0.0) - (base.p50 or 0.0), 3),
                "server_cpu_per_call_in_process_ms": round(base_cpu.p50 or 0.0, 3),
                "server_cpu_per_call_sandboxed_ms": round(boxed_cpu.p50 or 0.0, 3),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
                "calls": args.calls,
            }
        )
    )


if __name__ == "__main__":
    main()
