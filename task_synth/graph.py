"""The weighted, directed tool dependency graph (Agent-World's strong / weak / independent edges).

* strong (weight 3, one way): a required input of B is produced by A's output;
* weak (weight 2, both ways): A's output can fill an optional input of B, or A and B take the same
  entity as input (the value can come from A or from the data);
* independent (weight 1, both ways): every other pair; B's inputs come from the data.

Edges are inferred from tool schemas and the output fields seen in probes and chain executions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from task_synth.profile import EnvProfile, ToolProfile


class EdgeKind(StrEnum):
    STRONG = "strong"
    WEAK = "weak"
    INDEPENDENT = "independent"


WEIGHTS = {EdgeKind.STRONG: 3, EdgeKind.WEAK: 2, EdgeKind.INDEPENDENT: 1}


@dataclass(frozen=True)
class Edge:
    """``src`` -> ``dst``; ``bindings`` maps an input of ``dst`` to an output field of ``src``."""

    src: str
    dst: str
    kind: EdgeKind
    bindings: dict[str, str] = field(default_factory=dict)

    @property
    def weight(self) -> int:
        return WEIGHTS[self.kind]


def producing_field(src: ToolProfile, param: str) -> str | None:
    """The output field of ``src`` that carries ``param``, if any."""
    fields = set(src.output_fields)
    if param in fields:
        return param
    for suffix in ("id", "key", "code", "number", "name"):
        if param == f"{src.entity}_{suffix}" and suffix in fields:
            return suffix
    return None


def _edge(src: ToolProfile, dst: ToolProfile) -> Edge:
    strong: dict[str, str] = {}
    weak: dict[str, str] = {}
    for param in dst.params:
        produced = producing_field(src, param.name)
        if produced is not None:
            (strong if param.required else weak)[param.name] = produced
    if strong:
        return Edge(src.name, dst.name, EdgeKind.STRONG, strong | weak)
    shared_input = {p.name for p in src.params if p.required} & {p.name for p in dst.params if p.required}
    if weak or shared_input:
        return Edge(src.name, dst.name, EdgeKind.WEAK, weak)
    return Edge(src.name, dst.name, EdgeKind.INDEPENDENT)


class ToolGraph:
    """All tool pairs with their strongest relation; weak and independent edges exist in both directions."""

    def __init__(self, edges: dict[tuple[str, str], Edge]) -> None:
        self.edges = edges
        self._out: dict[str, list[Edge]] = {}
        for (src, _), edge in edges.items():
            self._out.setdefault(src, []).append(edge)

    @classmethod
    def build(cls, profile: EnvProfile) -> ToolGraph:
        edges: dict[tuple[str, str], Edge] = {}
        tools = list(profile.tools.values())
        for src in tools:
            for dst in tools:
                if src.name != dst.name:
                    edges[(src.name, dst.name)] = _edge(src, dst)
        for (src, dst), edge in list(edges.items()):
            reverse = edges[(dst, src)]
            if edge.kind is EdgeKind.WEAK and reverse.kind is EdgeKind.INDEPENDENT:
                edges[(dst, src)] = Edge(dst, src, EdgeKind.WEAK)
        return cls(edges)

    def out_edges(self, tool: str) -> list[Edge]:
        return self._out.get(tool, [])

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys((k.value for k in EdgeKind), 0)
        for edge in self.edges.values():
            counts[edge.kind.value] += 1
        return counts

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"src": e.src, "dst": e.dst, "kind": e.kind.value, "weight": e.weight, "bindings": e.bindings}
            for e in self.edges.values()
            if e.kind is not EdgeKind.INDEPENDENT
        ]
