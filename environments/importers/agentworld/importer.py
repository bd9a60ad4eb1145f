"""``import_directory``: validate, copy and (optionally) replay every environment of a release."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from environments.sdk.environment import EnvironmentSpecError

from .errors import MalformedEnvironment
from .questions import ImportedQuestion
from .release import NAMESPACE, count_questions, discover, read_environment, read_index, release_folder
from .store import (
    build_environment,
    env_dir,
    imported_root,
    mark_runtime_writers,
    read_manifest,
    write_import,
    write_replay,
)

if TYPE_CHECKING:
    from .replay import EnvironmentReplay

# The replay's groups (kept here too: importing ``replay`` pulls in the serving client).
VERDICTS = ("reproduced", "not_reproducible: random", "not_reproducible: clock", "mismatch")

REPLAY_WORKERS = min(8, os.cpu_count() or 1)


@dataclass
class EnvironmentRow:
    """What happened to one environment of the release."""

    env_id: str
    name: str = ""
    status: str = "imported"
    reason: str | None = None
    tools: int = 0
    mutating_tools: int = 0
    files: int = 0
    collections: int = 0
    records: int = 0
    tables: int = 0
    rows: int = 0
    questions: int = 0
    replayed: int = 0
    reproduced: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def imported(self) -> bool:
        return self.status != "skipped"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ImportReport:
    """Per-environment rows and totals of one import."""

    source: Path
    destination: Path
    rows: list[EnvironmentRow] = field(default_factory=list)
    replayed_run: bool = False
    seconds: float = 0.0

    @property
    def imported(self) -> list[EnvironmentRow]:
        return [r for r in self.rows if r.imported]

    def _total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.imported)

    def to_json(self) -> dict[str, Any]:
        """Totals over imported environments, plus the skipped ones with their reasons."""
        skipped = [r for r in self.rows if not r.imported]
        return {
            "environments": len(self.imported),
            "environments_found": len(self.rows),
            "share_imported": round(len(self.imported) / len(self.rows), 3) if self.rows else 0.0,
            "tools": self._total("tools"),
            "mutating_tools": self._total("mutating_tools"),
            "records": self._total("records"),
            "questions": self._total("questions"),
            "replayed": self._total("replayed"),
            "reproduced": self._total("reproduced"),
            "verdicts": {v: sum(r.verdicts.get(v, 0) for r in self.imported) for v in VERDICTS},
            "replay_run": self.replayed_run,
            "skipped": [{"id": r.env_id, "reason": r.reason} for r in skipped],
            "questions_in_skipped": sum(r.questions for r in skipped),
            "seconds": round(self.seconds, 2),
            "destination": str(self.destination),
        }


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not enabled, transient=False) as progress:
        yield progress


def _row_from_manifest(directory: Path) -> EnvironmentRow:
    manifest = read_manifest(directory)
    counts = manifest["counts"]
    return EnvironmentRow(
        env_id=manifest["env_id"],
        name=manifest["name"],
        tools=counts["tools"],
        mutating_tools=sum(t["mutates"] for t in manifest["tools"]),
        files=counts["files"],
        collections=counts["collections"],
        records=counts["records"],
        tables=counts["tables"],
        rows=counts["rows"],
        questions=counts["questions"],
    )


def _import_one(
    src: Path, env_id: str, index: dict[str, dict[str, str]], dest: Path
) -> tuple[EnvironmentRow, tuple[ImportedQuestion, ...]]:
    """Validate and copy one environment; returns its row and the released questions."""
    try:
        released = read_environment(src, env_id, index.get(env_id))
        directory = write_import(released, src, dest)
        build_environment(directory).validate()
    except (MalformedEnvironment, EnvironmentSpecError, OSError) as exc:
        reason = str(exc)
    except Exception as exc:  # one bad environment never aborts the others
        reason = f"{type(exc).__name__}: {exc}"
    else:
        return _row_from_manifest(directory), released.questions
    return EnvironmentRow(env_id, status="skipped", reason=reason, questions=count_questions(src, env_id)), ()
    return _row_from_manifest(directory), released.questions


def _apply_replay(row: EnvironmentRow, directory: Path, replay: EnvironmentReplay) -> None:
    write_replay(directory, replay.to_json())
    mark_runtime_writers(directory, replay.writers)
    row.mutating_tools = sum(t["mutates"] for t in read_manifest(directory)["tools"])
    row.replayed, row.reproduced = replay.replayed, replay.reproduced
    row.verdicts = {v: sum(q.verdict == v for q in replay.questions) for v in VERDICTS}
    row.errors = [f"question {q.index}: {q.error}" for q in replay.questions if q.error]
    row.status = "replayed"


def _replay_pending(
    pending: list[tuple[EnvironmentRow, tuple[ImportedQuestion, ...]]], dest: Path, bars: Progress
) -> None:
    """Replay environments in parallel, one server process each."""
    # Imported here: the replay drives servers through the control-plane client, which the servers
    # themselves (and the image they run in) never need when they load this package's namespace.
    from .replay import replay_environment

    task = bars.add_task("replaying", total=len(pending))
    with ThreadPoolExecutor(max_workers=REPLAY_WORKERS) as pool:
        futures = {
            pool.submit(replay_environment, f"{NAMESPACE}/{row.env_id}", questions, dest): row
            for row, questions in pending
        }
        for future in as_completed(futures):
            row = futures[future]
            _apply_replay(row, env_dir(row.env_id, dest), future.result())
            bars.advance(task)


def import_directory(
    src: Path, dest_root: Path | None = None, *, replay: bool = True, progress: bool = True
) -> ImportReport:
    """Import every environment found in ``src`` (laid out like Agent-World's ``environment_mix/``,
    or the release root holding that folder).

    Each one is validated and copied to ``dest_root/agentworld/<id>/`` (default: the imported root,
    ``$ARENA_HOME/imported``); a malformed one is skipped with its reason. With ``replay``, each
    question's verified tool chain is run in a fresh session of the environment served in a child
    process, and compared with the reference answer (see ``answers``).
    """
    started = time.perf_counter()
    src = release_folder(Path(src))
    dest = Path(dest_root) if dest_root is not None else imported_root()
    report = ImportReport(src, dest, replayed_run=replay)
    index = read_index(src)
    ids = discover(src)
    pending: list[tuple[EnvironmentRow, tuple[ImportedQuestion, ...]]] = []
    with _progress(progress) as bars:
        task = bars.add_task("importing", total=len(ids))
        for env_id in ids:
            row, questions = _import_one(src, env_id, index, dest)
            report.rows.append(row)
            if row.imported and questions:
                pending.append((row, questions))
            bars.advance(task)
        if replay:
            _replay_pending(pending, dest, bars)
    report.seconds = time.perf_counter() - started
    return report
