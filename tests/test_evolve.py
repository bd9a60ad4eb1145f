"""``arena evolve`` end to end with the tiny policy and the local trainer in a test-sized configuration:
two rounds through the real CLI, then a run killed with SIGKILL mid-round that resumes without redoing a
finished stage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arena.store import Database, RunStore

pytestmark = pytest.mark.slow

SMALL = [
    "policy=tiny",
    "envs=[library,banking]",
    "train_set.tasks_per_env=4",
    "heldout.tasks_per_env=3",
    "targeted.tasks=4",
    "rollout.max_turns=3",
    "trainer.steps_per_round=1",
    "trainer.tasks_per_step=2",
    "trainer.n_rollouts=2",
    "trainer.epochs=1",
    "trainer.sft_first_turn_epochs=1",
    "policy.max_new_tokens=24",
]


def _evolve(home: Path, *overrides: str, **popen: object) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "arena.cli.main", "evolve", *SMALL, *overrides]
    env = {**os.environ, "ARENA_HOME": str(home)}
    return subprocess.Popen(args, env=env, text=True, **popen)  # type: ignore[call-overload]


def _stages(url: str, run_id: str) -> dict[str, object]:
    db = Database(url)
    try:
        return dict((RunStore(db).get(run_id).summary or {}).get("stages", {}))
    except KeyError:
        return {}
    finally:
        db.close()


def test_two_rounds_end_to_end_and_a_killed_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    home = tmp_path / "home"
    first = _evolve(
        home,
        f"store.url={url}",
        "run_id=small",
        "rounds=2",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while "targeted:1" not in _stages(url, "small") and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    before = _stages(url, "small")
    assert {"sets", "warm_start:0", "eval:0", "targeted:1"} <= set(before) and "eval:2" not in before

    second = _evolve(
        home, f"store.url={url}", "run_id=small", "rounds=2", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = second.communicate(timeout=900)
    assert second.returncode == 0, out[-3000:] + err[-3000:]
    assert "resuming small" in out
    line = json.loads(out.strip().splitlines()[-1])
    after = _stages(url, "small")
    for stage in before:  # finished stages are not redone
        assert after[stage] == before[stage], stage
    assert line["rounds"] == 2 and len(line["heldout_success_per_round"]) == 3
    assert len(line["heldout_ci95_per_round"]) == 3 and line["heldout_tasks"] == 6
    assert line["overlap"] == {"task_ids": 0, "requests": 0}
    # each round's SFT replays every earlier stage's conversations beside its own targeted ones
    warm, round1 = after["warm_start:0"]["examples"], after["train:1"]["sft"]["examples"]
    assert round1 > warm and after["train:2"]["sft"]["examples"] > round1
    report = Path(line["report"])
    assert report.is_file() and (report.parent / "evolve.png").is_file()
    text = report.read_text()
    assert "What targeted synthesis asked for" in text and "Round 2" in text
