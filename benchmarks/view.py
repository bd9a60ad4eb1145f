"""``arena view`` benchmark: page latency over a generated store with a 20,000-episode run.

Usage: python benchmarks/view.py [--episodes 20000] [--requests 40] [--store sqlite:///... | postgresql+psycopg://...]

The store gets one big eval run (episodes spread over environments, levels, categories and failure modes,
three recorded turns each, inserted in bulk) and 40 small runs, then ``arena view`` is started as a real
server (a subprocess) and each page is fetched ``--requests`` times over HTTP after two warm-up requests.
Target: the big run's first page in < 300 ms. Baseline: loading the run's episodes the way reports do
(``RunStore.episodes``), what a viewer without server-side paging and aggregation would start from. Each
page also gets the server's CPU time per request (user + system of the ``arena view`` process over the
timed requests, from ``/proc``): on a machine busy with other work the wall time is mostly waiting for a
core, the CPU time is what the page costs. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from rich.console import Console
from sqlalchemy import insert, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arena.rollout.records import EpisodeRecord, FailureMode, ToolCallRecord, TurnRecord  # noqa: E402
from arena.store import Database, RunStore  # noqa: E402
from arena.store.schema import EpisodeRow, RunRow, StepRow  # noqa: E402
from benchmarks.stats import Row, print_table, time_ms  # noqa: E402
from task_synth.model import Verdict  # noqa: E402

console = Console(stderr=True)
ENVS = ["library", "banking", "airline", "ecommerce", "project_tracker", "hr"]
MODES = [m for m in FailureMode if m is not FailureMode.SOLVED]
BIG_RUN = "bench-view-20k"
TARGET_MS = 300.0
CHUNK = 2000
START_TIMEOUT_S = 300.0
"""How long ``arena view`` may take to start answering (its imports took over 60 s at load 25 here)."""


def _record(rng: random.Random, index: int) -> tuple[EpisodeRecord, str]:
    env = ENVS[index % len(ENVS)]
    level = 1 + index % 5
    mode = FailureMode.SOLVED if rng.random() < 0.4 else rng.choice(MODES)
    infra = mode is FailureMode.INFRA_ERROR
    verdict = None if infra else Verdict(passed=mode is FailureMode.SOLVED, criteria={"field:total": True})
    turns = [
        TurnRecord(
            index=t,
            content=None if t < 2 else '{"total": 3}',
            tool_calls=[] if t == 2 else [ToolCallRecord(f"c{t}", "get_item", {"id": t}, {"id": t, "n": 3})],
            user_message="Count the items." if t == 0 else None,
            prompt_tokens=400 + 60 * t,
            completion_tokens=30,
            policy_latency_s=0.2,
        )
        for t in range(3)
    ]
    record = EpisodeRecord(
        f"task-{index // 2:06d}",
        env,
        level,
        "lookup",
        index % 2,
        mode,
        verdict,
        {"total": 3},
        turns,
        "worker died" if infra else None,
        not infra,
        0.8,
        {} if level < 3 else None,
    )
    return record, ["data", "ops", "retail"][index % 3]


def build_store(url: str, episodes: int) -> None:
    """One run of ``episodes`` episodes plus 40 small runs, inserted in bulk."""
    db = Database(url)
    rng = random.Random(0)
    runs = RunStore(db)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with db.session() as session:
            for i in range(40):
                session.add(
                    RunRow(
                        id=f"bench-small-{i:02d}",
                        kind="eval",
                        policy="random",
                        suite="core",
                        config={},
                        status="finished",
                        planned=10,
                        created_at=start + timedelta(hours=i),
                    )
                )
        runs.start(BIG_RUN, policy="reference", suite="core", config={}, git_revision=None, planned=episodes)
        for first in range(0, episodes, CHUNK):
            items = [_record(rng, i) for i in range(first, min(episodes, first + CHUNK))]
            with db.session() as session:
                rows = []
                for record, category in items:
                    data = record.to_json()
                    rows.append(
                        {
                            "run_id": BIG_RUN,
                            "task_id": record.task_id,
                            "repeat": record.repeat,
                            "env": record.env,
                            "category": category,
                            "level": record.level,
                            "kind": record.kind,
                            "status": "infra_error" if record.verdict is None else "scored",
                            "failure_mode": data["failure_mode"],
                            "passed": record.passed,
                            "verdict": data["verdict"],
                            "answer": data["answer"],
                            "infra_error": record.infra_error,
                            "metrics": record.metrics(),
                            "wall_s": record.wall_s,
                            "state_diff": record.state_diff,
                        }
                    )
                session.execute(insert(EpisodeRow), rows)
                ids = dict(
                    ((task, repeat), id_)
                    for id_, task, repeat in session.execute(
                        select(EpisodeRow.id, EpisodeRow.task_id, EpisodeRow.repeat).where(
                            EpisodeRow.run_id == BIG_RUN,
                            EpisodeRow.task_id.in_({r.task_id for r, _ in items}),
                        )
                    )
                )
                steps = [
                    {"episode_id": ids[(r.task_id, r.repeat)], "index": t["index"], "record": t}
                    for r, _ in items
                    for t in r.to_json()["turns"]
                ]
                session.execute(insert(StepRow), steps)
            console.print(f"  stored {min(episodes, first + CHUNK):,} / {episodes:,} episodes")
        runs.finish(BIG_RUN, "finished", {})
    finally:
        db.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "arena.cli.main", "view", "--port", str(port), f"store.url={url}"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"arena view exited with {server.returncode}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/static/view.css", timeout=1)
            return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"arena view did not answer within {START_TIMEOUT_S:.0f} s")


def _pages(episodes: int) -> dict[str, tuple[str, str]]:
    """Page name -> (JSON key, path)."""
    last = -(-episodes // 50)
    return {
        "run page, first page of episodes": ("first_page", f"/runs/{BIG_RUN}"),
        "run page, filtered (env, failure mode)": (
            "filtered_page",
            f"/runs/{BIG_RUN}?failure_mode=wrong_answer&env=banking",
        ),
        f"run page, last page ({last})": ("last_page", f"/runs/{BIG_RUN}?page={last}"),
        "runs list (41 runs)": ("runs_list", "/"),
        "one episode": ("episode", f"/runs/{BIG_RUN}/episodes/1/{quote('task-000123')}"),
    }


def _cpu_ms(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, in ms (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def measure(url: str, episodes: int, requests: int) -> tuple[list[Row], dict[str, Any]]:
    db = Database(url)
    try:
        baseline = time_ms(lambda: RunStore(db).episodes(BIG_RUN), 3)
    finally:
        db.close()
    base_p50 = sorted(baseline)[1]
    port = _free_port()
    server = _serve(url, port)
    rows = [Row.from_samples("baseline: load every episode (RunStore.episodes)", baseline)]
    figures: dict[str, Any] = {"baseline_load_all_ms": round(base_p50, 1)}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for name, (key, path) in _pages(episodes).items():

                def get(path: str = path) -> None:
                    response = client.get(path)
                    response.raise_for_status()

                get()
                get()
                cpu_before = _cpu_ms(server.pid)
                samples = time_ms(get, requests)
                cpu_per_request = (_cpu_ms(server.pid) - cpu_before) / requests
                run_page = name.startswith("run page")
                row = Row.from_samples(
                    name,
                    samples,
                    target=f"< {TARGET_MS:.0f} ms" if key == "first_page" else "",
                    baseline_name="load all episodes" if run_page else "",
                    baseline=base_p50 if run_page else None,
                )
                rows.append(row)
                rows.append(Row(f"  server CPU per request ({key})", cpu_per_request))
                figures[f"{key}_p50_ms"] = round(row.p50 or 0, 1)
                figures[f"{key}_p99_ms"] = round(row.p99 or 0, 1)
                figures[f"{key}_server_cpu_ms"] = round(cpu_per_request, 1)
    finally:
        server.terminate()
        server.wait(10)
    return rows, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--store", help="an empty store URL (default: a SQLite file in a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arena-view-bench-") as tmp:
        url = args.store or f"sqlite:///{Path(tmp) / 'arena.db'}"
        os.environ.setdefault("ARENA_HOME", tmp)
        started = time.perf_counter()
        console.print(f"building a store with a {args.episodes:,}-episode run at {url}")
        build_store(url, args.episodes)
        built_s = time.perf_counter() - started
        rows, figures = measure(url, args.episodes, args.requests)
    print_table(f"arena view: {args.episodes:,}-episode run, {args.requests} requests per page", rows)
    dialect = url.split(":", 1)[0]
    print(
        json.dumps(
            {
                "benchmark": "view",
                "store": dialect,
                "episodes": args.episodes,
                "requests": args.requests,
                "store_build_s": round(built_s, 1),
                **figures,
                "target_ms": TARGET_MS,
                "target_met": figures["first_page_p99_ms"] < TARGET_MS,
                "load_average_1m": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
