"""``arena env check``: validate an environment spec end to end."""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from environments.registry import load_environment, locate
from environments.sdk.digest import list_tables, state_hash
from environments.sdk.environment import Environment
from environments.sdk.execution import execute_tool
from environments.sdk.state import StateStore, build_seed


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class CheckReport:
    env_ref: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _structure(env: Environment) -> str:
    env.validate()
    return f"{len(env.metadata.tables)} tables, {len(env.tools)} tools"


def _seed_deterministic(env: Environment) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        hashes, rows = [], 0
        for name in ("a.sqlite", "b.sqlite"):
            build_seed(env, Path(tmp) / name)
            conn = sqlite3.connect(Path(tmp) / name)
            hashes.append(state_hash(conn))
            rows = sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in list_tables(conn))
            conn.close()
    if hashes[0] != hashes[1]:
        raise AssertionError("two seed builds differ: the seeder must use only the rng it is given")
    return f"two builds identical ({rows} rows, hash {hashes[0][:12]})"


def _tool_schemas(env: Environment) -> str:
    for spec in env.tools.values():
        try:
            jsonschema.Draft202012Validator.check_schema(spec.input_schema)
        except jsonschema.SchemaError as exc:
            raise AssertionError(f"tool {spec.name}: invalid JSON Schema: {exc.message}") from None
        if spec.input_schema.get("type") != "object":
            raise AssertionError(f"tool {spec.name}: input schema must be an object")
    return f"{len(env.tools)} input schemas are valid JSON Schema"


def _docstrings(env: Environment) -> str:
    undocumented = [spec.name for spec in env.tools.values() if not spec.description.strip()]
    if undocumented:
        raise AssertionError(f"tools without a description: {', '.join(undocumented)}")
    missing = [
        f"{spec.name}.{arg}"
        for spec in env.tools.values()
        for arg, prop in spec.input_schema.get("properties", {}).items()
        if not prop.get("description")
    ]
    return "every tool documented" + (
        f" (arguments without a description: {', '.join(missing)})" if missing else ""
    )


SAMPLE_ROWS = 20
CALLS_PER_TOOL = 6
_DEFAULTS: dict[str, list[Any]] = {
    "string": ["a"],
    "integer": [1, 0],
    "number": [1.0],
    "boolean": [True, False],
    "array": [[]],
    "object": [{}],
}


def _seed_values(store: StateStore) -> dict[str, list[Any]]:
    """Values seen in the seed, by column name; ``<table>_id`` also gets the ids of a table named like
    it (``vet_id`` <- ``vets.id``)."""
    values: dict[str, list[Any]] = {}
    for table, rows in store.sample(SAMPLE_ROWS).items():
        for row in rows:
            for column, value in row.items():
                if value is not None:
                    values.setdefault(column, []).append(value)
                if column == "id":
                    for alias in (f"{table}_id", f"{table.rstrip('s')}_id", f"{table.removesuffix('es')}_id"):
                        values.setdefault(alias, []).append(value)
    return values


def _schema_type(prop: dict[str, Any]) -> str:
    types = [p.get("type") for p in prop.get("anyOf", [prop])]
    return next((t for t in types if t and t != "null"), "string")


