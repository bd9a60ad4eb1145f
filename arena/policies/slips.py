"""Slips: a wrong tool call that the environment is certain to reject, made before the right one.

A reference episode that slips first (``ReferencePolicy(slips=...)``) shows a recovery: the wrong call,
the environment's real error, then the corrected call. The evolve loop asks for them where an evaluation
failed that way (``arena.evolve.targeting``); SFT never imitates a rejected call
(``arena.rollout.conversation.messages_of``), only what follows it.

- ``unknown_tool``: a near miss of the right name that the tool list does not hold (plural or singular,
  another lookup verb), as the models here misname tools (``find_passenger``, ``list_booking``);
- ``invalid_arguments``: a required argument left out, renamed to a parameter of another tool, or (where
  the schema forbids extra keys) another tool's parameter added, as in ``get_passenger(booking_id=...)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

SLIP_KINDS = ("unknown_tool", "invalid_arguments")
LOOKUP_VERBS = ("get", "list", "search", "find")


@dataclass(frozen=True)
class Slip:
    """Before the reference's call number ``call`` (0-based), a wrong call of ``kind``."""

    kind: str
    call: int

    def __post_init__(self) -> None:
        if self.kind not in SLIP_KINDS:
            raise ValueError(f"slip kind must be one of {', '.join(SLIP_KINDS)}, got {self.kind!r}")


def _near_names(name: str, names: set[str]) -> list[str]:
    """Names one plural or one verb away from ``name`` that no tool has."""
    words = name.split("_")
    last = words[-1]
    near = {"_".join([*words[:-1], last[:-1] if last.endswith("s") else last + "s"])}
    if len(words) > 1 and words[0] in LOOKUP_VERBS:
        near |= {"_".join([verb, *words[1:]]) for verb in LOOKUP_VERBS}
    return sorted(near - names - {name})


def _wrong_arguments(
    arguments: dict[str, Any], schema: dict[str, Any], foreign: list[str], rng: random.Random
) -> dict[str, Any] | None:
    """``arguments`` made invalid for ``schema`` in a way its validation must refuse (None: no way)."""
    present = [name for name in schema.get("required", []) if name in arguments]
    extra_refused = schema.get("additionalProperties") is False
    options = [
        kind
        for kind, possible in (
            ("missing", bool(present)),
            ("renamed", bool(present and foreign and extra_refused)),
            ("extra", bool(foreign and extra_refused)),
        )
        if possible
    ]
    if not options:
        return None
    kind = rng.choice(options)
    wrong = dict(arguments)
    if kind in ("missing", "renamed"):
        value = wrong.pop(rng.choice(present))
        if kind == "renamed":
            wrong[rng.choice(foreign)] = value
    else:
        values = list(arguments.values())
        wrong[rng.choice(foreign)] = rng.choice(values) if values else 1
    return wrong


def slipped_call(
    kind: str, tool: str, arguments: dict[str, Any], tools: list[dict[str, Any]], rng: random.Random
) -> tuple[str, dict[str, Any]] | None:
    """A call of ``kind`` in place of ``tool(**arguments)`` that ``tools`` (OpenAI tool specs, the
    episode's) make certain to be refused; None where there is none (a name with no near miss, a tool
    without required arguments whose schema allows extra keys)."""
    functions = {spec["function"]["name"]: spec["function"] for spec in tools}
    if kind == "unknown_tool":
        names = _near_names(tool, set(functions))
        return (rng.choice(names), dict(arguments)) if names else None
    schema = (functions.get(tool) or {}).get("parameters") or {}
    own = set(schema.get("properties", {}))
    foreign = sorted(
        {p for f in functions.values() for p in (f.get("parameters") or {}).get("properties", {})} - own
    )
    wrong = _wrong_arguments(arguments, schema, foreign, rng)
    return None if wrong is None else (tool, wrong)
