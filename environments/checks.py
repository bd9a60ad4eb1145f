"""``arena env check``: validate an environment spec end to end."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from environments.registry import load_environment
from environments.sdk.digest import list_tables, state_hash
from environments.sdk.environment import Environment
from environments.sdk.state import build_seed


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


def _tests(env: Environment) -> str:
    if env.source_dir is None:
        raise AssertionError("the environment's source directory is unknown")
    tests = sorted(env.source_dir.glob("test_*.py")) + sorted(env.source_dir.glob("tests/test_*.py"))
    if not tests:
        raise AssertionError(f"no tests (test_*.py) in {env.source_dir}")
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
    checks = CHECKS + ([("own tests", _tests)] if run_tests and "/" not in env.name else [])
    for name, check in checks:
        try:
            report.checks.append(Check(name, True, check(env)))
        except Exception as exc:
            report.checks.append(Check(name, False, str(exc) or type(exc).__name__))
    return report
