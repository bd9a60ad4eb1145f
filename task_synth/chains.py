"""Chain sampling: a weighted random walk on the tool graph, executed step by step in a session.

Each step's arguments come from upstream outputs (along the edge's bindings) or from real data. A step
that errors or returns nothing is retried with another edge; a chain that cannot reach the minimum
length is dropped. A list output feeding the next step is narrowed to one item by a field whose value
is unique in that list, so the request can name it without ambiguity.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from task_synth.arguments import fill_arguments, fillable_from_data
from task_synth.graph import Edge, EdgeKind, ToolGraph
from task_synth.model import CallStep, Knobs, Ref
from task_synth.profile import EnvProfile
from task_synth.program import resolve
from task_synth.runner import ToolRunner
from task_synth.values import get_path, list_path, records, scalar_fields, singular

ATTEMPTS_PER_STEP = 3
MAX_LIST_FOR_IDS = 8


@dataclass
class StepInfo:
    """How a step was reached, for the wording and the difficulty measures."""

    edge: EdgeKind | None
    selector: tuple[str, Any] | None = None  # (field, value) singling out one item of a list output


@dataclass
class Chain:
    steps: list[CallStep] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    info: list[StepInfo] = field(default_factory=list)

    @property
    def tools(self) -> list[str]:
        return [s.tool for s in self.steps]

    def consumed(self) -> set[int]:
        return {ref.step for step in self.steps for ref in step.bindings.values()}


def write_heavy(profile: EnvProfile) -> bool:
    """Fewer than 3 read-only tools (as in many imported environments, whose tools log every call):
    chains may then pass through writing tools, and answer tasks may depend on those writes."""
    return sum(not t.mutates for t in profile.tools.values()) < 3


def _item_selector(output: Any, rng: random.Random) -> tuple[str, int, tuple[str, Any]] | None:
    """Pick one item of a list output and a (field, value) unique to it: (list path, index, selector)."""
    path = list_path(output)
    if path is None:
        return None
    items = output if path == "" else output[path]
    item_fields = [scalar_fields(item) for item in items]
    counts = Counter(pair for fields in item_fields for pair in fields.items())
    order = list(range(len(items)))
    rng.shuffle(order)
    for index in order[:4]:
        unique = [
            (name, value)
            for name, value in item_fields[index].items()
            if value is not None and not isinstance(value, float) and counts[name, value] == 1
        ]
        if unique:
            unique.sort(key=lambda pair: (pair[0] not in ("id", "key", "code"), pair[0]))
            return path, index, unique[0] if rng.random() < 0.5 else rng.choice(unique)
    return None


def _bind(
    edge: Edge, step_index: int, output: Any, rng: random.Random
) -> tuple[dict[str, Ref], StepInfo] | None:
    """Refs for the edge's bindings into ``output`` (one item of it if it is a list)."""
    prefix = ""
    selector = None
    if isinstance(output, list) or (list_path(output) is not None and not edge.bindings.keys() & set(output)):
        picked = _item_selector(output, rng)
        if picked is None:
            return None
        path, index, selector = picked
        prefix = f"{path}[{index}]." if path else f"[{index}]."

    refs = {}
    for param, source in edge.bindings.items():
        try:
            value = get_path(output, prefix + source)
        except LookupError:
            continue
        if value is not None:
            refs[param] = Ref(step=step_index, path=prefix + source)
    return refs, StepInfo(edge.kind, selector)


def _choose_edge(edges: list[Edge], knobs: Knobs, used: set[str], rng: random.Random) -> Edge | None:
    if not edges:
        return None
    strong = [e for e in edges if e.kind is EdgeKind.STRONG]
    loose = [e for e in edges if e.kind is not EdgeKind.STRONG]
    pool = loose if (rng.random() < knobs.weak_edge_share or not strong) else strong
    pool = pool or strong
    weights = [e.weight * (0.25 if e.dst in used else 1.0) for e in pool]
    return rng.choices(pool, weights=weights)[0]


def _near_current(
    arguments: dict[str, Any], refs: dict[str, Ref], output: Any, rng: random.Random
) -> dict[str, Any]:
    """A write's numbers near the record's own: a number drawn from data may belong to another entity
    (a cat set to a dog's 35 kg); when the record being written has a field of the argument's name, the
    new value is that field's value moved by about 10%."""
    record = output
    if refs:
        path = next(iter(refs.values())).path
        if "." in path:
            try:
                record = get_path(output, path.rsplit(".", 1)[0])
            except LookupError:
                return arguments
    if not isinstance(record, dict):
        return arguments
    moved = dict(arguments)
    for name, value in arguments.items():
        current = record.get(name)
        numbers = (value, current)
        if name in refs or any(isinstance(v, bool) or not isinstance(v, int | float) for v in numbers):
            continue
        step = rng.choice((-1, 1))
        if isinstance(current, int) and isinstance(value, int):
            moved[name] = current + step * max(1, round(abs(current) * 0.1))
        else:
            moved[name] = round(current * (1 + step * 0.1), 2) or 1.0
    return moved


