"""The gap-blind control and the environment never trained on: ``targeted.mode=uniform`` asks for the gap
arm's task count and level range whatever the gap report says; ``benchmarks/evolve_control.py`` runs both
arms from one round 0 (tiny policy, real CLI, real pool, real store) and the store shows that the held-out
environment never entered training, that both arms trained on the same number of tokens, and that BFCL was
played every round without entering training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arena.evolve.gaps import analyse
from arena.evolve.paired import arm_difference
from arena.evolve.targeting import allocate, allocate_uniform
from arena.store import Database, EpisodeSummary, RunStore, TaskStore

ROOT = Path(__file__).resolve().parents[1]
ENVS = ["airline", "banking", "library"]


def _episode(env: str, level: int, passed: bool, index: int) -> EpisodeSummary:
    return EpisodeSummary(
        "r0", f"{env}-{level}-{index}", 0, env, "test", level, "single", "ok" if passed else "wrong_answer",
        passed, {}, {}, None,
    )  # fmt: skip


def _report(weak: str) -> object:
    """A gap report in which ``weak`` fails everything and the other environments master levels 1-2."""
    episodes = [_episode(env, level, env != weak, i) for env in ENVS for level in (1, 2) for i in range(4)]
    return analyse(episodes, {})


def test_uniform_asks_for_the_gap_arms_count_and_level_range_whatever_the_report() -> None:
    budget, max_level = 14, 3
    reports = [_report("banking"), _report("library")]
    gap = [allocate(r, ENVS, budget, max_level=max_level) for r in reports]
    assert {b.env: b.n for b in gap[0]} != {b.env: b.n for b in gap[1]}  # the gap arm follows its report
    uniform = allocate_uniform(ENVS, budget, max_level=max_level)
    assert sum(b.n for b in uniform) == budget == sum(b.n for b in gap[0]) == sum(b.n for b in gap[1])
    assert max(b.n for b in uniform) - min(b.n for b in uniform) <= 1 and {b.env for b in uniform} == set(
        ENVS
    )
    gap_levels = {level for batches in gap for b in batches for level in b.levels}
    assert all(b.levels == [1, 2, 3] for b in uniform) and gap_levels <= {1, 2, 3}
    assert all(b.focus_tools == [] and "uniform" in b.reason for b in uniform)


def test_arm_difference_pairs_seeds_and_tasks() -> None:
    gap = [{"a": True, "b": True, "c": False}, {"a": True, "b": False, "c": False}]
    uniform = [{"a": False, "b": True, "c": False}, {"a": False, "b": False, "c": True}]
    diff = arm_difference(gap, uniform)
    # per task: a +1, b 0, c -0.5 -> mean 1/6; discordant pairs: gap only 2 (a twice), uniform only 1
    assert diff.tasks == 3 and abs(diff.difference - 1 / 6) < 1e-9
    assert (diff.a_only, diff.b_only) == (2, 1) and diff.p_value == 1.0
    assert diff.ci95[0] < diff.difference < diff.ci95[1]


SMOKE = [
    "policy=tiny",
    "envs=[library,banking]",
    "heldout_envs=[banking]",
    "train_set.tasks_per_env=4",
    "heldout.tasks_per_env=3",
    "targeted.tasks=4",
    "rollout.max_turns=3",
    "trainer.steps_per_round=1",
    "trainer.tasks_per_step=1",
    "trainer.n_rollouts=2",
    "trainer.epochs=1",
    "trainer.sft_first_turn_epochs=1",
    "policy.max_new_tokens=24",
    "base_eval=false",
    "benchmarks=[bfcl_multi_turn]",
    "bfcl.tasks_per_category=1",
    "bfcl.max_turns=4",
]
KEYS = {
    "rounds",
    "gap_success_per_round",
    "uniform_success_per_round",
    "difference_ci95",
    "p_value",
    "tokens_gap",
    "tokens_uniform",
    "wall_s",
}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The control benchmark, 1 round and 1 seed, test-sized, with BFCL every round: its output folder
    and JSON line."""
    from environments.bfcl import BfclMissing, fetch, is_fetched

    if not is_fetched():
        try:
            fetch()
        except BfclMissing as exc:
            pytest.skip(f"bfcl-eval is not unpacked and PyPI is unreachable: {exc}")
    out = tmp_path_factory.mktemp("control")
    args = [sys.executable, str(ROOT / "benchmarks" / "evolve_control.py"), "--seeds", "1", "--rounds", "1"]
    args += ["--sft-tokens", "30000", "--out", str(out), "--", *SMOKE]
    done = subprocess.run(args, capture_output=True, text=True, env=_env(out), timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, json.loads(done.stdout.strip().splitlines()[-1])


def _env(out: Path) -> dict[str, str]:
    return {**os.environ, "ARENA_HOME": str(out / "home")}


@pytest.mark.slow
def test_control_benchmark_smoke_keeps_the_unseen_env_out_of_training_at_equal_tokens(
    smoke: tuple[Path, dict[str, Any]],
) -> None:
    out, line = smoke
    assert set(line) >= KEYS and line["rounds"] == 1
    assert len(line["gap_success_per_round"]) == 2 == len(line["uniform_success_per_round"])
    assert line["gap_success_per_round"][0] == line["uniform_success_per_round"][0]  # one round 0
    assert len(line["gap_unseen_success_per_round"]) == 2 and (out / "control.md").is_file()
    tokens_gap, tokens_uniform = line["tokens_gap"][0], line["tokens_uniform"][0]
    assert tokens_gap > 30000 and abs(tokens_gap - tokens_uniform) <= 0.05 * tokens_gap

    db = Database(f"sqlite:///{out / 'control.db'}")
    try:
        runs, tasks = RunStore(db), TaskStore(db)
        names = {"r0": "control-r0", "gap": "control-gap-s0", "uniform": "control-uniform-s0"}
        stages = {arm: (runs.get(run_id).summary or {})["stages"] for arm, run_id in names.items()}
        assert stages["gap"]["sets"] == stages["r0"]["sets"] == stages["uniform"]["sets"]
        assert stages["gap"]["eval:0"] == stages["r0"]["eval:0"]  # round 0 reused, not replayed
        assert stages["r0"]["sets"]["unseen_envs"] == ["banking"]
        heldout = [tasks.get(t).env for t in stages["r0"]["sets"]["heldout"]]
        assert heldout.count("banking") == 3 and heldout.count("library") == 3
        trained = stages["r0"]["sets"]["train"] + [
            t for arm in ("gap", "uniform") for t in stages[arm]["targeted:1"]["tasks"]
        ]
        assert trained and {tasks.get(t).env for t in trained} == {"library"}
        references = ["control-r0-reference-train", "control-gap-s0-reference-r1"]
        references.append("control-uniform-s0-reference-r1")
        for run_id in references:  # the episodes the SFT examples are taken from
            played = runs.episodes(run_id)
            assert played and {e.env for e in played} == {"library"}, run_id
        uniform = stages["uniform"]["targeted:1"]
        assert uniform["mode"] == "uniform" and uniform["gap_batches"]  # the report it ignored, kept
        assert sum(b["n"] for b in uniform["batches"]) == sum(
            b["n"] for b in stages["gap"]["targeted:1"]["batches"]
        )
        for arm in ("gap", "uniform"):
            assert "unseen" in stages[arm]["eval:1"] and stages[arm]["eval:1"]["unseen"]["scored"] == 3
    finally:
        db.close()


@pytest.mark.slow
def test_bfcl_is_played_every_round_and_never_trained_on(smoke: tuple[Path, dict[str, Any]]) -> None:
    out, _ = smoke
    db = Database(f"sqlite:///{out / 'control.db'}")
    try:
        runs, tasks = RunStore(db), TaskStore(db)
        stages = (runs.get("control-gap-s0").summary or {})["stages"]
        round0, round1 = stages["bfcl_multi_turn:0"], stages["bfcl_multi_turn:1"]
        assert round0["run_id"] == "control-r0-r0-bfcl_multi_turn"  # round 0's, reused
        for played in (round0, round1):
            assert set(played["by_category"]) == {"base", "long_context", "miss_func", "miss_param"}
            assert played["scored"] == 4 and 0.0 <= played["ci95"][0] <= played["ci95"][1] <= 1.0
        episodes = runs.episodes(round1["run_id"])
        assert len(episodes) == 4 and {e.env for e in episodes} == {"bfcl/multi_turn"}
        trained = stages["sets"]["train"] + stages["targeted:1"]["tasks"]
        assert "bfcl/multi_turn" not in {tasks.get(t).env for t in trained}
        report = (out / "runs" / "control-gap-s0" / "report" / "report.md").read_text()
        assert "## bfcl_multi_turn" in report
    finally:
        db.close()
