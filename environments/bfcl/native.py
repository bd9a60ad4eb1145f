"""BFCL run natively, as a baseline: ``python -m environments.bfcl.native [N]`` (a child process; the
package's code never runs in the arena's process). For every entry: whether BFCL's checker passes its own
ground truth, and the time of each ground-truth call made directly on the backend objects in-process and
through the environment's session store without MCP (``execute_tool``) with BFCL's code in-process; for
the first ``N`` entries of each category also with it in the session's sandboxed child, as the server
runs it. Trajectories given on stdin as
``{"key": {"entry_id", "turns": [[[{"name", "arguments"}]]]}}`` are checked too. Prints one JSON object."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from environments.bfcl import backends, data

_stores: dict[bool, Any] = {}


def _state_store_ms(found: data.Entry, *, sandboxed: bool = False) -> list[float]:
    """Each ground-truth call's time through ``execute_tool`` on a session: BFCL's code in this process
    (``sandboxed=False``) or in the session's sandboxed child (the server's way; its start not timed)."""
    from environments.bfcl.environment import SETUP_TOOL, build
    from environments.sdk.execution import execute_tool
    from environments.sdk.state import StateStore

    if sandboxed not in _stores:
        env = build(sandboxed=sandboxed)
        _stores[sandboxed] = (env, StateStore(env))
    env, store = _stores[sandboxed]
    state = store.create()
    try:
        execute_tool(env, state, SETUP_TOOL, {"entry_id": found.id})
        samples = []
        for turn in found.ground_truth:
            for text in turn:
                name, arguments = data.parse_call(text)
                started = time.perf_counter()
                execute_tool(env, state, name, arguments)
                samples.append((time.perf_counter() - started) * 1000)
        return samples
    finally:
        store.close(state.state_id)


def main() -> None:
    sandboxed_per_category = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    given: dict[str, Any] = json.loads(sys.stdin.read() or "{}") if not sys.stdin.isatty() else {}
    sandboxed_ms: list[float] = []
    passed: dict[str, bool] = {}
    call_ms: list[float] = []
    store_ms: list[float] = []
    owner = {doc.name: doc.backend for doc in data.function_docs().values()}
    for category in data.CATEGORIES:
        for index, found in enumerate(data.entries(category)):
            verdict = backends.check(found, [[turn] if turn else [] for turn in found.ground_truth])
            passed[found.id] = bool(verdict["valid"])
            instances = backends.instantiate(found)
            for turn in found.ground_truth:
                for text in turn:
                    name, arguments = data.parse_call(text)
                    started = time.perf_counter()
                    backends.execute(instances[owner[name]], name, arguments)
                    call_ms.append((time.perf_counter() - started) * 1000)
            store_ms += _state_store_ms(found)
            if index < sandboxed_per_category:
                sandboxed_ms += _state_store_ms(found, sandboxed=True)
    checked = {}
    for key, trajectory in given.items():
        turns = [
            [[backends.call_string(c["name"], c["arguments"]) for c in step] for step in turn]
            for turn in trajectory["turns"]
        ]
        checked[key] = bool(backends.check(data.entry(trajectory["entry_id"]), turns)["valid"])
    result = {"passed": passed, "call_ms": call_ms, "store_call_ms": store_ms, "checked": checked}
    print(json.dumps({**result, "sandboxed_store_call_ms": sandboxed_ms}))


if __name__ == "__main__":
    main()
