"""Synthesis of verified tasks for one environment, through the pool.

Per attempt: pick the level furthest behind its quota and a task kind from that level's mix; sample a
chain (graph/state tasks) or a program in a *walk* session; word it; replay the reference solution in
a second, freshly reset *check* session and keep only what is stable; build the verifier; check that
the replayed reference passes it and that every wrong-answer/wrong-state probe fails it; drop
duplicates. Attempts run in rounds of ``WORKERS`` concurrent attempts, each in its own pair of
sessions, with its own random stream and its own copy of the profile; a round's outcomes are then taken
in attempt order (quota, duplicates, what the profile learned), so the same seed gives the same tasks
whatever order the environment's answers arrive in.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from task_synth.chains import Chain, answer_fields, prune, sample_chain
from task_synth.clarity import ambiguous_share, untied_keys
from task_synth.difficulty import KIND_MIX, knobs_for
from task_synth.graph import ToolGraph
from task_synth.llm import LLMConfig, refine_request
from task_synth.llm_programs import draft_program
from task_synth.model import CodeStep, Knobs, Ref, Rubric, Solution, StateCheck, Task, TaskKind, Verifier
from task_synth.profile import EnvProfile, discover
from task_synth.program import SolutionFailed, execute, resolve, run_fresh
from task_synth.programs import sample_program
from task_synth.quality import MIN_PROBES, answer_probes, signature, state_probes
from task_synth.runner import LeaseRunner, SeedMemo
from task_synth.sessions import SessionProvider
from task_synth.values import canonical
from task_synth.verify import normalize_diff, rule_for, verify
from task_synth.wording import chain_request, leaks, literal_values, program_request

WORKERS = 4
LLM_PROGRAM = "llm-program"
ATTEMPTS_PER_TASK = 40
NUMERIC_TOLERANCE = 1e-4

__all__ = ["LLMConfig", "SynthResult", "synthesize"]


@dataclass
class SynthResult:
    """Kept tasks of one environment, with what was tried and why the rest was dropped."""

    env: str
    tasks: list[Task] = field(default_factory=list)
    attempts: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    probes: int = 0
    probes_rejected: int = 0
    profile: EnvProfile | None = None
    graph: ToolGraph | None = None

    @property
    def ambiguous_share(self) -> float:
        """Share of kept tasks with an answer key a reader cannot tie to one call (``clarity``)."""
        return ambiguous_share(self.tasks, {self.profile.env: self.profile}) if self.profile else 0.0

    def per_level(self) -> dict[int, dict[str, float]]:
        levels: dict[int, list[Task]] = {}
        for task in self.tasks:
            levels.setdefault(task.difficulty, []).append(task)
        return {
            level: {
                "kept": len(tasks),
                "mean_chain_length": sum(t.measured["chain_length"] for t in tasks) / len(tasks),
                "mean_distinct_tools": sum(t.measured["distinct_tools"] for t in tasks) / len(tasks),
            }
            for level, tasks in sorted(levels.items())
        }


@dataclass
class _Draft:
    kind: TaskKind
    solution: Solution
    request: str
    first_answer: dict[str, Any]
    first_diff: dict[str, Any] | None
    edges: list[str]


class _Run:
    """Shared state of one ``synthesize`` call."""

    def __init__(
        self, ref: str, profile: EnvProfile, n: int, levels: Sequence[int], seed: int, llm: LLMConfig | None
    ):
        self.ref = ref  # what the session provider knows the environment by (a name or a path)
        self.profile = profile
        self.graph = ToolGraph.build(profile)
        self.n = n
        self.levels = list(levels)
        self.quota = math.ceil(n / len(self.levels))
        self.seed = seed
        self.llm = llm
        self.result = SynthResult(profile.env, profile=profile, graph=self.graph)
        self.kept_per_level: Counter[int] = Counter()
        self.tried_per_level: Counter[int] = Counter()
        self.signatures: set[tuple[str, ...]] = set()
        self.requests: set[str] = set()
        self.seed_memo: SeedMemo = {}

    @property
    def done(self) -> bool:
        return len(self.result.tasks) >= self.n or self.result.attempts >= self.n * ATTEMPTS_PER_TASK

    def next_level(self) -> int | None:
        open_levels = [
            lv
            for lv in self.levels
            if self.kept_per_level[lv] < self.quota
            and self.tried_per_level[lv] < self.quota * ATTEMPTS_PER_TASK
        ]
        if not open_levels:
            return None
        return min(open_levels, key=lambda lv: (self.kept_per_level[lv], self.tried_per_level[lv]))


def _pick_kind(level: int, knobs: Knobs, rng: random.Random) -> TaskKind:
    mix = {k: w for k, w in KIND_MIX[level].items() if k is not TaskKind.PROGRAM or knobs.aggregation}
    return rng.choices(list(mix), weights=list(mix.values()))[0]


async def _draft(
    run: _Run, profile: EnvProfile, walk: LeaseRunner, level: int, rng: random.Random
) -> _Draft | str:
    """Sample and word one candidate; a string is the reason it was dropped."""
    knobs = knobs_for(level)
    kind = _pick_kind(level, knobs, rng)
    await walk.reset()
    if kind is TaskKind.PROGRAM and run.llm is not None:
        written = await draft_program(run.llm, profile, knobs, walk, rng)
        if isinstance(written, str):
            return written
        solution = Solution(
            steps=[CodeStep(source=written.source)], answer={k: Ref(step=0, path=k) for k in written.answer}
        )
        return _Draft(kind, solution, written.request, written.answer, None, [LLM_PROGRAM])
    if kind is TaskKind.PROGRAM:
        solution = await sample_program(walk, profile, run.graph, knobs, rng)
        if solution is None:
            return "program: no suitable list"
        try:
            first = await execute(solution, walk)
        except SolutionFailed:
            return "program: reference failed"
        if len(first.calls) < knobs.chain_length[0]:
            return "program: too few calls for the level"
        key = next(iter(solution.answer))
        request = program_request(solution, profile, key, rng, knobs)
        return _Draft(kind, solution, request, first.answer, None, ["program"])
    chain = await sample_chain(walk, profile, run.graph, knobs, rng, end_with_write=kind is TaskKind.STATE)
    if chain is None:
        return f"{kind}: walk did not reach the length"
    if len(set(chain.tools)) < knobs.min_distinct_tools:
        return f"{kind}: too few distinct tools"
    answer = answer_fields(chain, profile, rng, per_step=1 if level <= 2 else 2)
    if kind is TaskKind.STATE:
        answer = {k: r for k, r in answer.items() if r.step == len(chain.steps) - 1}
    elif not answer:
        return "graph: nothing to answer"
    chain, answer = prune(chain, answer)
    if len(chain.steps) < knobs.chain_length[0] or len(set(chain.tools)) < knobs.min_distinct_tools:
        return f"{kind}: too short once unused steps are dropped"
    solution = Solution(steps=list(chain.steps), answer=answer)
    first_answer = _answer_from(chain, solution)
    diff = await walk.diff() if kind is TaskKind.STATE else None
    request = chain_request(chain, answer, profile, knobs, rng)
    edges = [info.edge.value for info in chain.info if info.edge is not None]
    return _Draft(kind, solution, request, first_answer, diff, edges)


def _author(llm_program: bool, *, reworded: bool) -> str:
    """Who wrote the task: the LLM as a whole program, the templates reworded by the LLM, or templates."""
    if llm_program:
        return LLM_PROGRAM
    return "llm" if reworded else "offline-templates"


def _answer_from(chain: Chain, solution: Solution) -> dict[str, Any]:
    return {key: resolve(ref, chain.outputs) for key, ref in solution.answer.items()}


def _unstable_columns(first: dict[str, Any], second: dict[str, Any]) -> list[str] | None:
    """Columns whose values differ between two runs of the same writes; None if rows themselves differ."""
    a, b = normalize_diff(first, []), normalize_diff(second, [])
    if set(a) != set(b):
        return None
    columns: set[str] = set()
    for table in a:
        for kind in ("inserted", "deleted", "changed"):
            rows_a, rows_b = a[table][kind], b[table][kind]
            if len(rows_a) != len(rows_b):
                return None
            for row_a, row_b in zip(rows_a, rows_b, strict=True):
                ra, rb = (row_a.get("after", row_a), row_b.get("after", row_b))
                columns |= {f"{table}.{c}" for c in ra if ra.get(c) != rb.get(c)}
    return sorted(columns)


async def _finish(
    run: _Run,
    profile: EnvProfile,
    check: LeaseRunner,
    probe: LeaseRunner,
    draft: _Draft,
    level: int,
    rng: random.Random,
) -> Task | str:
    """Replay, build the verifier, verify the reference, probe with wrong answers; a string is why it
    was dropped."""
    literals = literal_values(draft.solution.steps)
    if reason := leaks(draft.request, draft.first_answer, profile, literals):
        return f"request {reason}"
    if draft.request in run.requests:
        return "duplicate request"
    fresh = await run_fresh(check, draft.solution, [])
    if fresh is None:
        return "replay failed"
    replay, diff = fresh
    stable = {k: v for k, v in replay.answer.items() if canonical(v) == canonical(draft.first_answer.get(k))}
    if draft.kind is not TaskKind.STATE and not stable:
        return "answer not reproducible"
    solution = draft.solution.model_copy(update={"answer": {k: draft.solution.answer[k] for k in stable}})
    state = None
    if draft.kind is TaskKind.STATE:
        ignore = _unstable_columns(draft.first_diff or {}, diff or {})
        if ignore is None:
            return "state not reproducible"
        expected = normalize_diff(diff or {}, ignore)
        if not expected:
            return "state task changed nothing"
        state = StateCheck(expected=expected, ignore_columns=ignore)
    rubric = None
    if stable:
        rubric = Rubric(
            fields={
                k: rule_for(v, tolerance=NUMERIC_TOLERANCE if isinstance(v, float) else 0.0)
                for k, v in stable.items()
            }
        )
    # Knobs record what this task has: only a program aggregates.
    knobs = knobs_for(level).model_copy(update={"aggregation": draft.kind is TaskKind.PROGRAM})
    request = draft.request
    llm_program = draft.edges == [LLM_PROGRAM]
    if run.llm is not None and not llm_program:
        request = await refine_request(run.llm, request, stable, profile, literals) or request
    task = Task(
        env=profile.env,
        env_version=profile.version,
        kind=draft.kind,
        request=request,
        difficulty=level,
        knobs=knobs,
        solution=solution,
        reference_answer=stable or None,
        verifier=Verifier(rubric=rubric, state=state),
        provenance={
            "synthesizer": _author(llm_program, reworded=request != draft.request),
            "seed": run.seed,
            "edges": draft.edges,
            "seed_hash": profile.seed_hash,
            **({"env_source": run.ref} if run.ref != profile.env else {}),
        },
        measured={
            "chain_length": float(len(replay.calls)),
            "distinct_tools": float(len({tool for tool, _ in replay.calls})),
        },
    ).with_id()
    if untied_keys(task, profile) and request != draft.request:
        # The rewording lost the words tying a key to its call: keep the template's request.
        task = task.model_copy(
            update={
                "request": draft.request,
                "provenance": {**task.provenance, "synthesizer": _author(llm_program, reworded=False)},
            }
        ).with_id()
    if untied_keys(task, profile):
        return "answer keys not tied to one call"
    if not verify(task, stable, diff).passed:
        return "reference fails its verifier"
    if signature(task) in run.signatures:
        return "near-duplicate"
    probes = [(what, answer, diff) for what, answer in answer_probes(stable, profile, rng)]
    if state is not None:

        async def fresh_diff(
            solution: Solution, extra: list[tuple[str, dict[str, Any]]]
        ) -> dict[str, Any] | None:
            outcome = await run_fresh(probe, solution, extra)
            return None if outcome is None else outcome[1]

        probes += await state_probes(task, stable, profile, fresh_diff, rng)
    rejected = sum(1 for _, answer, probe_diff in probes if not verify(task, answer, probe_diff).passed)
    run.result.probes += len(probes)
    run.result.probes_rejected += rejected
    if len(probes) < MIN_PROBES:
        return "too few wrong-answer probes"
    if rejected < len(probes):
        return "verifier accepted a wrong answer"
    task.measured["probes"] = float(len(probes))
    return task


@dataclass
class _Slot:
    """One concurrent attempt's sessions: a walk session and a check session (also used for probes)."""

    walk: LeaseRunner
    check: LeaseRunner
    probe: LeaseRunner


