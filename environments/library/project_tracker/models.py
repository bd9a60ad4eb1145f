"""SQLAlchemy models of the tracker: users, projects, memberships, sprints, issues and comments."""

from __future__ import annotations

from datetime import date
from typing import Literal

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

IssueType = Literal["epic", "story", "task", "bug"]
Priority = Literal["lowest", "low", "medium", "high", "critical"]
Status = Literal["open", "in_progress", "review", "done"]
Role = Literal["maintainer", "developer", "reporter", "viewer"]
StoryPoints = Literal[1, 2, 3, 5, 8, 13]


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    job_title: Mapped[str] = mapped_column(String(60))
    city: Mapped[str] = mapped_column(String(60))
    active: Mapped[bool] = mapped_column(default=True)


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(10), unique=True)
    name: Mapped[str] = mapped_column(String(80))
    description: Mapped[str] = mapped_column(Text)
    lead_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    status: Mapped[str] = mapped_column(String(20))
    created_on: Mapped[date]
    lead: Mapped[User] = relationship()
    memberships: Mapped[list[Membership]] = relationship(back_populates="project", order_by="Membership.id")
    sprints: Mapped[list[Sprint]] = relationship(back_populates="project", order_by="Sprint.start_date")


class Membership(Base):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("project_id", "user_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    role: Mapped[str] = mapped_column(String(20))
    joined_on: Mapped[date]
    project: Mapped[Project] = relationship(back_populates="memberships")
    user: Mapped[User] = relationship()


class Sprint(Base):
    __tablename__ = "sprints"
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    name: Mapped[str] = mapped_column(String(60))
    goal: Mapped[str] = mapped_column(String(200))
    start_date: Mapped[date]
    end_date: Mapped[date]
    capacity_points: Mapped[int]
    status: Mapped[str] = mapped_column(String(20))
    project: Mapped[Project] = relationship(back_populates="sprints")
    issues: Mapped[list[Issue]] = relationship(back_populates="sprint", order_by="Issue.id")


class Issue(Base):
    __tablename__ = "issues"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(20), unique=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    type: Mapped[str] = mapped_column(String(10))
    priority: Mapped[str] = mapped_column(String(10))
    status: Mapped[str] = mapped_column(String(20))
    reporter_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    assignee_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("issues.id"))
    sprint_id: Mapped[int | None] = mapped_column(ForeignKey("sprints.id"))
    story_points: Mapped[int | None]
    created_on: Mapped[date]
    due_date: Mapped[date | None]
    resolved_on: Mapped[date | None]
    project: Mapped[Project] = relationship()
    reporter: Mapped[User] = relationship(foreign_keys=[reporter_id])
    assignee: Mapped[User | None] = relationship(foreign_keys=[assignee_id])
    parent: Mapped[Issue | None] = relationship(remote_side=[id], back_populates="children")
    children: Mapped[list[Issue]] = relationship(back_populates="parent", order_by="Issue.id")
    sprint: Mapped[Sprint | None] = relationship(back_populates="issues")
    comments: Mapped[list[Comment]] = relationship(back_populates="issue", order_by="Comment.id")


class Comment(Base):
    __tablename__ = "comments"
    id: Mapped[int] = mapped_column(primary_key=True)
    issue_id: Mapped[int] = mapped_column(ForeignKey("issues.id"))
    author_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    body: Mapped[str] = mapped_column(Text)
    created_on: Mapped[date]
    issue: Mapped[Issue] = relationship(back_populates="comments")
    author: Mapped[User] = relationship()
