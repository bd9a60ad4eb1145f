"""BFCL's backends and checker driven from inside the OS sandbox (and, as a baseline, in-process).

Standard library only, besides the unpacked ``bfcl_eval`` package and ``mpmath`` on ``sys.path``: the
sandbox child (``environments.sandbox.worker``) runs this file's source, and ``handle`` answers the
environment server's requests. A session's backend instances travel as pickles: the server stores them
in the session's rows (the truth for hash, diff, snapshots and reset) and never unpickles them; only
this code does, inside the sandbox.

Requests: ``{"op": "load", "classes", "config", "long_context"}`` -> ``{backend: {"state", "blob"}}``;
``{"op": "call", "blob", "function", "arguments"}`` -> ``{"result"}`` plus ``"state"`` and ``"blob"``
when the instance changed; ``{"op": "check", "decoded", "ground_truth", "entry", "entry_id"}`` ->
BFCL's ``multi_turn_checker`` result. Results are JSON text (``"result"``), so NaN and the like pass.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import datetime
import decimal
import enum
import importlib
import json
import pickle
import sys
import threading
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

CONFIG_MODULE = "bfcl_eval.constants.executable_backend_config"
CHECKER_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval"
BACKEND_MODULES = tuple(
    f"{CHECKER_PREFIX}.func_source_code.{name}"
    for name in (
        "gorilla_file_system",
        "math_api",
        "message_api",
        "posting_api",
        "ticket_api",
        "trading_bot",
        "travel_booking",
        "vehicle_control",
    )
)
"""The multi-turn backends' modules (imported by the sandbox child before it drops privileges)."""
STDLIB = ("base64", "contextlib", "copy", "dataclasses", "datetime", "decimal", "enum", "importlib")
MODULES = (
    *STDLIB,
    *("json", "pickle", "threading", "uuid"),
    CONFIG_MODULE,
    *BACKEND_MODULES,
    f"{CHECKER_PREFIX}.multi_turn_checker",
)
"""Imported by the child before it drops privileges: this file's own imports too (``auto`` mode's plain
process, once uid nobody, may not read a Python install under ``/root``)."""
_lock = threading.Lock()


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def backend_class(name: str) -> type:
    """A backend class by BFCL's name (``GorillaFileSystem``...), through BFCL's own module mapping."""
    mapping = _module(CONFIG_MODULE).CLASS_FILE_PATH_MAPPING
    if name not in mapping:
        raise KeyError(f"unknown BFCL backend {name!r}")
    return getattr(_module(mapping[name]), name)


def stateless(name: str) -> bool:
    return name in _module(CONFIG_MODULE).STATELESS_CLASSES


def instantiate(classes: list[str], config: dict[str, Any], long_context: bool) -> dict[str, Any]:
    """Fresh instances of the backends, loaded the way BFCL's executor loads them."""
    instances: dict[str, Any] = {}
    for name in classes:
        instance = backend_class(name)()
        if not stateless(name):
            instance._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
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


def execute(instance: Any, function: str, arguments: dict[str, Any]) -> Any:
    """Call one backend method the way BFCL's executor does: an exception becomes the text BFCL shows."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return getattr(instance, function)(**arguments)
    except Exception as exc:
        return f"Error during execution: {exc}"


def _plain(value: Any) -> Any:
    """JSON data for a backend's return value, as the server's ``to_jsonable`` (pydantic) makes it;
    ``TypeError`` for anything else (the caller then returns the value's ``str``, as the server did)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, bytes):
        return value.decode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    raise TypeError(f"{type(value).__name__} is not JSON data")


def result_json(value: Any) -> str:
    try:
        return json.dumps(_plain(value))
    except (TypeError, ValueError, RecursionError, UnicodeDecodeError):
        return json.dumps(str(value))


@contextlib.contextmanager
def _checker_run() -> Iterator[str]:
    """A model name no other check uses: BFCL's executor caches instances in its module globals by
    model name and entry id; they are dropped afterwards."""
    utils = _module(f"{CHECKER_PREFIX}.multi_turn_utils")
    model = f"arena_{uuid.uuid4().hex}"
    try:
        yield model
    finally:
        for key in [k for k in vars(utils) if k.startswith(model)]:
            delattr(utils, key)


def run_checker(
    decoded: list[list[list[str]]], ground_truth: list[list[str]], entry: dict[str, Any], entry_id: str
) -> dict[str, Any]:
    """BFCL's ``multi_turn_checker`` on decoded calls (turn -> step -> call strings)."""
    checker = _module(f"{CHECKER_PREFIX}.multi_turn_checker")
    with _lock, _checker_run() as model, contextlib.redirect_stdout(sys.stderr):
        result = checker.multi_turn_checker(decoded, ground_truth, entry, entry_id, model)
    return {
        "valid": bool(result["valid"]),
        "error_type": str(result.get("error_type", "")),
        "error_message": str(result.get("error_message", "")),
    }


def _pack(instance: Any) -> str:
    return base64.b64encode(pickle.dumps(instance)).decode()


def handle(request: dict[str, Any]) -> Any:
    """One request of the environment server (see the module docstring)."""
    op = request.get("op")
    if op == "call":
        blob = base64.b64decode(request["blob"])
        instance = pickle.loads(blob)
        result = execute(instance, str(request["function"]), dict(request["arguments"]))
        answer = {"result": result_json(result)}
        after = pickle.dumps(instance)
        if after != blob:
            answer.update(blob=base64.b64encode(after).decode(), state=state_json(instance))
        return answer
    if op == "load":
        instances = instantiate(
            list(request["classes"]), dict(request["config"]), bool(request["long_context"])
        )
        return {name: {"state": state_json(i), "blob": _pack(i)} for name, i in instances.items()}
    if op == "check":
        return run_checker(
            request["decoded"], request["ground_truth"], request["entry"], str(request["entry_id"])
        )
    raise ValueError(f"unknown request {op!r}")
