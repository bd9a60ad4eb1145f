"""Calendar: people in six offices book meeting rooms, schedule meetings and answer invitations."""

from __future__ import annotations

from environments.sdk import Environment

from .models import NOW, TODAY, Base

env = Environment(
    "calendar",
    theme="calendars, meeting rooms and meeting scheduling",
    category="productivity",
    description=(
        "A company calendar across six offices in different time zones: look up colleagues and rooms, "
        "find common free time, book rooms for meetings within working hours, invite people, answer "
        "invitations, and reschedule or cancel meetings as their organizer. "
        f"The current time is {NOW.isoformat(timespec='minutes')} UTC on {TODAY:%A %d %B %Y}."
    ),
    base=Base,
    version="1",
)

from . import seed, tools  # noqa: E402, F401  (registers the seeder and the tools on `env`)

__all__ = ["env"]