async def sample_chain(
    runner: ToolRunner,
    profile: EnvProfile,
    graph: ToolGraph,
    knobs: Knobs,
    rng: random.Random,
    *,
    end_with_write: bool,
) -> Chain | None:
    """Walk, execute and return one chain, or None when this walk could not be completed."""
    low, high = knobs.chain_length
    length = rng.randint(low, high)
    writes_anywhere = write_heavy(profile)
    if end_with_write and not writes_anywhere:
        length = max(length, 2)  # a walk starts with a read, so a write task needs a second step
    starts = [
        t
        for t in profile.tools.values()
        if (writes_anywhere or not t.mutates) and fillable_from_data(t, profile)
    ]
    if not starts:
        return None
    start = rng.choice(starts)
    arguments = fill_arguments(start, profile, rng, optional_share=0.2)
    if arguments is None:
        return None
    first = await runner.call(start.name, arguments)
    if not first.ok or first.empty:
        return None
    profile.observe(start.name, first.value)  # also when remembered: what is learned cannot hang on timing
    chain = Chain([CallStep(tool=start.name, arguments=arguments)], [first.value], [StepInfo(None)])

    def out_edges(mutation: bool) -> list[Edge]:
        return [
            e
            for e in graph.out_edges(chain.steps[-1].tool)
            if profile.tools[e.dst].mutates == mutation or (writes_anywhere and not mutation)
        ]

    while len(chain.steps) < length:
        want_mutation = end_with_write and len(chain.steps) == length - 1
        if not await _extend(runner, profile, chain, out_edges(want_mutation), knobs, rng):
            # No way on: a write task long enough for its level can still end here with a write.
            if end_with_write and not want_mutation and len(chain.steps) + 1 >= low:
                await _extend(runner, profile, chain, out_edges(True), knobs, rng)
            break
        if profile.tools[chain.steps[-1].tool].mutates and not writes_anywhere:
            break
    if len(chain.steps) < low or (end_with_write and not profile.tools[chain.steps[-1].tool].mutates):
        return None
    return chain


async def _extend(
    runner: ToolRunner, profile: EnvProfile, chain: Chain, edges: list[Edge], knobs: Knobs, rng: random.Random
) -> bool:
    """Try a few edges out of the last step; append the first one that runs and returns something."""
    for _ in range(ATTEMPTS_PER_STEP):
        edge = _choose_edge(edges, knobs, set(chain.tools), rng)
        if edge is None:
            return False
        edges = [e for e in edges if e is not edge]
        bound = _bind(edge, len(chain.steps) - 1, chain.outputs[-1], rng)
        if bound is None:
            continue
        refs, info = bound
        if edge.kind is EdgeKind.STRONG and not refs:
            continue
        values = {param: resolve(ref, chain.outputs) for param, ref in refs.items()}
        tool = profile.tools[edge.dst]
        literal = fill_arguments(tool, profile, rng, optional_share=0.15, fixed=values)
        if literal is None:
            continue
        if tool.mutates:
            literal = _near_current(literal, refs, chain.outputs[-1], rng)
        outcome = await runner.call(tool.name, literal)
        if not outcome.ok or outcome.empty:
            continue
        profile.observe(tool.name, outcome.value)
        chain.steps.append(
            CallStep(
                tool=tool.name,
                arguments={k: v for k, v in literal.items() if k not in refs},
                bindings=refs,
            )
        )
        chain.outputs.append(outcome.value)
        chain.info.append(info)
        return True
    return False


def _key(answer: dict[str, Ref], entity: str, name: str) -> str:
    base = (name if name.startswith(entity) else f"{entity}_{name}").replace(".", "_")
    key, n = base, 2
    while key in answer:
        key, n = f"{base}_{n}", n + 1
    return key


def answer_fields(chain: Chain, profile: EnvProfile, rng: random.Random, per_step: int) -> dict[str, Ref]:
    """Answer keys (named by entity and field, never by tool) from every step whose output no later
    step consumed, and from the last step."""
    consumed = chain.consumed()
    answer: dict[str, Ref] = {}
    for index, (step, output) in enumerate(zip(chain.steps, chain.outputs, strict=True)):
        if index in consumed and index != len(chain.steps) - 1:
            continue
        entity = profile.tools[step.tool].entity
        given = set(step.arguments.values())
        found = records(output)
        if list_path(output) is not None:
            path = list_path(output)
            items = output if path == "" else output[path]
            if path:
                entity = singular(path.rsplit(".", 1)[-1])
            if 0 < len(items) <= MAX_LIST_FOR_IDS and all(isinstance(i, dict) and "id" in i for i in items):
                answer[_key(answer, entity, "ids")] = Ref(
                    step=index, path=f"{path}[*].id" if path else "[*].id"
                )
            continue
        if not found:
            continue
        fields = [
            (name, value)
            for name, value in scalar_fields(found[0]).items()
            if value is not None
            and value not in given
            and not (isinstance(value, str) and len(value) > 60)
            and name not in step.bindings
        ]
        rng.shuffle(fields)
        for name, _ in fields[:per_step]:
            answer[_key(answer, entity, name)] = Ref(step=index, path=name)
    return answer


def prune(chain: Chain, answer: dict[str, Ref]) -> tuple[Chain, dict[str, Ref]]:
    """Drop steps that neither feed a later kept step nor the answer (the last step always stays), and
    renumber the references."""
    needed = {len(chain.steps) - 1} | {ref.step for ref in answer.values()}
    for index in range(len(chain.steps) - 1, -1, -1):
        if index in needed:
            needed |= {ref.step for ref in chain.steps[index].bindings.values()}
    keep = sorted(needed)
    renumber = {old: new for new, old in enumerate(keep)}

    def moved(ref: Ref) -> Ref:
        return Ref(step=renumber[ref.step], path=ref.path)

    pruned = Chain(
        [
            chain.steps[i].model_copy(
                update={"bindings": {k: moved(r) for k, r in chain.steps[i].bindings.items()}}
            )
            for i in keep
        ],
        [chain.outputs[i] for i in keep],
        [chain.info[i] for i in keep],
    )
    return pruned, {key: moved(ref) for key, ref in answer.items()}
