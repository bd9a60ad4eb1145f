"""Suites: the task lists an evaluation runs.

``synth`` suites synthesize their tasks offline once, with the suite's own seed (kept apart from training
synthesis), tag them ``suite:<name>:<seed>`` in the store and reuse them on every later run, so resumed and
repeated runs see the same tasks. ``imported`` suites take the released questions of imported environments;
``stored`` suites select tasks already in the store by environment, kind, level and tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from arena.eval.settings import SuiteSettings
from arena.store import ProfileStore, TaskStore
from environments.registry import all_names, builtin_names, load_environment
from task_synth.model import Task

if TYPE_CHECKING:
    from arena.runtime.pool import EnvPool


class SuiteError(ValueError):
    """The suite selects nothing, or names what does not exist (the message is one line)."""


def suite_envs(suite: SuiteSettings, store: TaskStore) -> list[str]:
    """The environments a suite covers (``all`` expands by the suite's source)."""
    if suite.envs != "all":
        names = [suite.envs] if isinstance(suite.envs, str) else list(suite.envs)
        for name in names:
            load_environment(name)
        return names
    if suite.source == "synth":
        return builtin_names()
    if suite.source == "bfcl":
        from environments.bfcl import NAME
        from environments.bfcl.package import BfclMissing, require

        try:
            require()  # fetched on first use, with a message; one line if that fails
        except BfclMissing as exc:
            raise SuiteError(f"suite {suite.name}: {exc}") from None
        return [NAME]
    if suite.source == "imported":
        names = [name for name in all_names() if name.startswith("agentworld/")]
        if not names:
            raise SuiteError(
                "suite agentworld: no imported environments; run `arena env import agentworld DIR` first"
            )
        return names
    return sorted({env for env, _level in store.count_by()})


def _tag(suite: SuiteSettings) -> str:
    return f"suite:{suite.name}:{suite.synth_seed}"


def tags_of(task: Task) -> list[str]:
    return list(task.provenance.get("tags", []))


def _select(tasks: list[Task], per_env: int) -> list[Task]:
    return sorted(tasks, key=lambda t: (t.difficulty, t.id))[:per_env]


async def synthesized_tasks(
    pool: EnvPool,
    env: str,
    n: int,
    levels: list[int],
    seed: int,
    tag: str,
    store: TaskStore,
    profiles: ProfileStore,
    progress: Callable[[int], None] = lambda _k: None,
) -> list[Task]:
    """The tasks of ``env`` tagged ``tag`` in the store; synthesized (``n``, ``levels``, ``seed``), tagged
    and stored first when fewer than ``n`` are there. Reruns and resumed runs get the same tasks."""
    from task_synth.synthesizer import synthesize

    stored = {t.id: t for t in store.list(env=env)}
    known = [t for t in stored.values() if tag in tags_of(t)]
    if len(known) < n:
        result = await synthesize(
            pool,
            env,
            n=n,
            levels=levels,
            seed=seed,
            progress=progress,
            profile_cache=profiles.load_profile,
            save_profile=profiles.save_profile,
        )
        tasks = [t if t.id else t.with_id() for t in result.tasks]
        for task in tasks:  # a task another set already holds keeps that set's tags too
            earlier = tags_of(stored[task.id]) if task.id in stored else []
            task.provenance["tags"] = sorted({*earlier, *tags_of(task), tag})
        store.add(tasks)
        known = [t for t in store.list(env=env) if tag in tags_of(t)]
    return known


def _stored(suite: SuiteSettings, env: str, per_env: int, store: TaskStore) -> list[Task]:
    levels = suite.level_range
    tasks = [
        t
        for t in store.list(env=env, kind=suite.kind)
        if (levels is None or t.difficulty in levels) and (suite.tag is None or suite.tag in tags_of(t))
    ]
    return _select(tasks, per_env)


def _bfcl(suite: SuiteSettings, per_env: int) -> list[Task]:
    """The first ``per_env`` entries of each selected BFCL category, in BFCL's order."""
    from environments.bfcl.data import CATEGORIES, UnknownCategory
    from task_synth.bfcl import bfcl_tasks

    chosen = suite.categories
    names = list(CATEGORIES) if chosen == "all" else [chosen] if isinstance(chosen, str) else list(chosen)
    try:
        return [task for name in names for task in bfcl_tasks([name])[:per_env]]
    except UnknownCategory as exc:
        raise SuiteError(str(exc)) from None


def _imported(env: str, per_env: int) -> list[Task]:
    from task_synth.imported import imported_question_tasks

    version = load_environment(env).info.version
    return _select([t.with_id() for t in imported_question_tasks(env, version)], per_env)


async def suite_tasks(
    pool: EnvPool,
    suite: SuiteSettings,
    envs: list[str],
    per_env: int,
    store: TaskStore,
    profiles: ProfileStore,
    progress: Callable[[int], None] = lambda _k: None,
) -> list[Task]:
    """Up to ``per_env`` tasks of each environment, in a stable order (level, then id)."""
    tasks: list[Task] = []
    for env in envs:
        if suite.source == "synth":
            levels = suite.level_range or [1, 3]
            found = await synthesized_tasks(
                pool, env, per_env, levels, suite.synth_seed, _tag(suite), store, profiles, progress
            )
            tasks += _select(found, per_env)
        elif suite.source == "stored":
            tasks += _stored(suite, env, per_env, store)
        elif suite.source == "bfcl":
            tasks += _bfcl(suite, per_env)
        else:
            tasks += _imported(env, per_env)
    if not tasks:
        raise SuiteError(f"suite {suite.name!r} selects no task (environments: {', '.join(envs) or 'none'})")
    return tasks
