"""Fixed benchmarks played every round beside the held-out set (``benchmarks`` in conf/evolve.yaml): the
same tasks each round, scored by their own checker, never part of any training set. The one so far:
``bfcl_multi_turn``, the first ``bfcl.tasks_per_category`` entries of each BFCL v4 multi-turn category
through the ``bfcl/multi_turn`` environment (docs/bfcl.md)."""

from __future__ import annotations

from typing import Any

from arena.eval.stats import wilson_interval
from arena.evolve.settings import BFCL_MULTI_TURN, EvolveError, EvolveSettings
from arena.store import EpisodeSummary
from task_synth.model import Task


def benchmark_envs(settings: EvolveSettings) -> list[str]:
    """The environments the run's benchmarks play in (the BFCL package fetched on first use)."""
    if BFCL_MULTI_TURN not in settings.benchmarks:
        return []
    from environments.bfcl import NAME
    from environments.bfcl.package import BfclMissing, require

    try:
        require()
    except BfclMissing as exc:
        raise EvolveError(f"benchmarks: {exc}") from None
    return [NAME]


def benchmark_tasks(settings: EvolveSettings, name: str) -> list[Task]:
    """The fixed tasks of benchmark ``name``, in the same order every round."""
    if name != BFCL_MULTI_TURN:
        raise EvolveError(f"unknown benchmark {name!r}")
    from environments.bfcl.data import CATEGORIES
    from task_synth.bfcl import bfcl_tasks

    chosen = settings.bfcl.categories
    names = list(CATEGORIES) if chosen == "all" else [chosen] if isinstance(chosen, str) else chosen
    return [task for category in names for task in bfcl_tasks([category])[: settings.bfcl.tasks_per_category]]


def _rate(episodes: list[EpisodeSummary]) -> dict[str, Any]:
    scored = [e for e in episodes if e.passed is not None]
    passed = sum(bool(e.passed) for e in scored)
    low, high = wilson_interval(passed, len(scored))
    return {"success": passed / len(scored) if scored else 0.0, "ci95": [low, high], "scored": len(scored)}


def benchmark_result(episodes: list[EpisodeSummary], tasks: list[Task]) -> dict[str, Any]:
    """Success with its 95% Wilson interval, overall and per BFCL category (infrastructure failures
    left out)."""
    category = {t.id: str(t.provenance.get("category", "all")) for t in tasks}
    names = sorted(set(category.values()))
    return _rate(episodes) | {
        "by_category": {c: _rate([e for e in episodes if category.get(e.task_id) == c]) for c in names}
    }
