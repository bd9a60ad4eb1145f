"""``ProfileStore``: one measured profile per (environment, version), so synthesis can skip re-profiling."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from arena.store.db import Database
from arena.store.schema import ProfileRow


class ProfileStore:
    """Environment profiles keyed by (env, env_version); saving again replaces the profile."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save_profile(self, env: str, version: str, data: dict[str, Any]) -> None:
        with self.db.session() as session:
            row = session.get(ProfileRow, (env, version))
            if row is None:
                session.add(ProfileRow(env=env, env_version=version, profile=data))
            else:
                row.profile = data
                row.created_at = datetime.now(UTC)

    def load_profile(self, env: str, version: str) -> dict[str, Any] | None:
        with self.db.session() as session:
            row = session.get(ProfileRow, (env, version))
            return None if row is None else row.profile
