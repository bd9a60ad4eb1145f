"""BFCL's third-party code in the OS sandbox: one persistent sandboxed child per session.

The child (``environments.sandbox.worker.Worker``: bubblewrap, uid nobody, no network, read-only
filesystem but a tmpfs, rlimits) mounts only the unpacked ``bfcl_eval`` package and ``mpmath``
read-only, imports the backend modules once, and runs ``environments/bfcl/worker.py``. Each tool call
sends the backend's pickled instance from the session's rows and gets the result and, when it changed,
the new pickle and canonical state back; this process never unpickles what the child returns. The
child is killed at each call's deadline, on reset and when the session closes; the next call starts a
fresh one (nothing is lost: the rows are the truth). Each server process keeps ``WARM`` children started
ahead, so a session's first call rarely waits for one; a child serves one session only.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from environments.bfcl import worker as bfcl_worker
from environments.bfcl.package import require
from environments.sandbox.worker import WarmWorkers, Worker, WorkerError, WorkerFailed
from environments.sdk.errors import ErrorCode, ToolError

RESOURCE = "bfcl"
CALL_TIMEOUT_S = 10.0
"""How long one backend call may run in the session's child."""
LOAD_TIMEOUT_S = 30.0
CHECK_TIMEOUT_S = 60.0
WARM = 2
"""Children started ahead of sessions in each server process (each serves one session, then dies)."""
PACKAGE_INSIDE = "/opt/bfcl"
LIBRARY_INSIDE = "/opt/pylib"


@functools.cache
def _source() -> str:
    return Path(bfcl_worker.__file__).read_text(encoding="utf-8")


def new_worker() -> Worker:
    """A (not yet started) sandboxed child for one session's backends."""
    root = require()
    readonly, plain_path = {str(root): PACKAGE_INSIDE}, [str(root)]
    spec = importlib.util.find_spec("mpmath")  # the math backend's one dependency (located, not imported)
    if spec is not None and spec.submodule_search_locations:
        library = Path(next(iter(spec.submodule_search_locations))).resolve()
        readonly[str(library)] = f"{LIBRARY_INSIDE}/{library.name}"
        plain_path.append(str(library.parent))
    return Worker(
        _source(),
        name="bfcl_worker",
        readonly=readonly,
        path=[PACKAGE_INSIDE, LIBRARY_INSIDE],
        plain_path=plain_path,
        preload=bfcl_worker.MODULES,
    )


_warm = WarmWorkers(WARM)


def session_worker(db: Session) -> Worker:
    """The child of the session ``db`` belongs to (closed with the session and on its reset)."""
    episode = db.info.get("episode")
    if episode is None:
        raise RuntimeError("BFCL tools run through execute_tool on an episode state")
    found = episode.resources.get(RESOURCE)
    if found is None:
        found = episode.resources[RESOURCE] = _warm.take(new_worker())
    return found


def _request(db: Session, message: dict[str, Any], timeout_s: float) -> Any:
    try:
        return session_worker(db).request(message, timeout_s)
    except WorkerFailed as exc:
        raise ToolError(f"the BFCL backend failed in its sandbox: {exc}", code=ErrorCode.INTERNAL) from None
    except WorkerError as exc:
        raise ToolError(f"the BFCL backend raised: {exc}", code=ErrorCode.INTERNAL) from None


def load(
    db: Session, classes: list[str], config: dict[str, Any], long_context: bool
) -> dict[str, tuple[str, bytes]]:
    """Fresh backends of an entry: ``{backend: (canonical state, pickle)}``."""
    message = {"op": "load", "classes": classes, "config": config, "long_context": long_context}
    loaded = _request(db, message, LOAD_TIMEOUT_S)
    return {name: (str(v["state"]), base64.b64decode(v["blob"])) for name, v in loaded.items()}


def call(
    db: Session, blob: bytes, function: str, arguments: dict[str, Any]
) -> tuple[Any, bytes | None, str | None]:
    """One backend method on the pickled instance: its result, and the new pickle and state if changed."""
    message = {
        "op": "call",
        "blob": base64.b64encode(blob).decode(),
        "function": function,
        "arguments": arguments,
    }
    answer = _request(db, message, CALL_TIMEOUT_S)
    result = json.loads(answer["result"])
    if "blob" not in answer:
        return result, None, None
    return result, base64.b64decode(answer["blob"]), str(answer["state"])


def check(
    db: Session,
    decoded: list[list[list[str]]],
    ground_truth: list[list[str]],
    entry: dict[str, Any],
    entry_id: str,
) -> dict[str, Any]:
    """BFCL's ``multi_turn_checker`` run in the session's child."""
    message = {
        "op": "check",
        "decoded": decoded,
        "ground_truth": ground_truth,
        "entry": entry,
        "entry_id": entry_id,
    }
    return dict(_request(db, message, CHECK_TIMEOUT_S))
