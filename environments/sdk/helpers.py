"""Small helpers that tools of most environments need."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.orm import DeclarativeBase, Session

from environments.sdk.errors import NotFound, ValidationFailed

Row = TypeVar("Row", bound=DeclarativeBase)


def get_or_raise(db: Session, model: type[Row], key: Any, label: str | None = None) -> Row:
    """The row of ``model`` with primary key ``key``, or NOT_FOUND: ``no <label> with id <key>``.

    ``label`` defaults to the table name in the singular (``order_items`` -> ``order item``).
    """
    row = db.get(model, key)
    if row is None:
        label = label or model.__tablename__.removesuffix("s").replace("_", " ")
        raise NotFound(f"no {label} with id {key!r}")
    return row


def check_range(low: Any, high: Any, low_name: str, high_name: str) -> None:
    """VALIDATION_ERROR when both bounds are given and ``low > high``."""
    if low is not None and high is not None and low > high:
        raise ValidationFailed(f"{low_name} {low} is after {high_name} {high}")
