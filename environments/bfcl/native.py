"""BFCL run natively, as a baseline: ``python -m environments.bfcl.native`` (a child process; the
package's code never runs in the arena's process). For every entry: whether BFCL's checker passes its own
ground truth, and the time of each ground-truth call made directly on the backend objects in-process.
Prints one JSON object."""

from __future__ import annotations

import json
import time

from environments.bfcl import backends, data


def main() -> None:
    passed: dict[str, bool] = {}
    call_ms: list[float] = []
    for category in data.CATEGORIES:
        for found in data.entries(category):
            verdict = backends.check(found, [[turn] if turn else [] for turn in found.ground_truth])
            passed[found.id] = bool(verdict["valid"])
            instances = backends.instantiate(found)
            owner = {doc.name: doc.backend for doc in data.function_docs().values()}
            for turn in found.ground_truth:
                for text in turn:
                    name, arguments = data.parse_call(text)
                    started = time.perf_counter()
                    backends.execute(instances[owner[name]], name, arguments)
                    call_ms.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"passed": passed, "call_ms": call_ms}))


if __name__ == "__main__":
    main()
