"""BFCL's backend classes and checker, imported from the unpacked package.

Third-party code: only the environment server process imports this module (its tools call it), never the
arena's process. The package's modules are loaded by their own names (``bfcl_eval....``) from the
unpacked folder put first on ``sys.path``; only the multi-turn modules are imported, not the package's
heavy entry points.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib
import json
import sys
import threading
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from environments.bfcl.data import BACKEND_DOCS, Entry, checker_entry
from environments.bfcl.package import require

_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval"
_lock = threading.Lock()


def _module(name: str) -> ModuleType:
    root = str(require())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(name)


def backend_class(name: str) -> type:
    """A backend class by BFCL's name (``GorillaFileSystem``...), through BFCL's own module mapping."""
    if name not in BACKEND_DOCS:
        raise KeyError(f"unknown BFCL backend {name!r}")
    config = _module("bfcl_eval.constants.executable_backend_config")
    return getattr(_module(config.CLASS_FILE_PATH_MAPPING[name]), name)


def stateless(name: str) -> bool:
    return name in _module("bfcl_eval.constants.executable_backend_config").STATELESS_CLASSES


def instantiate(found: Entry) -> dict[str, Any]:
    """Fresh instances of the entry's backends, loaded the way BFCL's executor loads them."""
    instances: dict[str, Any] = {}
    for name in found.involved_classes:
        instance = backend_class(name)()
        if not stateless(name):
            config = copy.deepcopy(found.initial_config.get(name, {}))
            instance._load_scenario(config, long_context=found.long_context)
        instances[name] = instance
    return instances


def _canonical(value: Any, path: tuple[int, ...] = ()) -> Any:
    """JSON-able form of backend state: objects as their public attributes, a back-reference to an
    enclosing object (a directory's ``parent``) as ``{"$ref": class}``."""
    if isinstance(value, dict):
        return {str(k): _canonical(v, path) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_canonical(v, path) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "__dict__"):
        if id(value) in path:
            return {"$ref": type(value).__name__}
        inner = (*path, id(value))
        fields = {k: _canonical(v, inner) for k, v in vars(value).items() if not k.startswith("_")}
        return {"$class": type(value).__name__, **fields}
    return repr(value)


def public_state(instance: Any) -> dict[str, Any]:
    """The attributes BFCL's state checker compares (public ones), canonically as JSON data."""
    return {k: _canonical(v, (id(instance),)) for k, v in vars(instance).items() if not k.startswith("_")}


def state_json(instance: Any) -> str:
    return json.dumps(public_state(instance), sort_keys=True, separators=(",", ":"), default=repr)


def state_digest(states: dict[str, str]) -> str:
    """One hash over every backend's canonical state."""
    digest = hashlib.sha256()
    for name in sorted(states):
        digest.update(f"{name}\0{states[name]}\0".encode())
    return digest.hexdigest()


def execute(instance: Any, function: str, arguments: dict[str, Any]) -> Any:
    """Call one backend method the way BFCL's executor does: an exception becomes the text BFCL shows."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return getattr(instance, function)(**arguments)
    except Exception as exc:
        return f"Error during execution: {exc}"


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


@contextlib.contextmanager
def _checker_run() -> Iterator[str]:
    """A model name no other check uses: BFCL's executor caches instances in its module globals by
    model name and entry id; they are dropped afterwards."""
    utils = _module(f"{_PREFIX}.multi_turn_utils")
    model = f"arena_{uuid.uuid4().hex}"
    try:
        yield model
    finally:
        for key in [k for k in vars(utils) if k.startswith(model)]:
            delattr(utils, key)


def check(found: Entry, turns: list[list[list[str]]]) -> dict[str, Any]:
    """BFCL's own verdict for decoded calls (turn -> step -> call strings): the turn-count rule of its
    eval runner, then ``multi_turn_checker`` (state and response checks per turn), called from the
    package. (This release's runner does not apply ``multi_turn_irrelevance_checker``; neither do we.)"""
    checker = _module(f"{_PREFIX}.multi_turn_checker")
    criteria = {"turns": len(turns) == len(found.ground_truth)}
    if not criteria["turns"]:
        return {
            "valid": False,
            "criteria": criteria,
            "error_type": "multi_turn:force_terminated",
            "error_message": f"{len(turns)} turns played, {len(found.ground_truth)} expected",
        }
    # Steps without calls are dropped, as BFCL's runner drops empty decoded steps.
    decoded = [[step for step in turn if step] for turn in turns]
    with _lock, _checker_run() as model, contextlib.redirect_stdout(sys.stderr):
        result = checker.multi_turn_checker(
            decoded, copy.deepcopy(found.ground_truth), checker_entry(found), found.id, model
        )
    criteria["state_and_response"] = bool(result["valid"])
    out: dict[str, Any] = {"valid": all(criteria.values()), "criteria": criteria}
    if not out["valid"]:
        out["error_type"] = result.get("error_type", "")
        out["error_message"] = result.get("error_message", "")
    return out
