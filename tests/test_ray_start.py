"""A local Ray that does not come up (Ray's 30 s node-startup timeout, seen on an overloaded machine) is
tried once more, then reported as an ``InfrastructureError`` the CLI prints in one line. The workers of a
local Ray inherit the driver's environment, and see where environments live even when that changed
after Ray started."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.pool import EnvPool, PoolConfig, start_local_ray
from environments.scaffold import scaffold_environment

RAY_TIMEOUT = "The current node timed out during startup."


def test_a_ray_that_times_out_twice_is_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def timed_out(**_kwargs: object) -> None:
        calls.append("init")
        raise Exception(RAY_TIMEOUT)  # what ray._private.node raises

    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    with pytest.raises(InfrastructureError) as caught:
        start_local_ray()
    assert calls == ["init", "shutdown", "init", "shutdown"]
    assert caught.value.cause == InfraCause.START_FAILED and RAY_TIMEOUT in str(caught.value)


def test_a_ray_that_times_out_once_is_started_on_the_second_try(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def slow_once(**_kwargs: object) -> None:
        calls.append("init")
        if len(calls) == 1:
            raise Exception(RAY_TIMEOUT)

    monkeypatch.setattr(ray, "init", slow_once)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    start_local_ray()
    assert calls == ["init", "shutdown", "init"]


async def test_workers_find_an_environment_registered_after_the_local_ray_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if ray.is_initialized():
        ray.shutdown()
    start_local_ray()
    try:
        scaffold_environment("vetclinic", tmp_path / "envs")
        monkeypatch.setenv("ARENA_ENV_PATH", str(tmp_path / "envs"))
        async with EnvPool(PoolConfig(envs={"vetclinic": 1}, warm_sessions_per_worker=1)) as pool:
            assert (await pool.info("vetclinic"))["name"] == "vetclinic"
    finally:
        ray.shutdown()
