"""ORM tables of the store. New record kinds (runs, episodes, verdicts) add their tables here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Index, Integer, String, Text
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
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ProfileRow(Base):
    """A measured profile of one environment version (tool graph, value pools), reused across runs."""

    __tablename__ = "env_profiles"

    env: Mapped[str] = mapped_column(String(200), primary_key=True)
    env_version: Mapped[str] = mapped_column(String(100), primary_key=True)
    profile: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
