"""Gap analysis on recorded episodes ranks a deliberately weakened environment first, and targeted
synthesis then puts more tasks there (real pool, real synthesis, real store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arena.eval.suites import synthesized_tasks
from arena.evolve.gaps import analyse
from arena.evolve.targeting import allocate
from arena.policies.base import PolicyTurn, TokenTrajectory
from arena.policies.scripted import ReferencePolicy
from arena.rollout.episode import run_episode
from arena.store import Database, ProfileStore, RunStore, TaskStore
from task_synth.model import Task
from tests.conftest import local_pool

ENVS = ["library", "banking", "calendar"]
WEAK = "banking"


class _GiveUp:
    async def act(self, messages: list[dict[str, Any]]) -> PolicyTurn:
        return PolicyTurn(content="{}")

    def trajectory(self) -> TokenTrajectory | None:
        return None


class WeakInOneEnvironment:
    """The reference policy everywhere but in ``WEAK``, where it answers at once with nothing."""

    name = "weak-in-banking"

    def __init__(self) -> None:
        self._reference = ReferencePolicy()

    def start(self, task: Task, tools: list[dict[str, Any]]) -> Any:
        return _GiveUp() if task.env == WEAK else self._reference.start(task, tools)

    async def aclose(self) -> None:
        return None


@pytest.mark.asyncio
async def test_a_weakened_environment_ranks_first_and_gets_more_targeted_tasks(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'gaps.db'}")
    store, profiles, runs = TaskStore(db), ProfileStore(db), RunStore(db)
    async with local_pool({env: 1 for env in ENVS}, warm_sessions_per_worker=4) as pool:
        tasks: list[Task] = []
        for env in ENVS:
            tasks += (await synthesized_tasks(pool, env, 4, [1, 2], 3, "heldout", store, profiles))[:4]
        runs.start("r0", policy="weak", suite="heldout", config={}, git_revision=None, planned=len(tasks))
        policy = WeakInOneEnvironment()
        for task in tasks:
            runs.record("r0", await run_episode(pool, task, policy), category="test")
        report = analyse(runs.episodes("r0"), {t.id: t for t in tasks})
        assert report.weak_spots and report.weak_spots[0].env == WEAK
        assert report.weak_spots[0].failure_mode == "premature_answer"
        assert report.rate("env", WEAK).success == 0.0 and report.rate("env", "library").success == 1.0
        assert WEAK in report.guidelines and "premature_answer" in report.guidelines[WEAK]
        batches = allocate(report, ENVS, budget=12, max_level=3)
        share = {b.env: b.n for b in batches}
        assert sum(share.values()) == 12 and share[WEAK] > max(n for env, n in share.items() if env != WEAK)
        weak_batch = next(b for b in batches if b.env == WEAK)
        # by default its frontier (level 1, as nothing passes there) and the level above, not 3, each
        # until mastered; a mastered environment climbs to the level no held-out task tried
        assert weak_batch.levels == [1, 2] and WEAK in weak_batch.reason
        assert "up to 1 above" in weak_batch.reason
        assert all(b.levels == [3] for b in batches if b.env == "library")
        frontier_only = allocate(report, ENVS, budget=12, max_level=3, reach=0)
        assert [b.levels for b in frontier_only if b.env == WEAK] == [[1]]
        made = await synthesized_tasks(
            pool, WEAK, weak_batch.n, weak_batch.levels, 99, "round1", store, profiles
        )
        assert len(made) >= weak_batch.n
    db.close()
