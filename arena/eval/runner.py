"""One evaluation run: a policy plays a suite's tasks (x repeats) in fresh environment sessions; every
episode is stored as it finishes, then the report is written.

A run's id derives from its configuration, so running the same configuration again resumes it: scored
episodes are skipped and only infrastructure failures and missing episodes are played.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from arena.eval.progress import EpisodeProgress, stage
from arena.eval.report import headline, infra_reasons, write_report
from arena.eval.settings import EvalSettings, PoolSettings
from arena.eval.suites import suite_envs, suite_tasks
from arena.policies.base import Policy, PolicyRefused
from arena.policies.factory import build_policy
from arena.rollout.episode import EpisodeConfig, SessionProvider, episodes
from arena.rollout.records import EpisodeRecord
from arena.store import Database, ProfileStore, RunStore, TaskStore
from environments.paths import arena_home
from task_synth.model import Task

if TYPE_CHECKING:
    from arena.runtime.pool import EnvPool

REPO_DIR = Path(__file__).resolve().parents[2]


def git_revision() -> str | None:
    """The checkout's commit, when the arena runs from a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def report_dir(settings: EvalSettings, run_id: str) -> Path:
    return (
        Path(settings.report.dir).expanduser() if settings.report.dir else arena_home() / "reports" / run_id
    )


@dataclass
class RunOutcome:
    """What the CLI prints as the run's last line, and the infra errors it sums up."""

    run_id: str
    planned: int
    played: int
    skipped: int
    headline: dict[str, Any]
    report: Path
    infra_reasons: list[tuple[str, int]]

    def line(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            **self.headline,
            "infra_reasons": dict(self.infra_reasons),
            "planned": self.planned,
            "played": self.played,
            "skipped_as_done": self.skipped,
            "report": str(self.report),
        }

    @property
    def infra_share(self) -> float:
        """The share of the run's episodes that are infrastructure errors (never scored)."""
        return self.headline["infra_errors"] / max(1, self.headline["episodes"])


class _Tally:
    """Running success and speed for the progress bar and the tracker."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = self.scored = self.passed = self.infra = 0

    def add(self, record: EpisodeRecord) -> None:
        self.done += 1
        if record.passed is None:
            self.infra += 1
        else:
            self.scored += 1
            self.passed += int(record.passed)

    def fields(self) -> dict[str, Any]:
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        success = self.passed / self.scored if self.scored else 0.0
        return {"success": success, "infra": self.infra, "eps": rate}


@dataclass(frozen=True)
class Play:
    """One run to play: (task, repeat) items, the policy and the episode limits."""

    run_id: str
    items: list[tuple[Task, int]]
    policy: Policy
    config: EpisodeConfig
    concurrency: int


async def play(
    sessions: SessionProvider,
    runs: RunStore,
    spec: Play,
    categories: dict[str, str],
    console: Console,
    on_episode: Callable[[int, dict[str, Any]], None] = lambda _n, _f: None,
) -> int:
    """Play the run's items not yet scored in the store, storing each episode as it finishes (with a
    progress bar); returns how many were played. The run row must exist (``RunStore.start``)."""
    done = runs.scored_keys(spec.run_id)
    todo = [(task, r) for task, r in spec.items if (task.id, r) not in done]
    tally = _Tally()
    # A benchmark's own category (BFCL's) names a task's group in reports; else its environment's.
    task_categories = {
        task.id: str(task.provenance["category"]) for task, _r in todo if "category" in task.provenance
    }
    try:
        finishing = episodes(sessions, todo, spec.policy, spec.config, spec.concurrency)
        async with aclosing(finishing):
            with EpisodeProgress(console, spec.run_id, len(todo)) as progress:
                async for record in finishing:
                    category = task_categories.get(record.task_id) or categories.get(record.env, "")
                    runs.record(spec.run_id, record, category)
                    tally.add(record)
                    progress.update(tally.done, tally.fields())
                    on_episode(tally.done, tally.fields())
    except PolicyRefused as exc:
        runs.finish(spec.run_id, "failed", {"error": str(exc)})
        raise
    return len(todo)


async def categories_of(pool: EnvPool, envs: list[str]) -> dict[str, str]:
    """Each environment's category (what reports group by), as its running server describes it (the
    driver does not import the environments itself)."""
    infos = await asyncio.gather(*(pool.info(env) for env in envs))
    return {env: str(info["category"]) for env, info in zip(envs, infos, strict=True)}


async def start_pool(envs: list[str], settings: PoolSettings, console: Console) -> EnvPool:
    """A started pool with ``settings.workers_per_env`` workers for each of ``envs``."""
    from arena.runtime.pool import EnvPool, PoolConfig

    pool = EnvPool(
        PoolConfig(
            envs={env: settings.workers_per_env for env in envs},
            warm_sessions_per_worker=settings.warm_sessions_per_worker,
        )
    )
    with stage(console, f"starting {len(envs)} environment(s)…"):
        await pool.start()
    return pool


async def run_eval(settings: EvalSettings, console: Console) -> RunOutcome:
    """Play (or resume) the run ``settings`` describes, store every episode, write the report."""
    from arena.eval.tracker import open_tracker

    db = Database(settings.store.url)
    task_store, runs = TaskStore(db), RunStore(db)
    envs = suite_envs(settings.suite, task_store)
    pool = await start_pool(envs, settings.pool, console)
    try:
        categories = await categories_of(pool, envs)
        with stage(console, f"preparing suite {settings.suite.name}…"):
            tasks = await suite_tasks(
                pool, settings.suite, envs, settings.tasks_per_env, task_store, ProfileStore(db)
            )
        run_id = settings.resolved_run_id()
        items = [(task, r) for task in tasks for r in range(settings.rollout.repeats)]
        runs.start(
            run_id,
            policy=settings.policy.kind,
            suite=settings.suite.name,
            config=settings.model_dump(mode="json"),
            git_revision=git_revision(),
            planned=len(items),
        )
        out_dir = report_dir(settings, run_id)
        tracker = open_tracker(settings.tracker, run_id, settings.model_dump(mode="json"), out_dir)
        policy = build_policy(settings.policy, settings.seed)
        spec = Play(run_id, items, policy, settings.episode_config(), settings.rollout.concurrency)
        try:
            try:
                played = await play(pool, runs, spec, categories, console, tracker.log_episode)
            finally:
                await policy.aclose()
            episodes_done = runs.episodes(run_id)
            runs.finish(run_id, "finished", headline(episodes_done))
            report = write_report(runs, [run_id], out_dir)
            tracker.log_report(report)
        finally:
            tracker.finish()
    finally:
        await pool.shutdown()
        db.close()
    reasons = infra_reasons(episodes_done)
    return RunOutcome(
        run_id, len(items), played, len(items) - played, report.headline, report.markdown, reasons
    )
