"""Shared fixtures: an isolated seed cache per test session and the testbed environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TESTBED = FIXTURES / "testbed"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("ARENA_CACHE_DIR", str(tmp_path_factory.mktemp("arena-cache")))


@pytest.fixture(scope="session")
def testbed_ref() -> str:
    """Path reference of the testbed environment (usable by `load_environment` and servers)."""
    return str(TESTBED)
