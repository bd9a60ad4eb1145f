"""Shared fixtures: an isolated ARENA_HOME and seed cache per test session, and the testbed environment."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import ray

from arena.runtime.pool import EnvPool, PoolConfig
from environments.paths import HOME_ENV
from environments.serving.control import ControlClient
from environments.serving.process import ServerProcess

FIXTURES = Path(__file__).parent / "fixtures"
TESTBED = FIXTURES / "testbed"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("ARENA_CACHE_DIR", str(tmp_path_factory.mktemp("arena-cache")))


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A fresh ``ARENA_HOME`` for the session: tests never read the user's (imported or registered
    environments, runs, config there) nor write to it. BFCL's fetched data stays where it is."""
    from environments.bfcl.package import ROOT_ENV, package_root

    os.environ.setdefault(ROOT_ENV, str(package_root()))
    os.environ[HOME_ENV] = str(tmp_path_factory.mktemp("arena-home"))


@pytest.fixture(scope="module")
def listener() -> Iterator[int]:
    """A TCP port on the host's loopback that accepts connections (the target of network escapes)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


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


@asynccontextmanager
async def local_pool(envs: dict[str, int], warm_sessions_per_worker: int) -> AsyncIterator[EnvPool]:
    """A pool on a local Ray; shuts down the Ray it started (joins one already running), so the order of
    test modules cannot break a later ``ray.init``."""
    started_ray = not ray.is_initialized()
    async with EnvPool(PoolConfig(envs=envs, warm_sessions_per_worker=warm_sessions_per_worker)) as pool:
        yield pool
    if started_ray:
        ray.shutdown()
