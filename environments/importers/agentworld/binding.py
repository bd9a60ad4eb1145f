"""Binding values that earlier replayed steps generated into the arguments of later steps.

A verified tool chain was recorded with the literals of its original run: a later step passes the
id an earlier step *generated* there (``crq_20260805...``), which the replay's earlier step
generated differently. Rule: a string argument of a later step is *foreign* when it is at least 8
characters, not a plain date/time, and occurs neither in the environment's seed files nor in the
task text; a foreign literal is replaced by a value of
an earlier successful step's output that has the same *shape* (same length, same punctuation, same
leading segment up to the first ``_``/``-``) and is not in the seed either, preferring an output
field of the same name as the argument, then the latest step. The same literal is always bound to
the same value within a question; each binding is recorded in ``replay.json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .answers import TIME_TOKEN, mask_time

_ALNUM = re.compile(r"[A-Za-z0-9]")
_LEAD = re.compile(r"^[A-Za-z0-9]+[_\-]")
MIN_LENGTH = 8


@dataclass(frozen=True)
class Binding:
    """One literal of the original run replaced by a value of this replay."""

    step: int
    argument: str
    original: str
    bound: str
    from_step: int
    path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "argument": self.argument,
            "original": self.original,
            "bound": self.bound,
            "from_step": self.from_step,
            "path": self.path,
        }


def shape(text: str) -> tuple[int, str, str]:
    """Length, punctuation skeleton and leading segment (``crq_``) of a generated-looking value."""
    lead = _LEAD.match(text)
    return len(text), _ALNUM.sub("x", text), lead.group() if lead else ""


def _leaves(value: Any, path: str = "$", key: str = "") -> Iterator[tuple[str, str, str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}", str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]", key)
    elif isinstance(value, str):
        yield path, key, value


def _key_score(argument: str, key: str) -> int:
    if argument == key:
        return 2
    return 1 if argument.endswith(key) or key.endswith(argument) else 0


class Binder:
    """Rewrites a question's later arguments as its steps produce outputs."""

    def __init__(self, known_text: str) -> None:
        self.known_text = known_text
        self.outputs: list[tuple[int, Any]] = []
        self.mapping: dict[str, tuple[str, int, str]] = {}
        self.bindings: list[Binding] = []

    def foreign(self, literal: str) -> bool:
        """Long enough, not a plain date/time, and found neither in the seed nor in the task."""
        return (
            len(literal) >= MIN_LENGTH and mask_time(literal) != TIME_TOKEN and literal not in self.known_text
        )

    def record(self, step: int, ok: bool, value: Any) -> None:
        if ok:
            self.outputs.append((step, value))

    def _candidate(self, argument: str, literal: str) -> tuple[str, int, str] | None:
        wanted = shape(literal)
        best: tuple[int, int, str, str] | None = None
        for step, value in self.outputs:
            for path, key, text in _leaves(value):
                if text == literal or shape(text) != wanted or not self.foreign(text):
                    continue
                rank = (_key_score(argument, key), step)
                if best is None or rank > best[:2]:
                    best = (*rank, text, path)
        return None if best is None else (best[2], best[1], best[3])

    def bind(self, step: int, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` with foreign literals bound; the bindings made are kept in ``bindings``."""
        return self._rewrite(step, arguments, "")

    def _rewrite(self, step: int, value: Any, key: str) -> Any:
        if isinstance(value, dict):
            return {k: self._rewrite(step, v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self._rewrite(step, v, key) for v in value]
        if not isinstance(value, str) or not self.foreign(value):
            return value
        found = self.mapping.get(value) or self._candidate(key, value)
        if found is None:
            return value
        self.mapping[value] = found
        bound, from_step, path = found
        self.bindings.append(Binding(step, key, value, bound, from_step, path))
        return bound
