"""``arena synth [overrides]``: synthesize verified tasks for environments and store them.

Example: ``arena synth env=airline n=200 difficulty=[1,5]`` (keys in ``conf/synth.yaml``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from arena.cli.synth_config import ConfigError, FilterSettings, SynthSettings, load_settings
from arena.store import Database, ProfileStore, StoreError, TaskStore, write_jsonl
from environments.registry import UnknownEnvironment, builtin_names, canonical_ref, load_environment
from environments.sdk.environment import EnvironmentSpecError
from task_synth.model import Task

if TYPE_CHECKING:
    from arena.policies.openai_compat import OpenAIPolicy
    from arena.runtime.pool import EnvPool
    from task_synth.synthesizer import SynthResult

console = Console()
err_console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> int:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True, markup=True)
    return code


def resolve_envs(settings: SynthSettings) -> list[str]:
    """``all`` -> every built-in environment; otherwise the given names or paths, each checked to load
    (paths made absolute: pool workers do not share the caller's working directory)."""
    names = settings.env if isinstance(settings.env, list) else [settings.env]
    if names == ["all"]:
        return builtin_names()
    refs = [canonical_ref(str(name)) for name in names]
    for ref in refs:
        load_environment(ref)
    return list(dict.fromkeys(refs))


async def filter_solvable(
    pool: EnvPool,
    result: SynthResult,
    settings: FilterSettings,
    policy: OpenAIPolicy,
    advance: Callable[[], None] = lambda: None,
) -> None:
    """Keep the tasks ``policy`` solves in at least k of n tries, with their measured solve rate; drop the
    rest, counted in ``result.dropped`` (a task whose tries the infrastructure kept failing is dropped as
    undetermined, never as unsolved). ``advance`` is called once per task judged."""
    from arena.rollout.episode import EpisodeConfig
    from arena.rollout.solvability import solved_k_of_n

    k, n = settings.k, settings.n
    tasks_at_once = asyncio.Semaphore(max(1, settings.concurrency // n))

    async def judge(task: Task) -> bool:
        async with tasks_at_once:
            limits = EpisodeConfig(max_turns=policy.config.max_turns)
            outcome = await solved_k_of_n(pool, task, policy, k, n, min(n, settings.concurrency), limits)
        advance()
        if outcome.solved is None:
            result.dropped["solvability undetermined (infrastructure failures)"] += 1
        elif not outcome.solved:
            result.dropped[f"solved in fewer than {k} of {n} tries"] += 1
        else:
            task.measured["policy_solve_rate"] = outcome.solve_rate or 0.0
            task.provenance["policy_filter"] = {"model": policy.config.model, "k": k, "n": n}
        return bool(outcome.solved)

    verdicts = await asyncio.gather(*(judge(task) for task in result.tasks))
    result.tasks = [task for task, keep in zip(result.tasks, verdicts, strict=True) if keep]


async def _synthesize_all(
    settings: SynthSettings, envs: list[str], tasks: TaskStore, profiles: ProfileStore
) -> tuple[list[SynthResult], int]:
    from arena.policies.openai_compat import OpenAIPolicy
    from arena.runtime.pool import EnvPool, PoolConfig
    from task_synth.imported import imported_question_tasks
    from task_synth.synthesizer import synthesize

    llm = settings.llm_config()
    policy_config = settings.filter.policy_config()
    policy = None if policy_config is None else OpenAIPolicy(policy_config)
    config = PoolConfig(
        envs={name: settings.pool.workers_per_env for name in envs},
        warm_sessions_per_worker=settings.pool.warm_sessions_per_worker,
    )
    results, added = [], 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    pool = EnvPool(config)
    with console.status(f"starting {len(envs)} environment(s)…"):
        await pool.start()
    try:
        with Progress(*columns, console=console) as progress:
            for name in envs:
                bar = progress.add_task(name, total=settings.n)
                result = await synthesize(
                    pool,
                    name,
                    n=settings.n,
                    levels=settings.levels,
                    seed=settings.seed,
                    llm=llm,
                    progress=lambda k, bar=bar: progress.advance(bar, k),
                    profile_cache=profiles.load_profile,
                    save_profile=profiles.save_profile,
                )
                if name.startswith("agentworld/"):
                    result.tasks += imported_question_tasks(
                        name, result.profile.version if result.profile else ""
                    )
                if policy is not None:
                    judged = progress.add_task(f"{name}: solved by policy?", total=len(result.tasks))
                    await filter_solvable(
                        pool, result, settings.filter, policy, lambda b=judged: progress.advance(b)
                    )
                added += tasks.add(result.tasks)
                results.append(result)
    finally:
        if policy is not None:
            await policy.aclose()
        await pool.shutdown()
    return results, added


def _solve_rate(tasks: list[Task]) -> str:
    rates = [t.measured["policy_solve_rate"] for t in tasks if "policy_solve_rate" in t.measured]
    return f"{sum(rates) / len(rates):.2f}" if rates else ""


def summary_table(results: list[SynthResult], *, solve_rates: bool = False) -> Table:
    """Per environment and level: kept, mean chain length, mean distinct tools and (``solve_rates``: the
    solvability filter ran) the mean policy solve rate of kept tasks; per environment, the share of kept
    tasks with an answer key a reader cannot tie to one call (``task_synth.clarity``) and the drops."""
    table = Table(title="synthesized tasks")
    columns = ["env", "level", "kept", "mean chain length", "mean distinct tools"]
    tail = ["ambiguous share", "dropped"]
    for column in [*columns, *(["policy solve rate"] if solve_rates else []), *tail]:
        table.add_column(column, justify="left" if column in ("env", "dropped") else "right")

    def rate(tasks: list[Task]) -> list[str]:
        return [_solve_rate(tasks)] if solve_rates else []

    for result in results:
        for level, stats in sorted(result.per_level().items()):
            table.add_row(
                result.env,
                str(level),
                f"{stats['kept']:.0f}",
                f"{stats['mean_chain_length']:.1f}",
                f"{stats['mean_distinct_tools']:.1f}",
                *rate([t for t in result.tasks if t.difficulty == level]),
                "",
                "",
            )
        reasons = ", ".join(f"{reason} {count}" for reason, count in result.dropped.most_common())
        dropped = sum(result.dropped.values())
        table.add_row(
            result.env,
            "all",
            str(len(result.tasks)),
            "",
            "",
            *rate(result.tasks),
            f"{result.ambiguous_share:.0%}",
            f"{dropped} of {result.attempts} attempts" + (f" ({reasons})" if reasons else ""),
            end_section=True,
        )
    return table


def cmd_synth(args: argparse.Namespace) -> int:
    from openai import OpenAIError

    from arena.policies.base import PolicyRefused
    from arena.runtime.errors import InfrastructureError

    try:
        settings = load_settings(args.overrides)
        settings.llm_config()
        settings.filter.policy_config()
        envs = resolve_envs(settings)
        db = Database(settings.store.url)
    except (ConfigError, UnknownEnvironment, EnvironmentSpecError, StoreError) as exc:
        return _fail(str(exc))
    tasks = TaskStore(db)
    try:
        results, added = asyncio.run(_synthesize_all(settings, envs, tasks, ProfileStore(db)))
        total = sum(tasks.count_by().values())
    except InfrastructureError as exc:
        return _fail(f"environment runtime failed (tasks of finished environments are stored): {exc}", 1)
    except (OpenAIError, PolicyRefused) as exc:
        return _fail(
            f"the policy endpoint refused a request (tasks of finished environments are stored): {exc}", 1
        )
    finally:
        db.close()
    console.print(summary_table(results, solve_rates=settings.filter.policy_config() is not None))
    kept = [task for result in results for task in result.tasks]
    if settings.output.jsonl:
        path = Path(settings.output.jsonl).expanduser()
        console.print(f"wrote {write_jsonl(path, kept)} tasks to {path}", highlight=False)
    console.print(
        f"stored {len(kept)} tasks ({added} new) in {db.display_url}; it now holds {total} tasks",
        highlight=False,
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``synth`` command."""
    parser = subparsers.add_parser(
        "synth",
        help="synthesize verified tasks (Hydra overrides: env=airline n=200 difficulty=[1,5])",
        description="Synthesize tasks into the store. Keys and defaults: conf/synth.yaml.",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    parser.set_defaults(func=cmd_synth)
