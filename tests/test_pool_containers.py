"""EnvPool with the container backend on a real engine (Podman here): isolation, crashes, OOM, reaping."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
import ray

from arena.runtime.engine import ARENA_LABEL, OWNER_LABEL, engine_client
from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.image import build_image
from arena.runtime.pool import EnvPool, PoolConfig

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    client = engine_client()
    if client is None:
        message = "no container engine answers ($DOCKER_HOST, /run/podman.sock, /var/run/docker.sock)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {message}; run infra/podman/setup.sh", pytrace=False)
        pytest.skip(message)
    result = build_image(client=client)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield result.tag
    ray.shutdown()
    client.close()


def owned_containers(owner: str) -> list[object]:
    client = engine_client()
    assert client is not None
    return client.containers.list(all=True, filters={"label": [f"{ARENA_LABEL}=1", f"{OWNER_LABEL}={owner}"]})


async def test_container_pool_isolation_crash_recovery_and_cleanup(image: str, testbed_ref: str) -> None:
    config = PoolConfig(envs={testbed_ref: 2}, backend="container", image=image, health_interval_s=0.3)
    pool = EnvPool(config)
    await pool.start()
    try:
        assert len(owned_containers(pool.owner)) == 2

        async def episode(i: int) -> int:
            async with pool.session(testbed_ref) as lease:
                for _ in range(i % 3 + 1):
                    assert not (await lease.call_tool("deposit", {"account_id": 4, "amount": 1})).is_error
                return len((await lease.diff())["entries"]["inserted"])

        assert await asyncio.gather(*(episode(i) for i in range(16))) == [i % 3 + 1 for i in range(16)]

        lease = await pool.lease(testbed_ref)
        assert not (await lease.call_tool("get_account", {"account_id": 1})).is_error
        await lease.worker.actor.kill_server.remote()
        with pytest.raises(InfrastructureError) as err:
            await lease.call_tool("get_account", {"account_id": 1})
        assert err.value.cause is InfraCause.WORKER_DIED
        await pool.release(lease)
        await pool.wait_healthy(90)
        async with pool.session(testbed_ref) as fresh:
            assert (await fresh.call_tool("get_account", {"account_id": 1})).structured_content["id"] == 1
    finally:
        await pool.shutdown()
    assert owned_containers(pool.owner) == [], "no containers may outlive the pool"


async def test_container_memory_limit_stops_a_hog_and_the_worker_is_replaced(
    image: str, testbed_ref: str
) -> None:
    config = PoolConfig(
        envs={testbed_ref: 1},
        backend="container",
        image=image,
        container_memory_mb=256,
        health_interval_s=0.3,
    )
    async with EnvPool(config) as pool:
        async with pool.session(testbed_ref) as lease:
            with pytest.raises(InfrastructureError) as err:
                await lease.call_tool("hog_memory", {"megabytes": 0})
            assert err.value.cause is InfraCause.WORKER_DIED
        await pool.wait_healthy(90)
        assert pool.replacements == 1
        async with pool.session(testbed_ref) as lease:
            assert not (await lease.call_tool("get_account", {"account_id": 2})).is_error
        owner = pool.owner
    assert owned_containers(owner) == []
