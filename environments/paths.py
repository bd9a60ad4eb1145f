"""Where the arena keeps its files: ``$ARENA_HOME`` (default ``~/.agent-arena``)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "ARENA_HOME"


def arena_home() -> Path:
    """``$ARENA_HOME``, else ``~/.agent-arena``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".agent-arena")
