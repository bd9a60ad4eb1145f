"""BFCL's backend classes and checker, imported from the unpacked package into *this* process.

Third-party code: the environment server does not import this module (its tools run the same code,
``environments/bfcl/worker.py``, in a sandboxed child: ``environments.bfcl.sandboxed``); the native
baseline (``python -m environments.bfcl.native``, a child process of its own) and ``build(sandboxed=False)``
do. The package's modules are loaded by their own names (``bfcl_eval....``) from the unpacked folder put
first on ``sys.path``; only the multi-turn modules are imported, not the package's heavy entry points.
"""

from __future__ import annotations

import copy
import hashlib
import sys
from typing import Any

from environments.bfcl import worker
from environments.bfcl.data import BACKEND_DOCS, Entry, checker_entry
from environments.bfcl.package import require
from environments.bfcl.worker import execute, public_state, result_json, state_json

__all__ = [
    "backend_class",
    "call_string",
    "check",
    "execute",
    "instantiate",
    "public_state",
    "result_json",
    "state_digest",
    "state_json",
]


def _on_path() -> None:
    root = str(require())
    if root not in sys.path:
        sys.path.insert(0, root)


def backend_class(name: str) -> type:
    """A backend class by BFCL's name (``GorillaFileSystem``...), through BFCL's own module mapping."""
    if name not in BACKEND_DOCS:
        raise KeyError(f"unknown BFCL backend {name!r}")
    _on_path()
    return worker.backend_class(name)


def instantiate(found: Entry) -> dict[str, Any]:
    """Fresh instances of the entry's backends, loaded the way BFCL's executor loads them."""
    _on_path()
    return worker.instantiate(found.involved_classes, found.initial_config, found.long_context)


def state_digest(states: dict[str, str]) -> str:
    """One hash over every backend's canonical state."""
    digest = hashlib.sha256()
    for name in sorted(states):
        digest.update(f"{name}\0{states[name]}\0".encode())
    return digest.hexdigest()


def call_string(name: str, arguments: dict[str, Any]) -> str:
    """A call as BFCL's decoded form, ``name(key=value, ...)`` with Python literals."""
    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a function name")
    parts = []
    for key, value in arguments.items():
        if not str(key).isidentifier():
            raise ValueError(f"{key!r} is not an argument name")
        parts.append(f"{key}={value!r}")
    return f"{name}({', '.join(parts)})"


def turn_count(found: Entry, turns: list[list[list[str]]]) -> dict[str, Any] | None:
    """The turn-count rule of BFCL's eval runner: the verdict when it fails, else ``None``."""
    if len(turns) == len(found.ground_truth):
        return None
    return {
        "valid": False,
        "criteria": {"turns": False},
        "error_type": "multi_turn:force_terminated",
        "error_message": f"{len(turns)} turns played, {len(found.ground_truth)} expected",
    }


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The arena's verdict from ``multi_turn_checker``'s result (the turn count having passed)."""
    criteria = {"turns": True, "state_and_response": bool(result["valid"])}
    out: dict[str, Any] = {"valid": all(criteria.values()), "criteria": criteria}
    if not out["valid"]:
        out["error_type"] = result.get("error_type", "")
        out["error_message"] = result.get("error_message", "")
    return out


def checker_arguments(found: Entry, turns: list[list[list[str]]]) -> dict[str, Any]:
    """``multi_turn_checker``'s inputs: steps without calls dropped, as BFCL's runner drops empty
    decoded steps; copies of the ground truth and the entry (the checker may mutate them)."""
    return {
        "decoded": [[step for step in turn if step] for turn in turns],
        "ground_truth": copy.deepcopy(found.ground_truth),
        "entry": checker_entry(found),
        "entry_id": found.id,
    }


def check(found: Entry, turns: list[list[list[str]]]) -> dict[str, Any]:
    """BFCL's own verdict for decoded calls (turn -> step -> call strings), in this process: the
    turn-count rule of its eval runner, then ``multi_turn_checker`` (state and response checks per turn).
    (This release's runner does not apply ``multi_turn_irrelevance_checker``; neither do we.)"""
    failed = turn_count(found, turns)
    if failed is not None:
        return failed
    _on_path()
    return verdict(worker.run_checker(**checker_arguments(found, turns)))
