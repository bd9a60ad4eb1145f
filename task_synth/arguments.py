"""Filling tool arguments from real data: enum members, or values seen in the sample and in outputs."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from task_synth.profile import EnvProfile, ParamProfile, ToolProfile

_COMPATIBLE: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
}
_PAGING = {"limit", "offset", "page", "page_size", "per_page", "max_results"}


def candidates(param: ParamProfile, profile: EnvProfile) -> list[Any]:
    """Values of the right type that ``param`` could take in this environment's data."""
    if param.enum:
        return list(param.enum)
    if param.type == "boolean":
        return [True, False]
    kinds = _COMPATIBLE.get(param.type)
    if kinds is None:
        return []
    pool = profile.values.get(param.name, [])
    return [v for v in pool if isinstance(v, kinds) and not (param.type != "boolean" and isinstance(v, bool))]


def fill_arguments(
    tool: ToolProfile,
    profile: EnvProfile,
    rng: random.Random,
    *,
    optional_share: float,
    fixed: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Arguments for ``tool``: ``fixed`` ones, then data-drawn required ones (None if one has no
    candidate), then each optional one with probability ``optional_share``. Paging stays default."""
    arguments = dict(fixed or {})
    for param in tool.params:
        if param.name in arguments or param.name in _PAGING:
            continue
        if not param.required and rng.random() >= optional_share:
            continue
        pool = candidates(param, profile)
        if not pool:
            if param.required:
                return None
            continue
        arguments[param.name] = rng.choice(pool)
    return arguments


def fillable_from_data(tool: ToolProfile, profile: EnvProfile) -> bool:
    return all(candidates(p, profile) for p in tool.params if p.required)


def page_size(tool: ToolProfile) -> dict[str, Any]:
    """The largest page a list tool allows, so an aggregate sees every item."""
    param = tool.param("limit")
    if param is None or param.maximum is None:
        return {}
    return {"limit": int(param.maximum)}