async def _attempt(run: _Run, slot: _Slot, index: int, level: int) -> tuple[Task | str, EnvProfile]:
    """Attempt ``index`` at ``level``: its outcome and what its copy of the profile learned. Its random
    stream depends on the seed and the index only."""
    rng = random.Random(f"{run.seed}:{index}")
    profile = run.profile.working_copy()
    draft = await _draft(run, profile, slot.walk, level, rng)
    if isinstance(draft, str):
        return draft, profile
    return await _finish(run, profile, slot.check, slot.probe, draft, level, rng), profile


def _plan(run: _Run, slots: int) -> list[int]:
    """The levels of the next round's attempts, from what is kept and tried so far."""
    levels: list[int] = []
    while len(levels) < slots and not run.done:
        level = run.next_level()
        if level is None:
            break
        run.result.attempts += 1
        run.tried_per_level[level] += 1
        levels.append(level)
    return levels


def _take(run: _Run, outcome: Task | str, level: int, progress: Callable[[int], None] | None) -> None:
    """Count one attempt's outcome, in attempt order: keep a task while its level's quota is open."""
    if isinstance(outcome, Task):
        if outcome.request in run.requests:
            outcome = "duplicate request"
        elif signature(outcome) in run.signatures:
            outcome = "near-duplicate"
    if isinstance(outcome, str):
        run.result.dropped[outcome] += 1
        return
    if len(run.result.tasks) >= run.n or run.kept_per_level[level] >= run.quota:
        return
    run.signatures.add(signature(outcome))
    run.requests.add(outcome.request)
    run.kept_per_level[level] += 1
    run.result.tasks.append(outcome)
    if progress is not None:
        progress(1)


