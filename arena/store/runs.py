"""``RunStore``: evaluation runs, their episodes and steps.

Each episode is written in its own transaction as it finishes, so a killed run loses at most the episodes
in flight; re-running the same run id skips every scored episode and retries only infrastructure failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select

from arena.rollout.records import EpisodeRecord
from arena.store.db import Database
from arena.store.schema import EpisodeRow, RunRow, StepRow

_UNFINISHED = frozenset({"no_final_answer", "format_error", "infra_error"})


class RunNotFound(KeyError):
    """No run has the requested id."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class RunInfo:
    """A run's row, without its episodes."""

    id: str
    kind: str
    policy: str
    suite: str
    config: dict[str, Any]
    git_revision: str | None
    status: str
    planned: int
    summary: dict[str, Any] | None


@dataclass(frozen=True)
class EpisodeSummary:
    """What reports read of one stored episode (its steps stay in the store)."""

    run_id: str
    task_id: str
    repeat: int
    env: str
    category: str
    level: int
    kind: str
    failure_mode: str
    passed: bool | None
    criteria: dict[str, bool]
    metrics: dict[str, float]
    infra_error: str | None


def _info(row: RunRow) -> RunInfo:
    return RunInfo(
        row.id,
        row.kind,
        row.policy,
        row.suite,
        row.config,
        row.git_revision,
        row.status,
        row.planned,
        row.summary,
    )


class RunStore:
    """Runs keyed by id; episodes keyed by (run, task, repeat)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def start(
        self,
        run_id: str,
        *,
        policy: str,
        suite: str,
        config: dict[str, Any],
        git_revision: str | None,
        planned: int,
        kind: str = "eval",
    ) -> bool:
        """Create the run, or mark an existing one running again; True when it already existed."""
        now = datetime.now(UTC)
        with self.db.session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                session.add(
                    RunRow(
                        id=run_id,
                        kind=kind,
                        policy=policy,
                        suite=suite,
                        config=config,
                        git_revision=git_revision,
                        status="running",
                        planned=planned,
                        updated_at=now,
                    )
                )
                return False
            row.status, row.planned, row.updated_at, row.finished_at = "running", planned, now, None
            return True

    def get(self, run_id: str) -> RunInfo:
        with self.db.session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in the store (`arena eval` prints run ids)")
            return _info(row)

    def list(self, kind: str | None = None) -> list[RunInfo]:
        query = select(RunRow).order_by(RunRow.created_at, RunRow.id)
        if kind is not None:
            query = query.where(RunRow.kind == kind)
        with self.db.session() as session:
            return [_info(row) for row in session.scalars(query)]

    def scored_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(task, repeat) of the run's scored episodes: the ones a re-run skips."""
        query = select(EpisodeRow.task_id, EpisodeRow.repeat).where(
            EpisodeRow.run_id == run_id, EpisodeRow.passed.is_not(None)
        )
        with self.db.session() as session:
            return {(task, repeat) for task, repeat in session.execute(query)}

    def record(self, run_id: str, episode: EpisodeRecord, category: str) -> None:
        """Store one finished episode (replacing an earlier try of the same task and repeat)."""
        data = episode.to_json()
        with self.db.session() as session:
            session.execute(
                delete(EpisodeRow).where(
                    EpisodeRow.run_id == run_id,
                    EpisodeRow.task_id == episode.task_id,
                    EpisodeRow.repeat == episode.repeat,
                )
            )
            row = EpisodeRow(
                run_id=run_id,
                task_id=episode.task_id,
                repeat=episode.repeat,
                env=episode.env,
                category=category,
                level=episode.level,
                kind=episode.kind,
                status="infra_error" if episode.verdict is None else "scored",
                failure_mode=data["failure_mode"],
                passed=episode.passed,
                verdict=data["verdict"],
                answer=data["answer"],
                infra_error=episode.infra_error,
                metrics=episode.metrics(),
                wall_s=episode.wall_s,
                state_diff=episode.state_diff,
            )
            session.add(row)
            session.flush()
            session.add_all(StepRow(episode_id=row.id, index=t["index"], record=t) for t in data["turns"])
            run = session.get(RunRow, run_id)
            if run is not None:
                run.updated_at = datetime.now(UTC)

    def progress(self, run_id: str, summary: dict[str, Any]) -> None:
        """Replace a running run's summary (what a long job has finished so far)."""
        with self.db.session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in the store")
            row.summary, row.updated_at = summary, datetime.now(UTC)

    def finish(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        with self.db.session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in the store")
            row.status, row.summary = status, summary
            row.finished_at = row.updated_at = datetime.now(UTC)

    def episodes(self, run_id: str) -> list[EpisodeSummary]:
        """The run's episodes in (task, repeat) order."""
        query = (
            select(EpisodeRow)
            .where(EpisodeRow.run_id == run_id)
            .order_by(EpisodeRow.task_id, EpisodeRow.repeat)
        )
        with self.db.session() as session:
            return [
                EpisodeSummary(
                    run_id,
                    r.task_id,
                    r.repeat,
                    r.env,
                    r.category,
                    r.level,
                    r.kind,
                    r.failure_mode,
                    r.passed,
                    (r.verdict or {}).get("criteria", {}),
                    r.metrics,
                    r.infra_error,
                )
                for r in session.scalars(query)
            ]

    def episode_records(self, run_id: str, *, passed: bool | None = None) -> list[EpisodeRecord]:
        """The run's full episode records (with every turn and call), optionally only passed/failed ones."""
        query = select(EpisodeRow).where(EpisodeRow.run_id == run_id)
        if passed is not None:
            query = query.where(EpisodeRow.passed.is_(passed))
        query = query.order_by(EpisodeRow.task_id, EpisodeRow.repeat)
        with self.db.session() as session:
            out = []
            for row in session.scalars(query):
                steps = session.scalars(
                    select(StepRow).where(StepRow.episode_id == row.id).order_by(StepRow.index)
                )
                out.append(
                    EpisodeRecord.from_json(
                        {
                            "task_id": row.task_id,
                            "env": row.env,
                            "level": row.level,
                            "kind": row.kind,
                            "repeat": row.repeat,
                            "failure_mode": row.failure_mode,
                            "verdict": row.verdict,
                            "answer": row.answer,
                            "turns": [s.record for s in steps],
                            "infra_error": row.infra_error,
                            "finished": row.status == "scored",
                            "wall_s": row.wall_s,
                            "state_diff": row.state_diff,
                        }
                    )
                )
            return out
