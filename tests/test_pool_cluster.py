"""The pool on a multi-node Ray cluster (two raylets on this machine via ``ray.cluster_utils``): the driver
joins with ``ray.init(address=...)`` and EnvWorker actors are placed by the ``arena_env_slots`` resource,
never on the head."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

from arena.runtime.containers import ENV_SLOT_RESOURCE
from arena.runtime.pool import EnvPool, PoolConfig


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    """A head without environment slots and one node with two; the driver connected by address."""
    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    slots = nodes.add_node(num_cpus=1, resources={ENV_SLOT_RESOURCE: 2})
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield nodes, slots.node_id
    ray.shutdown()
    nodes.shutdown()


async def test_workers_land_on_nodes_with_env_slots(cluster: tuple[Cluster, str], testbed_ref: str) -> None:
    nodes, slot_node = cluster
    assert ray.cluster_resources()[ENV_SLOT_RESOURCE] == 2
    config = PoolConfig(
        envs={testbed_ref: 2}, worker_resources={ENV_SLOT_RESOURCE: 1}, warm_sessions_per_worker=2
    )
    async with EnvPool(config) as pool:
        workers = pool.workers[testbed_ref]
        described = [await w.actor.describe.remote() for w in workers]
        assert {d["node_id"] for d in described} == {slot_node}
        assert slot_node != nodes.head_node.node_id
        assert ray.available_resources().get(ENV_SLOT_RESOURCE, 0) == 0  # both slots taken
        async with pool.session(testbed_ref) as lease:
            assert not (await lease.call_tool("deposit", {"account_id": 1, "amount": 5})).is_error
            assert [row["key"] for row in (await lease.diff())["accounts"]["changed"]] == [{"id": 1}]
    deadline = time.monotonic() + 30
    while ray.available_resources().get(ENV_SLOT_RESOURCE) != 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert ray.available_resources().get(ENV_SLOT_RESOURCE) == 2, "the workers' slots come back"
