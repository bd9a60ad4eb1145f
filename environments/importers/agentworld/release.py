"""Reading and validating Agent-World's released environments (``environment_mix/`` layout).

Validation only parses: JSON documents, JSON Schemas, and the implementations' Python source
(``ast.parse``); it never compiles to bytecode nor executes released code.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jsonschema import SchemaError

from environments.sdk.tools import TOOL_NAME_PATTERN

from .errors import MalformedEnvironment
from .questions import ImportedQuestion, parse_questions
from .schemas import drop_contradicted_patterns, normalise_schema, safe_validator
from .state import StatePlan
from .tools import static_write_reason

CHECKPOINT_SUFFIX = "_step4_checkpoint.json"
QUESTIONS_DIR = "questions"
INDEX_FILE = "index.csv"
NAMESPACE = "agentworld"
ENV_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
RELEASE_DIR = "environment_mix"
MAX_JSON_DEPTH = 64


@dataclass(frozen=True)
class ReleasedTool:
    """One tool of the release; ``writes`` is the static scan's reason when it looks like it writes files."""

    name: str
    description: str
    parameters: dict[str, Any]
    implementation: str
    writes: str | None
    schema_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReleasedEnvironment:
    """A validated environment of the release, with everything the import copies."""

    env_id: str
    name: str
    category: str
    theme: str
    description: str
    files: dict[str, bytes]
    declared_files: tuple[str, ...]
    tools: tuple[ReleasedTool, ...]
    questions: tuple[ImportedQuestion, ...]
    plan: StatePlan

    @property
    def arena_name(self) -> str:
        return f"{NAMESPACE}/{self.env_id}"

    def declared_collections(self) -> dict[str, int]:
        """Declared JSON files and their top-level entry counts (the release's collections/records)."""
        counts: dict[str, int] = {}
        for path in self.declared_files:
            if path.endswith(".json") and path in self.files:
                value = json.loads(self.files[path])
                counts[path] = len(value) if isinstance(value, list | dict) else 1
        return counts


def release_folder(src: Path) -> Path:
    """The folder holding the environments: ``src`` itself, or ``src/environment_mix`` when ``src`` is
    the release root."""
    inner = src / RELEASE_DIR
    return inner if inner.is_dir() and not inner.is_symlink() else src


def discover(src: Path) -> list[str]:
    """Ids of every environment-like entry: an ``<id>/`` directory or an ``<id>_step4_checkpoint.json``."""
    ids = {
        p.name
        for p in src.iterdir()
        if p.is_dir() and p.name not in (QUESTIONS_DIR, RELEASE_DIR) and not p.name.startswith(".")
    }
    ids |= {p.name[: -len(CHECKPOINT_SUFFIX)] for p in src.glob(f"*{CHECKPOINT_SUFFIX}")}
    return sorted(ids)


def read_index(src: Path) -> dict[str, dict[str, str]]:
    """Rows of ``index.csv`` by ``env_id`` (empty when the release has none)."""
    path = src / INDEX_FILE
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["env_id"]: row for row in csv.DictReader(handle) if row.get("env_id")}


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of arrays/objects in a JSON text (strings skipped), without parsing it."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads_bounded(data: bytes | str, name: str) -> Any:
    """``json.loads`` that refuses documents nested deeper than ``MAX_JSON_DEPTH``."""
    if json_depth(data) > MAX_JSON_DEPTH:
        raise MalformedEnvironment(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedEnvironment(f"{name} is not valid JSON: {exc}") from None


def _regular(path: Path) -> Path:
    if path.is_symlink():
        raise MalformedEnvironment(f"{path.name} is a symbolic link (not followed)")
    return path


def _load_json(path: Path) -> Any:
    return loads_bounded(_regular(path).read_bytes(), path.name)


def read_files(directory: Path) -> dict[str, bytes]:
    """Every regular, non-hidden file under ``directory``, by relative POSIX path. Symbolic links
    (to files or folders) are neither followed nor read."""
    found: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(directory, followlinks=False):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (base / d).is_symlink())
        for name in sorted(names):
            path = base / name
            if not name.startswith(".") and not path.is_symlink() and path.is_file():
                found[path.relative_to(directory).as_posix()] = path.read_bytes()
    return dict(sorted(found.items()))


def _declared_files(checkpoint: Mapping[str, Any]) -> tuple[str, ...]:
    """The files the release describes as its database (``files_summary``, else ``file_list``).

    Files outside that list (request/audit logs written while the questions were generated) are
    still imported -- the reference answers were produced with them present.
    """
    summary = ((checkpoint.get("data") or {}).get("DatabaseAgent") or {}).get("files_summary")
    if isinstance(summary, dict) and summary:
        return tuple(str(name) for name in summary)
    base = str(checkpoint.get("local_files_dir") or "").rstrip("/") + "/"
    listed = checkpoint.get("file_list") or []
    return tuple(str(f)[len(base) :] if str(f).startswith(base) else Path(str(f)).name for f in listed)


