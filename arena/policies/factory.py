"""Building a policy from its validated settings (``conf/policy/*.yaml``)."""

from __future__ import annotations

from typing import Any

from arena.policies.base import Policy


def build_policy(settings: Any, seed: int = 0) -> Policy:
    """The policy ``settings.kind`` names: reference, random, openai or hf."""
    kind = settings.kind
    if kind == "reference":
        from arena.policies.scripted import ReferencePolicy

        return ReferencePolicy()
    if kind == "random":
        from arena.policies.scripted import RandomPolicy

        return RandomPolicy(calls=settings.calls, seed=seed)
    if kind == "openai":
        from arena.policies.openai_compat import OpenAIPolicy, PolicyConfig

        fields = settings.model_dump(exclude={"kind"})
        return OpenAIPolicy(PolicyConfig(**fields))
    if kind == "hf":
        from arena.policies.hf import HFPolicy

        return HFPolicy.from_settings(settings, seed=seed)
    raise ValueError(f"unknown policy kind {kind!r}; expected reference, random, openai or hf")