async def _rounds(
    pool: SessionProvider, run: _Run, progress: Callable[[int], None] | None, stack: AsyncExitStack
) -> None:
    mutating = run.profile.mutating
    slots: list[_Slot] = []
    for _ in range(WORKERS):
        walk_lease = await stack.enter_async_context(pool.session(run.ref))
        check_lease = await stack.enter_async_context(pool.session(run.ref))
        # Wrong-state probes only need *a* wrong state: their reads at the seed state may come from the
        # memo. The reference replay above them never does. Both start with a forced reset.
        slots.append(
            _Slot(
                walk=LeaseRunner(walk_lease, mutating, memo=run.seed_memo),
                check=LeaseRunner(check_lease, mutating),
                probe=LeaseRunner(check_lease, mutating, memo=run.seed_memo),
            )
        )
    while levels := _plan(run, len(slots)):
        first = run.result.attempts - len(levels)
        outcomes = await asyncio.gather(
            *(
                _attempt(run, slot, first + i, level)
                for i, (slot, level) in enumerate(zip(slots, levels, strict=False))
            )
        )
        for level, (outcome, learned) in zip(levels, outcomes, strict=True):
            run.profile.absorb(learned)
            _take(run, outcome, level, progress)
        if first // 25 != run.result.attempts // 25:
            run.graph = ToolGraph.build(run.profile)


