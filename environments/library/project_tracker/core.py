"""The environment object, the simulated clock and the tracker's workflow constants."""

from __future__ import annotations

from datetime import date

from environments.library.project_tracker.models import Base
from environments.sdk import Environment

TODAY = date(2026, 6, 15)
MAX_IN_PROGRESS_PER_USER = 3

# Allowed status changes: forward through the workflow, review can bounce back, done can be reopened.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "open": ("in_progress",),
    "in_progress": ("review",),
    "review": ("done", "in_progress"),
    "done": ("open",),
}
ASSIGNABLE_ROLES = ("maintainer", "developer")
PRIORITY_RANK = {"lowest": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}

env = Environment(
    "project_tracker",
    theme="software project and issue tracking",
    category="software",
    description=(
        "A Jira-like issue tracker: projects with members and roles, issues with a workflow "
        "(open -> in_progress -> review -> done), sub-issues, comments and capacity-limited sprints. "
        f"Today is {TODAY.isoformat()}."
    ),
    base=Base,
    version="1",
)
