"""``arena evolve``: the self-evolving loop, as stages recorded in the store.

Round 0 synthesizes a training set and a held-out set (disjoint seeds; task ids and request texts that
overlap are removed from training and the overlap is checked 0), warm-starts the policy by SFT on the
reference policy's recorded episodes of the training set, and evaluates on the held-out set. Each later
round: gap analysis of the last evaluation -> targeted synthesis -> training -> evaluation on the same
held-out set. Every finished stage is written to the evolve run's row; a killed run resumes at the first
unfinished stage (evaluations resume per episode, training per step from its checkpoints).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from arena.eval.runner import Play, categories_of, git_revision, play, start_pool
from arena.eval.stats import wilson_interval
from arena.eval.suites import synthesized_tasks
from arena.eval.tracker import NoTracker, Tracker, open_tracker
from arena.evolve.benchmarks import benchmark_envs, benchmark_result, benchmark_tasks
from arena.evolve.gaps import analyse
from arena.evolve.paired import paired
from arena.evolve.settings import BFCL_MULTI_TURN, EvolveError, EvolveSettings
from arena.evolve.targeting import allocate, allocate_uniform, slips_for, spread_over_levels
from arena.evolve.trainer import Conversation, RoundTrainer, make_trainer
from arena.policies.scripted import ReferencePolicy
from arena.policies.slips import Slip
from arena.rollout.conversation import answer_visible, messages_of
from arena.rollout.episode import EpisodeConfig, tool_specs
from arena.store import Database, ProfileStore, RunStore, TaskStore
from environments.paths import arena_home
from environments.registry import builtin_names, load_environment
from task_synth.model import Task

REFERENCE_MAX_TURNS = 64
UNIFORM_SEED_OFFSET = 50_021
"""Added to the uniform control's synthesis seeds, so its tasks are its own draw, not the gap arm's."""
ROUND0_STAGES = ("sets", "eval:base", "warm_start:0", "eval:0")
"""What a run started ``from_round0`` of another reuses (with that run's round-0 checkpoint)."""
SAME_ROUND0 = ("policy", "envs", "heldout_envs", "train_set", "heldout", "rollout")
"""The settings a run must share with the run whose round 0 it reuses."""
TINY = "tiny"
"""``policy.path`` naming the tiny preset, built by the run itself (docs/training.md)."""


@dataclass
class Context:
    """What every stage works with."""

    settings: EvolveSettings
    run_id: str
    console: Console
    store: TaskStore
    runs: RunStore
    profiles: ProfileStore
    pool: Any
    envs: list[str]
    categories: dict[str, str]
    home: Path
    stages: dict[str, Any] = field(default_factory=dict)
    unseen: list[str] = field(default_factory=list)
    round0_home: Path | None = None
    trainer: RoundTrainer | None = None
    base_model: str | None = None
    tracker: Tracker = field(default_factory=NoTracker)

    def done(self, stage: str, result: Any) -> Any:
        """Record a finished stage (and everything before it) in the evolve run's row; track its numbers."""
        self.stages[stage] = result
        self.runs.progress(self.run_id, {"stages": self.stages})
        name, _, round_ = stage.partition(":")
        numbers = {f"{name}/{k}": v for k, v in result.items() if isinstance(v, int | float)}
        if numbers:  # the base model's evaluation is logged as round -1
            self.tracker.log_metrics(numbers | {"round": int(round_) if round_.isdigit() else -1})
        return result

    def tasks(self, ids: list[str]) -> list[Task]:
        return [self.store.get(task_id) for task_id in ids]

    @property
    def seen(self) -> list[str]:
        """The environments the policy trains on (all but the unseen ones)."""
        return [env for env in self.envs if env not in self.unseen]


def _envs(settings: EvolveSettings) -> tuple[list[str], list[str]]:
    """Every environment of the run (the pool's), and those of them never trained on."""
    trained, unseen = settings.environments(builtin_names())
    for name in trained + unseen:
        load_environment(name)
    return trained + unseen, unseen


async def _task_set(
    ctx: Context, name: str, per_env: int, levels: list[int], seed: int, envs: list[str]
) -> list[Task]:
    tag = f"{ctx.run_id}:{name}"
    tasks: list[Task] = []
    for env in envs:
        found = await synthesized_tasks(ctx.pool, env, per_env, levels, seed, tag, ctx.store, ctx.profiles)
        tasks += sorted(found, key=lambda t: (t.difficulty, t.id))[:per_env]
    return tasks


async def stage_sets(ctx: Context) -> dict[str, Any]:
    """The training set (seen environments only) and the held-out set (every environment), disjoint by
    task id and by request text (checked, printed)."""
    s = ctx.settings
    heldout = await _task_set(
        ctx, "heldout", s.heldout.tasks_per_env, s.heldout.level_range, s.heldout.seed, ctx.envs
    )
    train = await _task_set(
        ctx, "train", s.train_set.tasks_per_env, s.train_set.level_range, s.train_set.seed, ctx.seen
    )
    held_ids, held_requests = {t.id for t in heldout}, {t.request for t in heldout}
    train = [t for t in train if t.id not in held_ids and t.request not in held_requests]
    overlap = {
        "task_ids": len(held_ids & {t.id for t in train}),
        "requests": len(held_requests & {t.request for t in train}),
    }
    ctx.console.print(
        f"[bold]sets[/bold]: {len(train)} training tasks, {len(heldout)} held-out tasks; "
        f"overlap of task ids {overlap['task_ids']}, of request texts {overlap['requests']}"
        + (f"; never trained on: {', '.join(ctx.unseen)}" if ctx.unseen else "")
    )
    return {
        "train": [t.id for t in train],
        "heldout": [t.id for t in heldout],
        "overlap": overlap,
        "unseen_envs": ctx.unseen,
    }


async def _tools(ctx: Context, envs: set[str]) -> dict[str, list[dict[str, Any]]]:
    tools = {}
    for env in sorted(envs):
        async with ctx.pool.session(env) as session:
            tools[env] = tool_specs(await session.list_tools())
    return tools


async def reference_conversations(
    ctx: Context, tasks: list[Task], run_id: str, slips: dict[str, Slip] | None = None
) -> list[Conversation]:
    """The reference policy plays ``tasks`` (recorded as run ``run_id``; those in ``slips`` first make a
    wrong call and recover); its passed episodes become SFT conversations, rendered exactly as a policy
    sees them."""
    limits = EpisodeConfig(max_turns=REFERENCE_MAX_TURNS)  # a reference chain is never cut short
    spec = Play(run_id, [(t, 0) for t in tasks], ReferencePolicy(slips), limits, 16)
    ctx.runs.start(
        run_id, policy="reference", suite="train", config={}, git_revision=git_revision(), planned=len(tasks)
    )
    await play(ctx.pool, ctx.runs, spec, ctx.categories, ctx.console)
    ctx.runs.finish(run_id, "finished", {})
    return await recorded_conversations(ctx, [run_id])


async def recorded_conversations(ctx: Context, run_ids: list[str]) -> list[Conversation]:
    """The passed episodes of the reference runs ``run_ids``, as SFT conversations; with the policy's
    ``tool_result_chars`` set, those whose answer lies past that cut of tool results are left out."""
    records = [r for run_id in run_ids for r in ctx.runs.episode_records(run_id, passed=True)]
    tools = await _tools(ctx, {r.env for r in records})
    system = ctx.settings.episode_config().system_prompt
    conversations = [(messages_of(record, system), tools[record.env]) for record in records]
    cut = getattr(ctx.settings.policy, "tool_result_chars", None)
    if cut is None:
        return conversations
    kept = [(messages, tools) for messages, tools in conversations if answer_visible(messages, cut)]
    if len(kept) < len(conversations):
        ctx.console.print(
            f"  {len(conversations) - len(kept)} of {len(conversations)} reference conversations left out "
            f"of SFT: their answer lies past the {cut}-character cut of tool results"
        )
    return kept


def _reference_run(ctx: Context, round_: int) -> str:
    """The run id under which the reference policy played round ``round_``'s training tasks."""
    if round_ == 0:  # a run that reuses another's round 0 (``from_round0``) reuses its warm start too
        return f"{ctx.stages.get('round0_from') or ctx.run_id}-reference-train"
    return f"{ctx.run_id}-reference-r{round_}"


def _checkpoint(ctx: Context, round_: int) -> Path:
    home = ctx.round0_home if round_ == 0 and ctx.round0_home is not None else ctx.home
    return home / "checkpoints" / f"round{round_}"


def _trainer(ctx: Context) -> RoundTrainer:
    if ctx.trainer is None:
        latest = max(
            (int(k.split(":")[1]) for k in ctx.stages if k.startswith("train:") or k == "warm_start:0"),
            default=None,
        )
        checkpoint = None if latest is None else _checkpoint(ctx, latest)
        s = ctx.settings
        policy = s.policy.model_dump(mode="json") | ({"path": ctx.base_model} if ctx.base_model else {})
        ctx.trainer = make_trainer(s.trainer.model_dump(mode="json"), policy, checkpoint)
    return ctx.trainer


async def _play_greedy(
    ctx: Context, run_id: str, round_: int | str, suite: str, tasks: list[Task], limits: EpisodeConfig
) -> list[Any]:
    """The current policy, greedy, plays ``tasks`` once each as run ``run_id``; its episodes."""
    ctx.runs.start(
        run_id,
        kind="eval",
        policy=f"{ctx.settings.policy.kind}@round{round_}",
        suite=suite,
        config={"evolve": ctx.run_id, "round": round_},
        git_revision=git_revision(),
        planned=len(tasks),
    )
    policy = _trainer(ctx).policy(greedy=True)
    spec = Play(run_id, [(t, 0) for t in tasks], policy, limits, ctx.settings.rollout.concurrency)
    try:
        await play(ctx.pool, ctx.runs, spec, ctx.categories, ctx.console)
    finally:
        await policy.aclose()
    return ctx.runs.episodes(run_id)


async def stage_eval(ctx: Context, round_: int | str, heldout: list[Task]) -> dict[str, Any]:
    """The current policy, greedy, on the held-out set (``round_`` ``base``: the model before training)."""
    run_id = f"{ctx.run_id}-r{round_}"
    episodes = await _play_greedy(ctx, run_id, round_, "heldout", heldout, ctx.settings.episode_config())
    seen = _success([e for e in episodes if e.env not in ctx.unseen])
    ctx.runs.finish(run_id, "finished", seen)
    low, high = seen["ci95"]
    ctx.console.print(
        f"[bold]round {round_}[/bold]: held-out success {seen['success']:.1%} (95% CI {low:.1%}-{high:.1%})"
    )
    result = {"run_id": run_id, **seen}
    if ctx.unseen:
        unseen = _success([e for e in episodes if e.env in ctx.unseen])
        ctx.console.print(f"  never-trained environments ({', '.join(ctx.unseen)}): {unseen['success']:.1%}")
        result["unseen"] = unseen
    return result


async def stage_benchmark(ctx: Context, round_: int, name: str, tasks: list[Task]) -> dict[str, Any]:
    """The current policy, greedy, on benchmark ``name``'s fixed tasks (run ``<run>-rR-<name>``)."""
    run_id = f"{ctx.run_id}-r{round_}-{name}"
    limits = EpisodeConfig(max_turns=ctx.settings.bfcl.max_turns, max_tokens=ctx.settings.rollout.max_tokens)
    started = time.monotonic()
    result = benchmark_result(await _play_greedy(ctx, run_id, round_, name, tasks, limits), tasks)
    ctx.runs.finish(run_id, "finished", result)
    low, high = result["ci95"]
    ctx.console.print(
        f"[bold]round {round_}[/bold]: {name} {result['success']:.1%} (95% CI {low:.1%}-{high:.1%}, "
        f"{result['scored']} tasks, {time.monotonic() - started:.0f} s)"
    )
    return {"run_id": run_id, **result, "wall_s": round(time.monotonic() - started, 1)}


def _success(episodes: list[Any]) -> dict[str, Any]:
    """Success of the scored ``episodes`` (infrastructure failures left out), its 95% Wilson interval."""
    scored = [e for e in episodes if e.passed is not None]
    passed = sum(bool(e.passed) for e in scored)
    low, high = wilson_interval(passed, len(scored))
    return {"success": passed / len(scored) if scored else 0.0, "ci95": [low, high], "scored": len(scored)}


def _base_model(ctx: Context, examples: list[Conversation]) -> str:
    """The model the run starts from: the policy's path, or for the ``tiny`` preset, a tiny model built
    here with its tokenizer trained on the training set's conversations and tools (never the held-out)."""
    path = getattr(ctx.settings.policy, "path", None)
    if path != TINY:
        from arena.models.fetch import resolve

        return resolve(str(path))
    from arena.policies.tiny import build_tiny, conversation_corpus, tool_corpus

    target = ctx.home / "tiny"
    if not (target / "config.json").is_file():
        system = ctx.settings.episode_config().system_prompt
        corpus = [system, *(text for _, tools in examples for text in tool_corpus(tools))]
        corpus += conversation_corpus(messages for messages, _ in examples)
        build_tiny(target, corpus, seed=ctx.settings.seed)
    return str(target)


async def stage_warm_start(ctx: Context, examples: list[Conversation]) -> dict[str, Any]:
    ctx.console.print(f"[bold]warm start[/bold]: SFT on {len(examples)} reference conversations")
    trainer = _trainer(ctx)
    with ctx.console.status("SFT warm start…"):
        metrics = trainer.warm_start(examples)
    trainer.save(_checkpoint(ctx, 0))
    ctx.console.print(f"  SFT: {', '.join(f'{k}={v:.3g}' for k, v in metrics.items())}")
    return {"examples": len(examples), **metrics}


async def stage_targeted(
    ctx: Context, round_: int, previous_eval: str, heldout: list[Task]
) -> dict[str, Any]:
    """Gap analysis of the last evaluation (seen environments only) and this round's synthesis: where the
    gaps are (``targeted.mode`` ``gap``), or evenly everywhere (``uniform``: the report is still kept)."""
    held = {t.id for t in heldout} | {t.request for t in heldout}
    tasks = {t.id: t for t in heldout}
    episodes = [e for e in ctx.runs.episodes(previous_eval) if e.env not in ctx.unseen]
    report = analyse(episodes, tasks)
    s = ctx.settings
    gap_batches = allocate(
        report,
        ctx.seen,
        s.targeted.tasks,
        max_level=s.targeted.max_level,
        reach=s.targeted.reach,
        recovery=s.targeted.recovery,
    )
    uniform = s.targeted.mode == "uniform"
    batches = (
        allocate_uniform(ctx.seen, s.targeted.tasks, max_level=s.targeted.max_level)
        if uniform
        else gap_batches
    )
    made: list[str] = []
    slips: dict[str, Slip] = {}
    for index, batch in enumerate(batches):
        seed = s.seed * 100_003 + round_ * 1_009 + index + (UNIFORM_SEED_OFFSET if uniform else 0)
        found = await synthesized_tasks(
            ctx.pool,
            batch.env,
            batch.n,
            batch.levels,
            seed,
            f"{ctx.run_id}:round{round_}",
            ctx.store,
            ctx.profiles,
        )
        fresh = [t for t in found if t.id not in held and t.request not in held]
        focus = set(batch.focus_tools)
        fresh.sort(key=lambda t: (-len(focus & set(t.solution.tool_calls if t.solution else [])), t.id))
        chosen = spread_over_levels(fresh, batch.n) if uniform else fresh[: batch.n]
        made += [t.id for t in chosen]
        slips |= slips_for(chosen, batch.slips, seed)
    for batch in batches:
        ctx.console.print(f"  asked: {batch.reason}")
    return {
        "mode": s.targeted.mode,
        "gaps": report.to_json(),
        "batches": [b.to_json() for b in batches],
        "tasks": made,
        "slips": {task_id: asdict(slip) for task_id, slip in slips.items()},
    } | ({"gap_batches": [b.to_json() for b in gap_batches]} if uniform else {})


async def stage_train(ctx: Context, round_: int, tasks: list[Task], slips: dict[str, Slip]) -> dict[str, Any]:
    trainer = _trainer(ctx)
    metrics: dict[str, Any] = {}
    if ctx.settings.targeted.sft:
        examples = await reference_conversations(ctx, tasks, _reference_run(ctx, round_), slips)
        if ctx.settings.targeted.replay:
            examples += await recorded_conversations(ctx, [_reference_run(ctx, r) for r in range(round_)])
        metrics["sft"] = trainer.warm_start(examples, tokens=ctx.settings.targeted.sft_tokens)
    steps_dir = ctx.home / "checkpoints" / f"round{round_}-steps"
    metrics["grpo"] = await trainer.train_round(
        ctx.pool, tasks, ctx.settings.episode_config(), steps_dir, lambda text: ctx.console.print(f"  {text}")
    )
    trainer.save(_checkpoint(ctx, round_))
    return metrics | {"tokens": trained_tokens(metrics)}


def trained_tokens(metrics: dict[str, Any]) -> int | None:
    """Tokens a round trained on: its SFT's and its GRPO updates' (None when the trainer reports neither)."""
    counts = [
        part.get(key)
        for part, key in ((metrics.get("sft") or {}, "tokens"), (metrics.get("grpo") or {}, "update_tokens"))
    ]
    known = [int(c) for c in counts if isinstance(c, int | float)]
    return sum(known) if known else None


def eval_stages(stages: dict[str, Any]) -> list[dict[str, Any]]:
    """The evaluations of rounds 0, 1, ... in order (the base model's is apart, under ``eval:base``)."""
    rounds = sorted(int(k.split(":")[1]) for k in stages if k.startswith("eval:") and k[5:].isdigit())
    return [stages[f"eval:{r}"] for r in rounds]


def tokens_per_round(stages: dict[str, Any]) -> list[int | None]:
    """Tokens trained before each evaluation: the warm start's for round 0, then each round's."""
    warm = stages.get("warm_start:0", {}).get("tokens")
    rounds = [stages.get(f"train:{r}", {}).get("tokens") for r in range(1, len(eval_stages(stages)))]
    return [int(warm) if warm is not None else None, *rounds]


def benchmark_lines(stages: dict[str, Any]) -> dict[str, Any]:
    """``<benchmark>_success_per_round`` and ``<benchmark>_by_category_per_round`` of each benchmark run."""
    names = sorted({k.split(":")[0] for k in stages if k.startswith(f"{BFCL_MULTI_TURN}:")})
    out: dict[str, Any] = {}
    for name in names:
        per_round = [stages.get(f"{name}:{r}") for r in range(len(eval_stages(stages)))]
        out[f"{name}_success_per_round"] = [round(b["success"], 4) if b else None for b in per_round]
        out[f"{name}_ci95_per_round"] = [[round(x, 4) for x in b["ci95"]] if b else None for b in per_round]
        out[f"{name}_by_category_per_round"] = [
            {c: round(v["success"], 4) for c, v in b["by_category"].items()} if b else None for b in per_round
        ]
    return out


@dataclass
class EvolveOutcome:
    """The last line of ``arena evolve``."""

    run_id: str
    stages: dict[str, Any]
    wall_s: float
    report: Path

    def line(self) -> dict[str, Any]:
        evals = eval_stages(self.stages)
        base = self.stages.get("eval:base")
        return {
            "run_id": self.run_id,
            "rounds": len(evals) - 1,
            "heldout_success_per_round": [round(e["success"], 4) for e in evals],
            "heldout_ci95_per_round": [[round(x, 4) for x in e["ci95"]] for e in evals],
            "heldout_tasks": len(self.stages["sets"]["heldout"]),
            "train_tasks": len(self.stages["sets"]["train"]),
            "overlap": self.stages["sets"]["overlap"],
            "gain": round(evals[-1]["success"] - evals[0]["success"], 4) if evals else 0.0,
            "base_success": round(base["success"], 4) if base else None,
            "paired_vs_round0": self.stages.get("paired_vs_round0"),
            "unseen_envs": self.stages["sets"].get("unseen_envs", []),
            "unseen_env_success_per_round": [
                round(e["unseen"]["success"], 4) if "unseen" in e else None for e in evals
            ],
            "targeted_mode": self.stages.get("targeted:1", {}).get("mode", "gap"),
            "round0_from": self.stages.get("round0_from"),
            "tokens_per_round": tokens_per_round(self.stages),
            **benchmark_lines(self.stages),
            "wall_s": round(self.wall_s, 1),
            "report": str(self.report),
        }


async def run_stages(ctx: Context) -> None:
    """Every stage not finished yet, in order."""
    s = ctx.settings
    if "sets" not in ctx.stages:
        ctx.done("sets", await stage_sets(ctx))
    train, heldout = ctx.tasks(ctx.stages["sets"]["train"]), ctx.tasks(ctx.stages["sets"]["heldout"])
    if "warm_start:0" not in ctx.stages:
        examples = await reference_conversations(ctx, train, _reference_run(ctx, 0))
        ctx.base_model = _base_model(ctx, examples)
        if s.base_eval and "eval:base" not in ctx.stages:
            ctx.done("eval:base", await stage_eval(ctx, "base", heldout))
        ctx.done("warm_start:0", await stage_warm_start(ctx, examples))
    if "eval:0" not in ctx.stages:
        ctx.done("eval:0", await stage_eval(ctx, 0, heldout))
    benchmarks = {name: benchmark_tasks(s, name) for name in s.benchmarks}
    for name, tasks in benchmarks.items():
        if f"{name}:0" not in ctx.stages:
            ctx.done(f"{name}:0", await stage_benchmark(ctx, 0, name, tasks))
    for round_ in range(1, s.rounds + 1):
        if f"targeted:{round_}" not in ctx.stages:
            previous = ctx.stages[f"eval:{round_ - 1}"]["run_id"]
            ctx.done(f"targeted:{round_}", await stage_targeted(ctx, round_, previous, heldout))
        if f"train:{round_}" not in ctx.stages:
            asked = ctx.stages[f"targeted:{round_}"]
            slips = {task_id: Slip(**slip) for task_id, slip in asked.get("slips", {}).items()}
            ctx.done(f"train:{round_}", await stage_train(ctx, round_, ctx.tasks(asked["tasks"]), slips))
        if f"eval:{round_}" not in ctx.stages:
            ctx.done(f"eval:{round_}", await stage_eval(ctx, round_, heldout))
        for name, tasks in benchmarks.items():
            if f"{name}:{round_}" not in ctx.stages:
                ctx.done(f"{name}:{round_}", await stage_benchmark(ctx, round_, name, tasks))


def round0_of(runs: RunStore, settings: EvolveSettings, home: Path) -> dict[str, Any]:
    """The round-0 stages of run ``settings.from_round0`` (same store), checked to be this run's round 0:
    finished, with the same policy, environments, sets and rollout limits, and its checkpoint at hand."""
    source = settings.from_round0
    try:
        info = runs.get(str(source))
    except KeyError:
        raise EvolveError(f"from_round0: no run {source!r} in the store") from None
    stages = (info.summary or {}).get("stages", {})
    if not {"sets", "warm_start:0", "eval:0"} <= set(stages):
        raise EvolveError(f"from_round0: run {source!r} has not finished round 0 (run it first)")
    ours = settings.model_dump(mode="json")
    differ = [key for key in SAME_ROUND0 if (info.config or {}).get(key) != ours[key]]
    if differ:
        raise EvolveError(f"from_round0: run {source!r} differs in {', '.join(differ)}")
    if not (home / "checkpoints" / "round0").is_dir():
        raise EvolveError(f"from_round0: no round-0 checkpoint of {source!r} under {home}")
    reused = [*ROUND0_STAGES, *(f"{name}:0" for name in settings.benchmarks)]
    return {k: stages[k] for k in reused if k in stages} | {"round0_from": source}


async def evolve(settings: EvolveSettings, console: Console) -> EvolveOutcome:
    """Run (or resume) the evolve run ``settings`` describes; write its report."""
    from arena.evolve.report import write_evolve_report

    started = time.monotonic()
    run_id = settings.resolved_run_id()
    home = (
        Path(settings.report.dir).expanduser() if settings.report.dir else arena_home() / "evolve"
    ) / run_id
    db = Database(settings.store.url)
    runs = RunStore(db)
    resumed = runs.start(
        run_id,
        kind="evolve",
        policy=settings.policy.kind,
        suite="evolve",
        config=settings.model_dump(mode="json"),
        git_revision=git_revision(),
        planned=settings.rounds,
    )
    stages = dict((runs.get(run_id).summary or {}).get("stages", {})) if resumed else {}
    if stages:
        console.print(f"resuming {run_id}: finished stages {', '.join(stages)}")
    round0_home = None
    if settings.from_round0:
        round0_home = home.parent / settings.from_round0
        if "eval:0" not in stages:
            stages |= round0_of(runs, settings, round0_home)
            console.print(f"round 0 (sets, warm start, evaluation) reused from {settings.from_round0}")
    envs, unseen = _envs(settings)
    envs += benchmark_envs(settings)  # played, never trained on nor counted in the held-out figures
    pool = await start_pool(envs, settings.pool, console)
    ctx = Context(
        settings,
        run_id,
        console,
        TaskStore(db),
        runs,
        ProfileStore(db),
        pool,
        envs,
        await categories_of(pool, envs),
        home,
        stages,
        unseen,
        round0_home,
    )
    ctx.tracker = open_tracker(settings.tracker, run_id, settings.model_dump(mode="json"), home)
    try:
        await run_stages(ctx)
        evals = eval_stages(ctx.stages)
        if len(evals) > 1:
            first, last = (
                [x for x in runs.episodes(e["run_id"]) if x.env not in ctx.unseen]
                for e in (evals[0], evals[-1])
            )
            ctx.stages["paired_vs_round0"] = paired(first, last).to_json()
        report = write_evolve_report(runs, run_id, ctx.stages, home / "report")
        runs.finish(run_id, "finished", {"stages": ctx.stages})
    finally:
        ctx.tracker.finish()
        await pool.shutdown()
        db.close()
    return EvolveOutcome(run_id, ctx.stages, time.monotonic() - started, report)
