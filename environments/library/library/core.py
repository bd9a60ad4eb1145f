"""The library environment object and the lending policy shared by the seed and the tools."""

from __future__ import annotations

from datetime import date
from typing import Literal

from environments.sdk import Environment

from .models import Base

TODAY = date(2026, 6, 15)
LOAN_DAYS = 21
RENEWAL_DAYS = 14
MAX_RENEWALS = 2
MAX_ACTIVE_LOANS = 5
MAX_ACTIVE_HOLDS = 3
FINE_PER_DAY = 0.25
MAX_OVERDUE_FINE = 15.00
DAMAGE_FEE = 5.00
FINE_BLOCK_THRESHOLD = 10.00
ACTIVE_HOLD = ("waiting", "ready")

Genre = Literal[
    "fiction",
    "mystery",
    "science fiction",
    "fantasy",
    "romance",
    "history",
    "science",
    "biography",
    "children",
    "poetry",
]

env = Environment(
    "library",
    theme="public library catalogue, loans and holds",
    category="education",
    description=(
        "A county public library system: search the catalogue across branches, look up members, "
        "lend, renew and return copies, manage the hold queue and collect fines."
    ),
    base=Base,
    version="1",
)


def overdue_fine(days_late: int) -> float:
    """The fine for returning a copy ``days_late`` days after its due date (capped per loan)."""
    return round(min(max(days_late, 0) * FINE_PER_DAY, MAX_OVERDUE_FINE), 2)
