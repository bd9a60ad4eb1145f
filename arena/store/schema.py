"""ORM tables of the store: tasks, environment profiles, and evaluation runs with their episodes and steps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class TaskRow(Base):
    """One ``task_synth.model.Task``; nested models are JSON columns."""

    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_env_difficulty", "env", "difficulty"),)

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    env: Mapped[str] = mapped_column(String(200))
    env_version: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    difficulty: Mapped[int] = mapped_column(Integer)
    request: Mapped[str] = mapped_column(Text)
    knobs: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    solution: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    reference_answer: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    verifier: Mapped[dict[str, Any]] = mapped_column(JSON)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSON)
    measured: Mapped[dict[str, float]] = mapped_column(JSON)
    follow_ups: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # Multi-turn benchmark tasks (BFCL): setup calls, offered tools, tools added by turn, reference by turn.
    setup: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    tools: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    added_tools: Mapped[dict[str, list[str]] | None] = mapped_column(JSON, nullable=True)
    turn_solutions: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ProfileRow(Base):
    """A measured profile of one environment version (tool graph, value pools), reused across runs."""

    __tablename__ = "env_profiles"

    env: Mapped[str] = mapped_column(String(200), primary_key=True)
    env_version: Mapped[str] = mapped_column(String(100), primary_key=True)
    profile: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class RunRow(Base):
    """One evaluation run: a policy on a suite under one configuration (``id`` derives from it)."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), default="eval")
    policy: Mapped[str] = mapped_column(String(200))
    suite: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    git_revision: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(20), default="running")
    planned: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EpisodeRow(Base):
    """One episode of a run: (task, repeat) is unique within the run; ``passed`` is NULL when unscored."""

    __tablename__ = "episodes"
    __table_args__ = (
        UniqueConstraint("run_id", "task_id", "repeat", name="uq_episodes_run_task_repeat"),
        Index("ix_episodes_run", "run_id"),
        # Covers the per-run success breakdowns and run lists of `arena view` (index-only scans).
        Index("ix_episodes_run_outcome", "run_id", "env", "level", "category", "failure_mode", "passed"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(String(200))
    repeat: Mapped[int] = mapped_column(Integer)
    env: Mapped[str] = mapped_column(String(200))
    category: Mapped[str] = mapped_column(String(100))
    level: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    failure_mode: Mapped[str] = mapped_column(String(40))
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    answer: Mapped[Any] = mapped_column(JSON, nullable=True)
    infra_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON)
    wall_s: Mapped[float] = mapped_column(Float)
    # What the episode wrote (``EpisodeRecord.state_diff``); NULL in stores older than this column.
    state_diff: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class StepRow(Base):
    """One policy turn of an episode, with its tool calls (arguments, result, error code, latency)."""

    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_episode", "episode_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
