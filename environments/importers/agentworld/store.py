"""Imported environments on disk, and turning one into an SDK ``Environment``.

Layout: ``<imported root>/agentworld/<id>/`` with ``manifest.json`` (metadata, state plan, tool
schemas and mutation flags), ``data/`` (the released files, unmodified), ``tools/<name>.py`` (the
released implementations, kept as text), ``questions.json`` and, after a replay, ``replay.json``.

Loading reads these files only: implementations are neither compiled nor executed here.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from environments.paths import arena_home
from environments.registry import UnknownEnvironment
from environments.sdk.environment import Environment

from .questions import ImportedQuestion
from .release import ENV_ID_PATTERN, NAMESPACE, ReleasedEnvironment, read_files
from .state import FileStateStore, StatePlan, decompose
from .tools import build_tool

FORMAT_VERSION = 1
IMPORTED_DIR_ENV = "ARENA_IMPORTED_DIR"
OBSERVE_WRITES_ENV = "ARENA_AGENTWORLD_OBSERVE_WRITES"
MANIFEST = "manifest.json"
QUESTIONS = "questions.json"
REPLAY = "replay.json"


def imported_root() -> Path:
    """``$ARENA_IMPORTED_DIR``, else ``$ARENA_HOME/imported`` (``~/.agent-arena/imported``)."""
    explicit = os.environ.get(IMPORTED_DIR_ENV)
    if explicit:
        return Path(explicit)
    return arena_home() / "imported"


def env_id_of(name: str) -> str:
    """``0061000`` for ``agentworld/0061000`` (a bare id is returned as is)."""
    return name.split("/", 1)[1] if name.startswith(f"{NAMESPACE}/") else name


def env_dir(name: str, root: Path | None = None) -> Path:
    """The folder of ``agentworld/<id>``; an id that is not a plain name segment (``..``, ``a/b``)
    is refused, so a name never reaches outside the imported root."""
    env_id = env_id_of(name)
    if not ENV_ID_PATTERN.match(env_id):
        raise UnknownEnvironment(f"invalid imported environment name {name!r}")
    return (root or imported_root()) / NAMESPACE / env_id


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        raise UnknownEnvironment(
            f"no imported environment at {directory} (run `arena env import agentworld DIR`)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def _version(released: ReleasedEnvironment) -> str:
    """Changes whenever data, tools or the state format change (it keys the seed cache)."""
    digest = hashlib.sha256(f"format-{FORMAT_VERSION}".encode())
    for path, data in sorted(released.files.items()):
        digest.update(path.encode() + b"\0" + data + b"\0")
    for tool in released.tools:
        digest.update(json.dumps([tool.name, tool.parameters, tool.implementation], sort_keys=True).encode())
    return f"{FORMAT_VERSION}.{digest.hexdigest()[:12]}"


def seed_row_count(released: ReleasedEnvironment) -> int:
    """Rows the seed puts into the collection tables."""
    return sum(
        len(rows)
        for path, data in released.files.items()
        for rows in decompose(released.plan.plan_for(path), data)[1].values()
    )


def _manifest(released: ReleasedEnvironment, source: Path) -> dict[str, Any]:
    collections = released.declared_collections()
    return {
        "format": FORMAT_VERSION,
        "env_id": released.env_id,
        "name": released.name,
        "category": released.category,
        "theme": released.theme,
        "description": released.description,
        "version": _version(released),
        "source": str(source),
        "declared_files": list(released.declared_files),
        "plan": released.plan.to_json(),
        "tools": [
            {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "mutates": t.writes is not None,
                "mutates_reason": f"static scan: {t.writes}" if t.writes else None,
                "schema_changes": list(t.schema_changes),
            }
            for t in released.tools
        ],
        "counts": {
            "tools": len(released.tools),
            "files": len(released.files),
            "collections": len(collections),
            "records": sum(collections.values()),
            "tables": len(released.plan.table_names()),
            "rows": seed_row_count(released),
            "questions": len(released.questions),
        },
    }


def write_import(released: ReleasedEnvironment, source: Path, root: Path) -> Path:
    """Write one environment under ``root`` (replacing an earlier import atomically); returns its dir."""
    target = env_dir(released.env_id, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{released.env_id}-", dir=target.parent))
    try:
        for path, data in released.files.items():
            (staging / "data" / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / "data" / path).write_bytes(data)
        (staging / "tools").mkdir()
        for tool in released.tools:
            (staging / "tools" / f"{tool.name}.py").write_text(tool.implementation, encoding="utf-8")
        _write_json(staging / QUESTIONS, [q.to_json() for q in released.questions])
        _write_json(staging / MANIFEST, _manifest(released, source))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def mark_runtime_writers(directory: Path, writers: Iterable[str]) -> list[str]:
    """Flag tools seen writing during replay as mutating; returns the ones that were not flagged yet."""
    manifest = read_manifest(directory)
    observed = set(writers)
    newly = []
    for tool in manifest["tools"]:
        if tool["name"] in observed and not tool["mutates"]:
            tool.update(mutates=True, mutates_reason="observed writing files during replay")
            newly.append(tool["name"])
    if newly:
        _write_json(directory / MANIFEST, manifest)
    return newly


def write_replay(directory: Path, replay: dict[str, Any]) -> None:
    _write_json(directory / REPLAY, replay)


def build_environment(directory: Path) -> Environment:
    """The ``Environment`` of an imported directory (reads files only; runs no released code)."""
    manifest = read_manifest(directory)
    plan = StatePlan.from_json(manifest["plan"])
    metadata = plan.metadata()
    files = FileStateStore(plan, metadata)
    env = Environment(
        f"{NAMESPACE}/{manifest['env_id']}",
        theme=manifest["theme"],
        category=manifest["category"],
        description=manifest["description"],
        base=metadata,
        version=manifest["version"],
    )
    data_dir = directory / "data"

    @env.seeder
    def seed(db: Session, rng: random.Random) -> None:
        files.seed(db, read_files(data_dir))

    observe = os.environ.get(OBSERVE_WRITES_ENV) == "1"
    for entry in manifest["tools"]:
        source = (directory / "tools" / f"{entry['name']}.py").read_text(encoding="utf-8")
        env.add_tool(build_tool(env.name, entry, source, files, mutates=observe or entry["mutates"]))
    return env


def load_imported(name: str, root: Path | None = None) -> Environment:
    """``agentworld/<id>`` as an ``Environment`` (the registry's loader for the namespace)."""
    return build_environment(env_dir(name, root))


def list_imported(root: Path | None = None) -> list[str]:
    """Names of every imported environment (the registry's lister for the namespace)."""
    base = (root or imported_root()) / NAMESPACE
    if not base.is_dir():
        return []
    return sorted(f"{NAMESPACE}/{p.name}" for p in base.iterdir() if (p / MANIFEST).is_file())


def load_replay(env_id: str, root: Path | None = None) -> dict[int, dict[str, Any]]:
    """The replay verdict of each question of an imported environment, by question index (empty when
    the import ran without replay)."""
    path = env_dir(env_id, root) / REPLAY
    if not path.is_file():
        return {}
    return {q["index"]: q for q in json.loads(path.read_text(encoding="utf-8"))["questions"]}


def load_questions(env_id: str, root: Path | None = None) -> list[ImportedQuestion]:
    """The released questions kept with an imported environment (``0061000`` or ``agentworld/0061000``)."""
    directory = env_dir(env_id, root)
    read_manifest(directory)
    raw = json.loads((directory / QUESTIONS).read_text(encoding="utf-8"))
    return [ImportedQuestion.from_json(item) for item in raw]