def _check_tool(entry: Any, seen: set[str]) -> ReleasedTool:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise MalformedEnvironment("a tool schema has no name")
    name = entry["name"]
    if not TOOL_NAME_PATTERN.match(name) or name in seen:
        raise MalformedEnvironment(f"tool name {name!r} is invalid or duplicated")
    parameters = entry.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise MalformedEnvironment(f"tool {name!r}: parameters must be an object JSON Schema")
    parameters, changes = normalise_schema(parameters)
    if parameters.get("type", "object") != "object":
        raise MalformedEnvironment(f"tool {name!r}: parameters must be an object JSON Schema")
    try:
        safe_validator(parameters)
    except SchemaError as exc:
        raise MalformedEnvironment(
            f"tool {name!r}: parameters are not valid JSON Schema: {exc.message}"
        ) from None
    source = entry.get("implementation")
    if not isinstance(source, str):
        raise MalformedEnvironment(f"tool {name!r} has no implementation")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise MalformedEnvironment(
            f"tool {name!r}: implementation does not compile: {exc.msg} (line {exc.lineno})"
        ) from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
        raise MalformedEnvironment(f"tool {name!r}: implementation defines no function {name!r}")
    return ReleasedTool(
        name,
        str(entry.get("description") or name),
        parameters,
        source,
        static_write_reason(tree),
        tuple(changes),
    )


def _check_tools(checkpoint: Mapping[str, Any]) -> tuple[ReleasedTool, ...]:
    schemas = ((checkpoint.get("data") or {}).get("ToolDesignAgent") or {}).get("tool_schemas")
    if not isinstance(schemas, list) or not schemas:
        raise MalformedEnvironment("checkpoint has no data.ToolDesignAgent.tool_schemas")
    seen: set[str] = set()
    tools = []
    for entry in schemas:
        tool = _check_tool(entry, seen)
        seen.add(tool.name)
        tools.append(tool)
    return tuple(tools)


def count_questions(src: Path, env_id: str) -> int:
    """How many tasks ``questions/<id>.json`` lists (0 when it is absent or unreadable): the report
    counts the questions of skipped environments too."""
    try:
        raw = _load_json(src / QUESTIONS_DIR / f"{env_id}.json")
    except (MalformedEnvironment, OSError):
        return 0
    tasks = raw.get("tasks") if isinstance(raw, dict) else raw
    return len(tasks) if isinstance(tasks, list) else 0


def _drop_contradicted(
    tools: tuple[ReleasedTool, ...], questions: tuple[ImportedQuestion, ...]
) -> tuple[ReleasedTool, ...]:
    """Tools whose patterns reject arguments of the release's own verified chains, without them."""
    result = []
    for tool in tools:
        calls = [
            (f"question {q.index} step {i}", call.args)
            for q in questions
            for i, call in enumerate(q.verified_tool_chain)
            if call.tool == tool.name
        ]
        changes = drop_contradicted_patterns(tool.parameters, calls) if calls else []
        result.append(replace(tool, schema_changes=tool.schema_changes + tuple(changes)))
    return tuple(result)


def _readme_summary(files: Mapping[str, bytes]) -> str:
    """The first prose paragraph of README.md."""
    text = files.get("README.md", b"").decode("utf-8", errors="replace")
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [
            ln.strip() for ln in paragraph.strip().splitlines() if not ln.lstrip().startswith(("#", "-", "*"))
        ]
        if lines:
            return " ".join(lines)
    return ""


def _plan(files: Mapping[str, bytes]) -> StatePlan:
    for path, data in files.items():
        if path.endswith(".json") and json_depth(data) > MAX_JSON_DEPTH:
            raise MalformedEnvironment(f"data file {path} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return StatePlan.from_seed(files)
    except ValueError as exc:
        raise MalformedEnvironment(f"a data file is not valid JSON: {exc}") from None


def read_environment(
    src: Path, env_id: str, index_row: Mapping[str, str] | None = None
) -> ReleasedEnvironment:
    """Read and validate one environment; raises ``MalformedEnvironment`` with the reason."""
    if not ENV_ID_PATTERN.match(env_id):
        raise MalformedEnvironment(f"id {env_id!r} is not usable in an environment name")
    checkpoint_path = src / f"{env_id}{CHECKPOINT_SUFFIX}"
    data_dir = src / env_id
    if not checkpoint_path.is_file():
        raise MalformedEnvironment(f"missing checkpoint {checkpoint_path.name}")
    if not _regular(data_dir).is_dir():
        raise MalformedEnvironment(f"missing data directory {env_id}/")
    checkpoint = _load_json(checkpoint_path)
    if not isinstance(checkpoint, dict):
        raise MalformedEnvironment(f"{checkpoint_path.name} is not a JSON object")
    tools = _check_tools(checkpoint)
    files = read_files(data_dir)
    declared = _declared_files(checkpoint)
    missing = [path for path in declared if path not in files]
    if missing:
        raise MalformedEnvironment(
            f"the release lacks {len(missing)} of the {len(declared)} data files its checkpoint declares: "
            + ", ".join(missing)
        )
    plan = _plan(files)
    questions_path = src / QUESTIONS_DIR / f"{env_id}.json"
    raw_questions = _load_json(questions_path) if questions_path.is_file() else {"tasks": []}
    questions = tuple(parse_questions(f"{NAMESPACE}/{env_id}", raw_questions))
    tools = _drop_contradicted(tools, questions)
    metadata = checkpoint.get("metadata") or {}
    taxonomy = metadata.get("taxonomy") or {}
    row = index_row or {}
    name = row.get("name") or metadata.get("name") or env_id
    return ReleasedEnvironment(
        env_id=env_id,
        name=name,
        category=row.get("L1_name") or taxonomy.get("L1_name") or "uncategorised",
        theme=row.get("L3_name") or taxonomy.get("L3_name") or name,
        description=_readme_summary(files) or metadata.get("description") or name,
        files=files,
        declared_files=declared,
        tools=tools,
        questions=questions,
        plan=plan,
    )