async def load_profile(
    pool: SessionProvider,
    env: str,
    *,
    seed: int,
    profile_cache: Callable[[str, str], dict | None] | None = None,
    save_profile: Callable[[str, str, dict], None] | None = None,
) -> EnvProfile:
    """The stored profile of this environment version (keyed by the environment's name), or a fresh
    discovery (then stored). ``env`` is what ``pool`` knows the environment by: a name or a path."""
    async with pool.session(env) as lease:
        runner = LeaseRunner(lease)
        info = await runner.info()
        version = f"{info.get('version', '')}:{info.get('seed_hash', '')[:16]}"
        name = str(info.get("name", env))
        cached = profile_cache(name, version) if profile_cache else None
        if cached is not None:
            return EnvProfile.model_validate(cached)
        profile = await discover(runner, seed=seed)
    profile.version = version
    if save_profile is not None:
        save_profile(name, version, profile.model_dump(mode="json"))
    return profile


async def synthesize(
    pool: SessionProvider,
    env: str,
    *,
    n: int,
    levels: Sequence[int],
    seed: int = 0,
    llm: LLMConfig | None = None,
    progress: Callable[[int], None] | None = None,
    profile_cache: Callable[[str, str], dict | None] | None = None,
    save_profile: Callable[[str, str, dict], None] | None = None,
) -> SynthResult:
    """Synthesize up to ``n`` verified tasks for ``env`` (a name or path ``pool`` serves) over ``levels``;
    tasks store the environment's own name (and, when synthesized from a path, that path as
    ``provenance.env_source``)."""
    profile = await load_profile(pool, env, seed=seed, profile_cache=profile_cache, save_profile=save_profile)
    run = _Run(env, profile, n, levels, seed, llm)
    async with AsyncExitStack() as stack:
        await _rounds(pool, run, progress, stack)
    run.result.tasks.sort(key=lambda t: (t.difficulty, t.id))
    return run.result
