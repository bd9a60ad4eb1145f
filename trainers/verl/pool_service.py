"""The ``EnvPool`` as a named, detached Ray actor, so verl's agent-loop workers (other processes, other
nodes) lease sessions from one pool: ``PoolService`` owns the pool; ``RemoteSessions`` is the
``SessionProvider`` an agent loop uses, forwarding each MCP call to the actor.

Infrastructure failures cross the actor boundary as data and are raised again as ``InfrastructureError``
on the caller's side (a dead actor is one too), so the episode never scores them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import ray

from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.pool import EnvPool, Lease, PoolConfig

POOL_NAME = "arena_env_pool"
NAMESPACE = "arena"


class PoolService:
    """One ``EnvPool`` behind a Ray actor: lease, call, diff, release by lease id."""

    def __init__(self, config: PoolConfig) -> None:
        self.pool = EnvPool(config)
        self.leases: dict[int, Lease] = {}
        self._ids = itertools.count()
        self._started = False

    async def start(self) -> list[str]:
        """Start the pool's workers (idempotent); the environments it serves."""
        if not self._started:
            await self.pool.start()
            self._started = True
        return sorted(self.pool.workers)

    async def _guard(self, coro: Any) -> dict[str, Any]:
        try:
            return {"ok": await coro}
        except InfrastructureError as exc:
            return {"infra": [str(exc.cause), str(exc)]}

    async def lease(self, env: str) -> dict[str, Any]:
        async def go() -> int:
            lease = await self.pool.lease(env)
            lease_id = next(self._ids)
            self.leases[lease_id] = lease
            return lease_id

        return await self._guard(go())

    async def list_tools(self, lease_id: int) -> dict[str, Any]:
        return await self._guard(self._tools(lease_id))

    async def _tools(self, lease_id: int) -> list[dict[str, Any]]:
        tools = await self._lease(lease_id).list_tools()
        return [tool.model_dump(mode="json", by_alias=True) for tool in tools]

    async def call_tool(self, lease_id: int, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        return await self._guard(self._call(lease_id, name, arguments))

    async def _call(self, lease_id: int, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        result = await self._lease(lease_id).call_tool(name, arguments)
        return result.model_dump(mode="json", by_alias=True)

    async def diff(self, lease_id: int) -> dict[str, Any]:
        return await self._guard(self._lease(lease_id).diff())

    async def release(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is not None:
            await self.pool.release(lease)

    def _lease(self, lease_id: int) -> Lease:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise InfrastructureError(InfraCause.SESSION_EXPIRED, f"lease {lease_id} is not held")
        return lease

    async def stats(self) -> dict[str, Any]:
        """Leases held through this service, and the pool's per-worker view."""
        return {"leases": len(self.leases), "workers": self.pool.stats()}

    async def break_worker(self, env: str) -> None:
        """Kill the server of ``env``'s first worker (fault injection for tests and drills)."""
        worker = self.pool.workers[env][0]
        await worker.actor.kill_server.remote()

    async def shutdown(self) -> None:
        await self.pool.shutdown()


def _unwrap(reply: dict[str, Any]) -> Any:
    if "infra" in reply:
        cause, message = reply["infra"]
        raise InfrastructureError(InfraCause(cause), message)
    return reply["ok"]


async def _remote(method: Any, *args: Any) -> Any:
    try:
        reply = await method.remote(*args)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
        raise InfrastructureError(InfraCause.WORKER_DIED, f"the pool actor is gone: {exc!r:.200}") from exc
    return _unwrap(reply) if isinstance(reply, dict) else reply


class RemoteSession:
    """One leased session, used through the pool actor (an ``EpisodeSession``)."""

    def __init__(self, actor: Any, lease_id: int) -> None:
        self.actor, self.lease_id = actor, lease_id

    async def list_tools(self) -> list[types.Tool]:
        tools = await _remote(self.actor.list_tools, self.lease_id)
        return [types.Tool.model_validate(tool) for tool in tools]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        result = await _remote(self.actor.call_tool, self.lease_id, name, arguments)
        return types.CallToolResult.model_validate(result)

    async def diff(self) -> dict[str, Any]:
        return await _remote(self.actor.diff, self.lease_id)


class RemoteSessions:
    """A ``SessionProvider`` over the pool actor; every lease is released when its episode ends."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    @contextlib.asynccontextmanager
    async def session(self, env: str) -> AsyncIterator[RemoteSession]:
        lease_id = await _remote(self.actor.lease, env)
        try:
            yield RemoteSession(self.actor, lease_id)
        finally:
            with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                await self.actor.release.remote(lease_id)


def find_pool(name: str = POOL_NAME, namespace: str = NAMESPACE) -> Any:
    """The running pool actor ``name``; a one-line error when it is absent."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise InfrastructureError(
            InfraCause.SERVER_UNREACHABLE,
            f"no environment pool actor {namespace}/{name} in this Ray cluster (start it: arena train ...)",
        ) from None


async def start_pool(
    config: PoolConfig, name: str = POOL_NAME, namespace: str = NAMESPACE, detached: bool = True
) -> Any:
    """The pool actor ``name``: found if it runs, else started (detached: it outlives its starter) with
    its workers running."""
    options: dict[str, Any] = {"name": name, "namespace": namespace, "get_if_exists": True, "num_cpus": 0}
    if detached:
        options["lifetime"] = "detached"
    actor = ray.remote(PoolService).options(**options).remote(config)
    await actor.start.remote()
    return actor
