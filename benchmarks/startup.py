"""``arena eval`` start-up: time and CPU from the command to its first episode, against a baseline revision.

Usage: python benchmarks/startup.py [--repeat N] [--baseline REV]

Each run is a fresh ``arena eval policy=reference suite=core tasks_per_env=1`` process (6 built-in
environments, a scripted policy: no model time) on a store that already holds the suite (one cold run
per tree fills it first). Measured per run: seconds from the command to its first episode (its first
progress line), the whole command, the pool's and the suite's stages (from its own progress lines), and
the CPU seconds of its whole process tree (driver, Ray's daemons and workers, environment servers:
polled with psutil every 0.1 s, so a process living under 0.1 s is missed). The baseline is the same
command on the sources of ``--baseline`` (default ``main``, unpacked with ``git archive`` and put first on
``PYTHONPATH``), run alternately with this tree so both see the same machine load. The load average is
printed: on a shared machine wall time follows the load, CPU seconds much less. Target: first episode
under 20 s on 2 idle cores. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.stats import Row, percentile, print_table  # noqa: E402

TARGET_S = 20.0
EVAL = ["policy=reference", "suite=core", "tasks_per_env=1"]
_STAGE = re.compile(r"^(starting \d+ environment\(s\)|preparing suite \w+) done in ([\d.]+) s$")
_FIRST_EPISODE = re.compile(r": 0/\d+ episodes")


def _run_eval(source: Path, home: Path, run_id: str) -> dict[str, float]:
    """One ``arena eval`` process on ``source``'s code: its timings and its process tree's CPU seconds."""
    env = {**os.environ, "ARENA_HOME": str(home), "PYTHONPATH": str(source), "RAY_AUTH_MODE": "disabled"}
    command = [sys.executable, "-m", "arena.cli.main", "eval", *EVAL, f"run_id={run_id}"]
    home.mkdir(exist_ok=True)
    started = time.perf_counter()
    proc = subprocess.Popen(  # run from ARENA_HOME: ``-m`` puts the working directory first on sys.path
        command, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    found: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "first_episode" not in found and _FIRST_EPISODE.search(line):
                found["first_episode"] = time.perf_counter() - started
            if stage := _STAGE.match(line.strip()):
                found[stage.group(1).split()[0]] = float(stage.group(2))

    reader = threading.Thread(target=read)
    reader.start()
    cpu: dict[int, float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for member in tree:
            try:
                times = member.cpu_times()
            except psutil.Error:
                continue
            cpu[member.pid] = times.user + times.system
        time.sleep(0.1)
    reader.join()
    wall = time.perf_counter() - started
    if proc.returncode != 0 or "first_episode" not in found:
        raise SystemExit(f"{' '.join(command)} failed (exit {proc.returncode}):\n{''.join(lines)}")
    return {
        "first_episode": found["first_episode"],
        "wall": wall,
        "pool": found["starting"],
        "suite": found["preparing"],
        "cpu": sum(cpu.values()),
    }


def _unpack(rev: str, into: Path) -> str:
    """The sources of git revision ``rev`` under ``into``; returns its short commit id."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs measured per tree")
    parser.add_argument("--baseline", default="main", help="git revision to compare with (default main)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="arena-startup-") as tmp:
        base_src = Path(tmp, "baseline")
        base_src.mkdir()
        commit = _unpack(args.baseline, base_src)
        trees = {"this tree": ROOT, f"{args.baseline} ({commit})": base_src}
        homes = {name: Path(tmp, f"home-{i}") for i, name in enumerate(trees)}
        cold = {name: _run_eval(src, homes[name], "cold") for name, src in trees.items()}
        warm: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for i in range(args.repeat):
            for name, src in trees.items():
                warm[name].append(_run_eval(src, homes[name], f"warm-{i}"))
    load_after = os.getloadavg()
    this, base = warm["this tree"], next(v for k, v in warm.items() if k != "this tree")
    base_name = next(k for k in trees if k != "this tree")

    def samples(runs: list[dict[str, float]], key: str) -> list[float]:
        return [run[key] for run in runs]

    def row(metric: str, key: str, unit: str = "s", target: str = "") -> Row:
        return Row.from_samples(
            metric,
            samples(this, key),
            unit=unit,
            target=target,
            baseline_name=base_name,
            baseline=statistics.median(samples(base, key)),
        )

    rows = [
        row("command to first episode", "first_episode", target=f"< {TARGET_S:.0f} s on 2 idle cores"),
        row("start the pool (Ray included)", "pool"),
        row("prepare the suite (from the store)", "suite"),
        row("whole command", "wall"),
        row("CPU of the process tree", "cpu", unit="CPU s"),
    ]
    title = (
        f"arena eval start-up ({' '.join(EVAL)}; {args.repeat} warm runs per tree, alternating; "
        f"{os.cpu_count()} cores, load {load_before[0]:.1f} before, {load_after[0]:.1f} after)"
    )
    print_table(title, rows)
    summary: dict[str, object] = {"baseline": base_name, "repeat": args.repeat}
    for key in ("first_episode", "wall", "pool", "suite", "cpu"):
        summary[f"{key}_p50_s"] = round(statistics.median(samples(this, key)), 2)
        summary[f"{key}_p99_s"] = round(percentile(samples(this, key), 99), 2)
        summary[f"baseline_{key}_p50_s"] = round(statistics.median(samples(base, key)), 2)
    summary["cold_first_episode_s"] = round(cold["this tree"]["first_episode"], 2)
    summary["load_avg_1m_before"] = round(load_before[0], 2)
    summary["load_avg_1m_after"] = round(load_after[0], 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
