"""Difficulty levels 1-5 as explicit knob settings, and the mix of task kinds at each level."""

from __future__ import annotations

from task_synth.model import Knobs, TaskKind

LEVELS: dict[int, Knobs] = {
    1: Knobs(chain_length=(1, 1), weak_edge_share=0.0, min_distinct_tools=1, aggregation=False,
             branching=False, distractors=0, hidden_references=False, writes=True),
    2: Knobs(chain_length=(2, 3), weak_edge_share=0.1, min_distinct_tools=2, aggregation=False,
             branching=False, distractors=0, hidden_references=False, writes=True),
    3: Knobs(chain_length=(3, 4), weak_edge_share=0.25, min_distinct_tools=2, aggregation=True,
             branching=False, distractors=1, hidden_references=False, writes=True),
    4: Knobs(chain_length=(4, 6), weak_edge_share=0.35, min_distinct_tools=3, aggregation=True,
             branching=True, distractors=2, hidden_references=True, writes=True),
    5: Knobs(chain_length=(6, 8), weak_edge_share=0.5, min_distinct_tools=4, aggregation=True,
             branching=True, distractors=3, hidden_references=True, writes=True),
}  # fmt: skip
"""Longer walks, more weak/independent edges, more distinct tools, aggregation and branching, distractors
and hidden references as the level rises."""

KIND_MIX: dict[int, dict[TaskKind, float]] = {
    1: {TaskKind.GRAPH: 0.7, TaskKind.STATE: 0.3},
    2: {TaskKind.GRAPH: 0.65, TaskKind.STATE: 0.35},
    3: {TaskKind.GRAPH: 0.4, TaskKind.STATE: 0.3, TaskKind.PROGRAM: 0.3},
    4: {TaskKind.GRAPH: 0.35, TaskKind.STATE: 0.25, TaskKind.PROGRAM: 0.4},
    5: {TaskKind.GRAPH: 0.35, TaskKind.STATE: 0.25, TaskKind.PROGRAM: 0.4},
}


def knobs_for(level: int) -> Knobs:
    if level not in LEVELS:
        raise ValueError(f"difficulty level must be 1-5, got {level}")
    return LEVELS[level]


def parse_levels(spec: int | list[int] | tuple[int, ...]) -> list[int]:
    """``3`` -> [3]; ``[1, 5]`` -> [1, 2, 3, 4, 5] (an inclusive range, as in ``difficulty=[1,5]``)."""
    if isinstance(spec, int):
        levels = [spec]
    elif len(spec) == 2:
        low, high = int(spec[0]), int(spec[1])
        levels = list(range(min(low, high), max(low, high) + 1))
    elif len(spec) == 1:
        levels = [int(spec[0])]
    else:
        raise ValueError(f"difficulty must be a level or [low, high], got {list(spec)}")
    for level in levels:
        knobs_for(level)
    return levels
