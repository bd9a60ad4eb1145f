"""Running a generated Python program against one episode state, inside the environment server.

LLM-written solution programs are untrusted code, so they run only here: in the server process (a local
process under rlimits, or a container with no network), never in the arena's process. The program gets
one object, ``tools``, whose ``call(name, **arguments)`` runs a tool on the session's state (each call its
own transaction, exactly as an agent's call) and returns its JSON result or raises ``ToolCallError``.

The restricted builtins and module whitelist are guard rails against accidents (a stray ``open``), not the
security boundary: the boundary is the server process or container. A wall-clock alarm stops a program
that runs too long (including a loop that makes no tool calls), and a call budget stops runaway loops.
"""

from __future__ import annotations

import builtins
import collections
import datetime
import decimal
import functools
import itertools
import json
import math
import re
import signal
import statistics
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from environments.sdk.environment import Environment
from environments.sdk.execution import execute_tool
from environments.sdk.state import EpisodeState

MODULES = {
    m.__name__: m for m in (collections, datetime, decimal, functools, itertools, json, math, re, statistics)
}
_SAFE_BUILTINS = (
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "Exception",
    "KeyError",
    "IndexError",
    "ValueError",
    "TypeError",
    "LookupError",
    "ZeroDivisionError",
    "StopIteration",
    "ArithmeticError",
    "RuntimeError",
    "AssertionError",
    "NotImplementedError",
    "True",
    "False",
    "None",
)


class ToolCallError(Exception):
    """A tool answered with an error result: ``code`` (e.g. NOT_FOUND) and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ProgramLimit(BaseException):
    """The program ran past its time or tool-call budget (a ``BaseException``: neither the program's
    ``except Exception`` nor a tool's error handling can swallow it; an interrupted tool call rolls back)."""


@dataclass
class ProgramRun:
    """What a program did: its return value or the error (with a traceback), and every tool call."""

    ok: bool
    value: Any = None
    error: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "value": self.value, "error": self.error, "calls": self.calls}


class _Tools:
    """The ``tools`` object a program receives."""

    def __init__(self, env: Environment, state: EpisodeState, max_calls: int) -> None:
        self._env = env
        self._state = state
        self._max_calls = max_calls
        self.calls: list[dict[str, Any]] = []

    def call(self, name: str, **arguments: Any) -> Any:
        """Run tool ``name`` with keyword arguments; its JSON result, or ``ToolCallError``."""
        if len(self.calls) >= self._max_calls:
            raise ProgramLimit(f"more than {self._max_calls} tool calls")
        self.calls.append({"tool": name, "arguments": arguments})
        outcome = execute_tool(self._env, self._state, name, arguments)
        if not outcome.ok:
            raise ToolCallError(outcome.value["code"], outcome.value["message"])
        return outcome.value


def _import(name: str, *args: Any, **kwargs: Any) -> Any:
    if name in MODULES:
        return MODULES[name]
    raise ImportError(f"module {name!r} is not available to programs (allowed: {', '.join(sorted(MODULES))})")


def _namespace(tools: _Tools) -> dict[str, Any]:
    safe = {name: getattr(builtins, name) for name in _SAFE_BUILTINS}
    safe["__import__"] = _import
    safe["__build_class__"] = builtins.__build_class__
    return {
        "__builtins__": safe,
        "__name__": "program",
        "tools": tools,
        "ToolCallError": ToolCallError,
        **MODULES,
    }


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``ProgramLimit`` in the running program after ``seconds`` (main thread only)."""

    def expired(_signum: int, _frame: Any) -> None:
        raise ProgramLimit(f"ran longer than {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_program(
    env: Environment,
    state: EpisodeState,
    source: str,
    *,
    entry: str = "solve",
    timeout_s: float = 5.0,
    max_calls: int = 500,
) -> ProgramRun:
    """Execute ``source`` and call ``entry(tools)``; never raises for anything the program does."""
    tools = _Tools(env, state, max_calls)
    namespace = _namespace(tools)
    try:
        code = compile(source, "<program>", "exec")
        with _deadline(timeout_s):
            exec(code, namespace)  # untrusted by design: see the module docstring
            function = namespace.get(entry)
            if not callable(function):
                return ProgramRun(False, error=f"the program defines no function {entry}(tools)")
            value = function(tools)
    except (Exception, ProgramLimit) as exc:  # the program's own failure, reported to whoever asked
        return ProgramRun(False, error=_trace(exc), calls=tools.calls)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return ProgramRun(False, error=f"the result is not JSON: {exc}", calls=tools.calls)
    return ProgramRun(True, value=value, calls=tools.calls)


def _trace(exc: BaseException) -> str:
    """The traceback lines that point into the program (not into this module), then the error."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<program>"]
    where = "".join(f"  line {f.lineno}, in {f.name}\n" for f in frames)
    return f"{where}{type(exc).__name__}: {exc}"
