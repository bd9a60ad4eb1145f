"""``arena eval`` end to end through the real CLI: a 2x2 sweep with reports, and a run killed with SIGKILL
midway that a re-run finishes without replaying or losing an episode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from sqlalchemy import create_engine, text

from arena.cli.main import main
from arena.store import Database, RunStore

pytestmark = pytest.mark.slow


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def arena_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ARENA_HOME; the Ray an in-process CLI run started is shut down after the test."""
    monkeypatch.setenv("ARENA_HOME", str(tmp_path / "home"))
    started_ray = not ray.is_initialized()
    yield tmp_path / "home"
    if started_ray:
        ray.shutdown()


def test_a_two_by_two_sweep_runs_stores_and_reports(
    arena_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "eval",
            "--multirun",
            "policy=reference,random",
            "suite.levels=[1,1],[2,3]",
            "suite.envs=[library,banking]",
            "tasks_per_env=2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    *runs, sweep = _lines(out)
    assert len(runs) == 4 and sweep["runs"] == [r["run_id"] for r in runs]
    by_policy = {(r["run_id"].split("-")[0], i % 2): r for i, r in enumerate(runs)}
    for (policy, _levels), run in by_policy.items():
        assert run["episodes"] == 4 and run["infra_errors"] == 0
        assert run["success"] == (1.0 if policy == "reference" else 0.0), run
        assert Path(str(run["report"])).is_file()
    assert Path(str(sweep["report"])).is_file()
    assert main(["report", *sweep["runs"][:2], "--out", str(arena_home / "compared")]) == 0
    compared = _lines(capsys.readouterr().out)[-1]
    text = Path(str(compared["report"])).read_text()
    assert compared["episodes"] == 8 and all(f"`{run}`" in text for run in sweep["runs"][:2])
    library = next(line for line in text.splitlines() if line.startswith("| library |"))
    assert library.count("%") == 2 * 3  # one success [CI] cell per compared run
    assert main(["report", "no-such-run"]) == 2
    db = Database(None)
    try:
        stored = RunStore(db)
        assert {r.id for r in stored.list()} == set(sweep["runs"])
        first = stored.episode_records(str(runs[0]["run_id"]))
        assert all(e.turns and e.turns[0].user_message for e in first)
    finally:
        db.close()


def _count(url: str, run_id: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            query = text("SELECT count(*) FROM episodes WHERE run_id = :r")
            return int(connection.execute(query, {"r": run_id}).scalar_one())
    except Exception:
        return 0
    finally:
        engine.dispose()


def test_a_run_killed_midway_resumes_only_the_missing_episodes(arena_home: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    args = [
        sys.executable,
        "-m",
        "arena.cli.main",
        "eval",
        "policy=reference",
        "suite.envs=[library,banking]",
        "suite.levels=[1,2]",
        "tasks_per_env=3",
        "rollout.repeats=2",
        "rollout.concurrency=2",
        "faults.delay=fixed",
        "faults.delay_s=0.15",
        f"store.url={url}",
        "run_id=killed",
    ]
    env = {**os.environ, "ARENA_HOME": str(arena_home)}
    first = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 240
    while _count(url, "killed") < 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    before = _count(url, "killed")
    assert 3 <= before < 12, f"killed after {before} of 12 episodes"
    db = Database(url)
    kept = {(e.task_id, e.repeat): e for e in RunStore(db).episodes("killed")}
    db.close()

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    line = _lines(second.stdout)[-1]
    assert line["planned"] == 12 and line["skipped_as_done"] == before and line["played"] == 12 - before
    assert line["episodes"] == 12 and line["success"] == 1.0 and line["infra_errors"] == 0
    db = Database(url)
    try:
        after = {(e.task_id, e.repeat): e for e in RunStore(db).episodes("killed")}
        assert len(after) == 12 and all(after[key] == kept[key] for key in kept)
        assert RunStore(db).get("killed").status == "finished"
    finally:
        db.close()
