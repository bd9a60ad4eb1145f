"""A local Ray that does not come up (Ray's 30 s node-startup timeout, seen on an overloaded machine) is
tried once more, then reported as an ``InfrastructureError`` the CLI prints in one line."""

from __future__ import annotations

import pytest
import ray

from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.pool import start_local_ray

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