def _sample_arguments(schema: dict[str, Any], seen: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Up to ``CALLS_PER_TOOL`` argument sets: enum members, seed values of a same-named column, or
    plain defaults; required arguments always, optional ones in every other set."""
    props: dict[str, dict[str, Any]] = schema.get("properties", {})
    required = set(schema.get("required", []))
    pools = {}
    for name, prop in props.items():
        enum = next((p["enum"] for p in prop.get("anyOf", [prop]) if "enum" in p), None)
        pools[name] = enum or seen.get(name, [])[:CALLS_PER_TOOL] or _DEFAULTS.get(_schema_type(prop), ["a"])
    sets = []
    for i in range(CALLS_PER_TOOL):
        sets.append(
            {
                name: pool[i % len(pool)]
                for name, pool in pools.items()
                if name in required or (i % 2 == 1 and pool)
            }
        )
    unique = {json.dumps(s, sort_keys=True, default=str): s for s in sets}
    return list(unique.values())


def _reads_do_not_write(env: Environment) -> str:
    """Run every read-only tool on sample arguments; a write from one means it lacks ``mutates=True``."""
    store = StateStore(env)
    execution_log = logging.getLogger(execute_tool.__module__)
    level = execution_log.level
    execution_log.setLevel(logging.CRITICAL)  # a tool failing on a sample argument is expected here
    try:
        seen = _seed_values(store)
        state = store.create()
        calls = succeeded = 0
        writers: list[str] = []
        for spec in env.tools.values():
            if spec.mutates:
                continue
            for arguments in _sample_arguments(spec.input_schema, seen):
                outcome = execute_tool(env, state, spec.name, arguments)
                calls += 1
                succeeded += outcome.ok
                if not outcome.ok and "declared read-only but tried to write" in outcome.value["message"]:
                    writers.append(spec.name)
                    break
    finally:
        execution_log.setLevel(level)
        store.close_all()
    if writers:
        raise AssertionError(
            f"tool(s) {', '.join(writers)} wrote to the database but are declared read-only: "
            "decorate them with @env.tool(mutates=True)"
        )
    return f"{calls} sample calls of read-only tools ({succeeded} succeeded) wrote nothing"


def _test_files(env: Environment, source: Path | None) -> list[Path]:
    """A single-file environment ``x.py``: ``test_x.py`` beside it (optional). A package: ``test_*.py``
    in it or in its ``tests/`` folder (required)."""
    if source is not None and source.suffix == ".py":
        return [t for t in [source.parent / f"test_{source.stem}.py"] if t.is_file()]
    folder = source or env.source_dir
    if folder is None:
        raise AssertionError("the environment's source directory is unknown")
    tests = sorted(folder.glob("test_*.py")) + sorted(folder.glob("tests/test_*.py"))
    if not tests:
        raise AssertionError(f"no tests (test_*.py) in {folder}")
    return tests


def _tests(env: Environment, source: Path | None) -> str:
    tests = _test_files(env, source)
    if not tests and source is not None:
        return f"none (optional for a single-file environment: put them in test_{source.stem}.py beside it)"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, tests)]
    # Run from the project root: from the library directory, an environment named like a standard-library
    # module (e.g. `calendar`) would shadow it.
    root = Path(__file__).resolve().parents[1]
    env_vars = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env_vars)
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    if result.returncode != 0:
        raise AssertionError(f"tests failed: {summary}\n{result.stdout[-2000:]}{result.stderr[-1000:]}")
    return summary


CHECKS: list[tuple[str, Callable[[Environment], str]]] = [
    ("structure", _structure),
    ("seed is deterministic", _seed_deterministic),
    ("tool schemas", _tool_schemas),
    ("docstrings", _docstrings),
    ("read-only tools do not write", _reads_do_not_write),
]


def check_environment(ref: str, *, run_tests: bool = True) -> CheckReport:
    """Run every check, collecting results (a failing check does not stop the later ones)."""
    report = CheckReport(ref)
    try:
        env = load_environment(ref)
    except Exception as exc:
        report.checks.append(Check("loads", False, f"{type(exc).__name__}: {exc}"))
        return report
    report.checks.append(Check("loads", True, f"{env.name} v{env.info.version}"))
    source = locate(ref)
    own_tests: Callable[[Environment], str] = functools.partial(_tests, source=source)
    checks = CHECKS + ([("own tests", own_tests)] if run_tests and "/" not in env.name else [])
    for name, check in checks:
        try:
            report.checks.append(Check(name, True, check(env)))
        except Exception as exc:
            report.checks.append(Check(name, False, str(exc) or type(exc).__name__))
    return report
