"""Shared fixtures: an isolated seed cache per test session and the testbed environment."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from environments.serving.control import ControlClient
from environments.serving.process import ServerProcess

FIXTURES = Path(__file__).parent / "fixtures"
TESTBED = FIXTURES / "testbed"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("ARENA_CACHE_DIR", str(tmp_path_factory.mktemp("arena-cache")))


@pytest.fixture(scope="session")
def testbed_ref() -> str:
    """Path reference of the testbed environment (usable by `load_environment` and servers)."""
    return str(TESTBED)


@pytest.fixture(scope="module")
def server(testbed_ref: str) -> Iterator[ServerProcess]:
    """A real testbed environment server process for the module."""
    proc = ServerProcess(testbed_ref).start()
    yield proc
    proc.stop()
    assert not proc.alive()


@pytest.fixture
async def control(server: ServerProcess) -> AsyncIterator[ControlClient]:
    """A control-plane client of ``server``."""
    client = server.control()
    yield client
    await client.aclose()
