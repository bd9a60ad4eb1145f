"""EnvPool on real Ray with local-process workers: isolation at scale, fault recovery, timeouts, no leaks."""

from __future__ import annotations

import asyncio

import psutil
import pytest
import ray

from arena.runtime.backends import ProcessLimits
from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.pool import EnvPool, PoolConfig


@pytest.fixture(scope="module", autouse=True)
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


POOL_ENVS = ("testbed", "ecommerce")


def server_processes() -> set[int]:
    """Server processes of the environments these tests pool (other servers may run on the machine)."""
    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "environments.serving" in cmdline and any(arg.endswith(POOL_ENVS) for arg in cmdline):
            found.add(proc.info["pid"])
    return found


@pytest.fixture
def no_leaks():
    before = server_processes()
    yield
    for _ in range(50):
        leaked = server_processes() - before
        if not leaked:
            return
        psutil.wait_procs([psutil.Process(p) for p in leaked if psutil.pid_exists(p)], timeout=0.1)
    assert not server_processes() - before, "environment server processes leaked"


def config(testbed_ref: str, **overrides: object) -> PoolConfig:
    base = {"envs": {testbed_ref: 2, "ecommerce": 2}, "health_interval_s": 0.3, "call_timeout_s": 5.0}
    return PoolConfig(**{**base, **overrides})  # type: ignore[arg-type]


async def test_two_envs_two_workers_64_isolated_sessions(testbed_ref: str, no_leaks: None) -> None:
    async with EnvPool(config(testbed_ref)) as pool:
        assert {env: len(ws) for env, ws in pool.workers.items()} == {testbed_ref: 2, "ecommerce": 2}

        async def episode(i: int) -> tuple[str, int]:
            async with pool.session(testbed_ref) as lease:
                for _ in range(i % 4 + 1):
                    result = await lease.call_tool("deposit", {"account_id": 1, "amount": 10})
                    assert not result.is_error
                diff = await lease.diff()
                return lease.worker.worker_id, len(diff["entries"]["inserted"])

        results = await asyncio.gather(*(episode(i) for i in range(64)))
        assert [n for _, n in results] == [i % 4 + 1 for i in range(64)], (
            "each episode saw only its own writes"
        )
        assert len({w for w, _ in results}) == 2, "sessions were balanced across both workers"
        async with pool.session("ecommerce") as lease:
            order = await lease.call_tool("get_order", {"order_id": 1})
            assert order.structured_content["id"] == 1


async def test_killed_worker_is_an_infrastructure_error_and_is_replaced(
    testbed_ref: str, no_leaks: None
) -> None:
    async with EnvPool(config(testbed_ref, envs={testbed_ref: 1})) as pool:
        lease = await pool.lease(testbed_ref)
        assert not (await lease.call_tool("deposit", {"account_id": 2, "amount": 5})).is_error
        old_pid = (await lease.worker.actor.describe.remote())["pid"]
        await lease.worker.actor.kill_server.remote()
        with pytest.raises(InfrastructureError) as err:
            await lease.call_tool("get_account", {"account_id": 2})
        assert err.value.cause is InfraCause.WORKER_DIED and err.value.retryable
        await pool.release(lease)
        await pool.wait_healthy(60)
        assert pool.replacements == 1
        async with pool.session(testbed_ref) as fresh:
            assert (await fresh.call_tool("get_account", {"account_id": 2})).structured_content["id"] == 2
            assert (await fresh.diff()) == {}, "the retry runs on a fresh session"
            assert (await fresh.worker.actor.describe.remote())["pid"] != old_pid
        assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE


async def test_infinite_loop_hits_the_call_timeout(testbed_ref: str, no_leaks: None) -> None:
    async with EnvPool(config(testbed_ref, envs={testbed_ref: 1}, call_timeout_s=1.0)) as pool:
        async with pool.session(testbed_ref) as lease:
            with pytest.raises(InfrastructureError) as err:
                await lease.call_tool("spin", {"seconds": -1})
            assert err.value.cause is InfraCause.CALL_TIMEOUT
        await pool.wait_healthy(60)
        async with pool.session(testbed_ref) as lease:
            assert not (await lease.call_tool("spin", {"seconds": 0.01})).is_error


async def test_unbounded_allocation_is_stopped_by_the_memory_limit(testbed_ref: str, no_leaks: None) -> None:
    limits = ProcessLimits(address_space_mb=1024)
    async with EnvPool(config(testbed_ref, envs={testbed_ref: 1}, process_limits=limits)) as pool:
        async with pool.session(testbed_ref) as lease:
            try:
                result = await lease.call_tool("hog_memory", {"megabytes": 0})
                assert result.is_error and "MemoryError" in result.structured_content["error"]["message"]
            except InfrastructureError as err:  # the server may also die outright: then it is replaced
                assert err.cause is InfraCause.WORKER_DIED
        await pool.wait_healthy(60)
        async with pool.session(testbed_ref) as lease:
            assert not (await lease.call_tool("get_account", {"account_id": 1})).is_error


async def test_shutdown_leaves_nothing_running(testbed_ref: str) -> None:
    before = server_processes()
    pool = EnvPool(config(testbed_ref))
    await pool.start()
    pids = {(await w.actor.describe.remote())["pid"] for ws in pool.workers.values() for w in ws}
    assert pids <= server_processes()
    lease = await pool.lease("ecommerce")
    await pool.shutdown()
    with pytest.raises(InfrastructureError) as err:
        await lease.call_tool("get_order", {"order_id": 1})
    assert err.value.cause is InfraCause.POOL_CLOSED
    psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=5)
    assert not (server_processes() - before)
