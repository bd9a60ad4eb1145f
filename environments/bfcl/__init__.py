"""BFCL v4 multi-turn (``bfcl-eval``, fetched on demand) as the arena environment ``bfcl/multi_turn``."""

from __future__ import annotations

from environments.bfcl.environment import NAME, build
from environments.bfcl.package import VERSION, BfclMissing, fetch, is_fetched, package_root
from environments.registry import UnknownEnvironment, register_namespace
from environments.sdk.environment import Environment


def load(name: str) -> Environment:
    """The registry's loader for the ``bfcl`` namespace."""
    if name != NAME:
        raise UnknownEnvironment(f"unknown BFCL environment {name!r}; the only one is {NAME!r}")
    return build()


def names() -> list[str]:
    """``bfcl/multi_turn`` once the package is fetched (listing never downloads)."""
    return [NAME] if is_fetched() else []


register_namespace("bfcl", load, names)

__all__ = ["NAME", "VERSION", "BfclMissing", "build", "fetch", "is_fetched", "load", "names", "package_root"]
