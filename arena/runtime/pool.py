"""``EnvPool``: Ray-managed environment workers and one isolated session leased per episode.

Control plane (lifecycle): workers are ``EnvWorker`` actors; sessions are created on each server
through its control API and kept warm, so a lease is a queue pop. Data plane: the episode talks
MCP straight to the server: ``lease.call_tool`` through one lean client per server (``mcp_http``), or
``lease.client()`` for a full official SDK client. A health loop replaces dead
workers; a timed-out call replaces its (stuck) worker; failures surface as ``InfrastructureError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
import ray
from mcp import Client
from mcp.shared.exceptions import MCPError

from arena.runtime.backends import ProcessLimits, owner_is_alive, pool_owner_id
from arena.runtime.endpoint import Endpoint
from arena.runtime.errors import InfraCause, InfrastructureError
from arena.runtime.mcp_http import McpHttpClient
from arena.runtime.session_client import SessionClient
from arena.runtime.worker import EnvWorker, WorkerSpec
from environments.serving.control import ControlClient, ControlError

logger = logging.getLogger(__name__)


LOCATION_VARIABLES = ("ARENA_HOME", "ARENA_IMPORTED_DIR", "ARENA_CACHE_DIR", "ARENA_ENV_PATH")
"""Environment variables that say where environments and seeds live; passed on to every worker."""


RAY_START_TRIES = 2

_inherited_locations: tuple[str, dict[str, str]] | None = None
"""The local Ray this process started (its GCS address) and the location variables its workers inherit
from the driver's environment; ``None`` when this process did not start Ray."""


def _locations() -> dict[str, str]:
    return {k: os.environ[k] for k in LOCATION_VARIABLES if k in os.environ}


def _ray_address() -> str | None:
    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def start_local_ray(tries: int = RAY_START_TRIES, **init_kwargs: Any) -> None:
    """Start a local Ray (``init_kwargs`` go to ``ray.init`` over quiet defaults). Ray gives its node 30 s
    to come up and then raises a bare ``Exception``; on a loaded machine that can happen once, so it is
    tried again before ``InfrastructureError``."""
    global _inherited_locations
    kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False} | init_kwargs
    for attempt in range(1, tries + 1):
        try:
            ray.init(**kwargs)
            _inherited_locations = (_ray_address(), _locations())
            return
        except Exception as exc:  # Ray's own startup timeout is a plain Exception
            ray.shutdown()
            logger.warning("Ray did not start (try %d of %d): %s", attempt, tries, exc)
            if attempt == tries:
                raise InfrastructureError(
                    InfraCause.START_FAILED,
                    f"Ray did not start in {tries} tries (is the machine overloaded?): {exc}",
                ) from exc


@dataclass
class PoolConfig:
    """How many workers per environment, on which backend, and the pool's limits."""

    envs: dict[str, int]
    backend: str = "process"
    warm_sessions_per_worker: int = 4
    call_timeout_s: float = 30.0
    session_ttl_s: float = 3600.0
    health_interval_s: float = 1.0
    health_failures: int = 3
    health_window_s: float = 5.0
    """A worker whose server runs but does not answer its health check is condemned only after
    ``health_failures`` failed checks in a row spanning at least ``health_window_s`` (a server whose
    process is gone at once)."""
    start_timeout_s: float = 60.0
    image: str = "localhost/agent-arena-env:latest"
    process_limits: ProcessLimits = field(default_factory=ProcessLimits)
    container_memory_mb: int = 512
    container_cpus: float = 1.0
    container_pids: int = 256
    worker_resources: dict[str, float] = field(default_factory=dict)
    mcp_client: str = "lean"
    """How ``Lease.call_tool`` speaks MCP: ``"lean"`` (``mcp_http``: one shared connection pool per server,
    ~0.15 ms driver CPU per call) or ``"sdk"`` (one official SDK client per lease, ~1 ms per call)."""
    mcp_connections_per_worker: int = 256


@dataclass
class _Worker:
    """Driver-side view of one worker: its actor, endpoint, warm sessions and leases."""

    env: str
    worker_id: str
    actor: Any
    endpoint: Endpoint
    control: ControlClient
    mcp: McpHttpClient
    generation: int = 0
    warm: deque[str] = field(default_factory=deque)
    leases: set[Lease] = field(default_factory=set)
    healthy: bool = True
    replacing: asyncio.Task[None] | None = None
    refilling: bool = False
    failed_checks: int = 0
    failing_since: float | None = None


class Lease:
    """One isolated session of one environment, held by one episode."""

    def __init__(self, pool: EnvPool, worker: _Worker, session_id: str) -> None:
        self.pool = pool
        self.worker = worker
        self.generation = worker.generation
        self.session_id = session_id
        self.env = worker.env
        self.endpoint = worker.endpoint
        self._mcp = worker.mcp
        self.created_at = time.monotonic()
        self.broken: InfrastructureError | None = None
        self._client: SessionClient | None = None

    @property
    def mcp_url(self) -> str:
        return self.endpoint.mcp_url(self.session_id)

    def client(self) -> Client:
        """A fresh official MCP client for this session (enter it with ``async with``)."""
        self._check()
        return self.endpoint.mcp_client(self.session_id)

    def _check(self) -> None:
        if self.broken is not None:
            raise self.broken
        if time.monotonic() - self.created_at > self.pool.config.session_ttl_s:
            self.broken = InfrastructureError(
                InfraCause.SESSION_EXPIRED,
                f"session older than {self.pool.config.session_ttl_s}s",
                env=self.env,
            )
            raise self.broken

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        """Call a tool with the pool's per-call timeout. Tool errors come back as ``isError`` results;
        runtime failures raise ``InfrastructureError``."""
        self._check()
        try:
            async with asyncio.timeout(self.pool.config.call_timeout_s):
                if self.pool.config.mcp_client == "lean":
                    return await self._mcp.call_tool(self.session_id, name, arguments)
                if self._client is None:
                    self._client = SessionClient(lambda: self.endpoint.mcp_client(self.session_id))
                return await self._client.call_tool(name, arguments or {})
        except TimeoutError:
            error = InfrastructureError(
                InfraCause.CALL_TIMEOUT,
                f"{name} did not answer within {self.pool.config.call_timeout_s}s; replacing worker",
                env=self.env,
                worker=self.worker.worker_id,
            )
            self.pool.condemn(self.worker, error)
            raise error from None
        except (MCPError, httpx2.HTTPError, OSError, ExceptionGroup, ConnectionError) as exc:
            raise await self.pool.diagnose(self, exc) from exc

    async def list_tools(self) -> list[types.Tool]:
        """The tools the agent sees (``tools/list`` over the data plane)."""
        self._check()
        try:
            if self.pool.config.mcp_client == "lean":
                return (await self._mcp.list_tools(self.session_id)).tools
            async with self.client() as client:
                return (await client.list_tools()).tools
        except (MCPError, httpx2.HTTPError, OSError, ExceptionGroup, ConnectionError) as exc:
            raise await self.pool.diagnose(self, exc) from exc

    async def state_hash(self) -> str:
        return await self._control("state_hash")

    async def diff(self, before: str = "seed", after: str = "current") -> dict[str, Any]:
        return await self._control("diff", before, after)

    async def reset(self) -> None:
        await self._control("reset")

    async def snapshot(self) -> str:
        return await self._control("snapshot")

    async def restore(self, snapshot_id: str) -> None:
        await self._control("restore", snapshot_id)

    async def call_as_arena(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a tool through the control plane (reference solutions), bypassing the agent's MCP session."""
        return await self._control("call", tool, arguments or {})

    async def run_program(self, source: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
        """Run generated code inside the environment server against this session (never in this process)."""
        return await self._control("run_program", source, timeout_s)

    async def _control(self, op: str, *args: Any) -> Any:
        self._check()
        try:
            return await getattr(self.worker.control, op)(self.session_id, *args)
        except ControlError as exc:
            raise await self.pool.diagnose(self, exc) from exc

    async def _close_client(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


class EnvPool:
    """Workers for several environments; leases one fresh isolated session per episode.

    Use ``async with EnvPool(config) as pool`` or ``await pool.start()`` / ``await pool.shutdown()``.
    """

    def __init__(self, config: PoolConfig) -> None:
        if config.mcp_client not in ("lean", "sdk"):
            raise ValueError(f"mcp_client must be 'lean' or 'sdk', not {config.mcp_client!r}")
        self.config = config
        self.owner = pool_owner_id()
        self.workers: dict[str, list[_Worker]] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._health_task: asyncio.Task[None] | None = None
        self._closed = False
        self.replacements = 0

    async def __aenter__(self) -> EnvPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every worker (in parallel) and fill the warm session queues."""
        if not ray.is_initialized():
            start_local_ray()
        if self.config.backend == "container":
            reap_orphan_containers()
        starts = [self._start_worker(env) for env, count in self.config.envs.items() for _ in range(count)]
        workers = await asyncio.gather(*starts, return_exceptions=True)
        failures = [w for w in workers if isinstance(w, BaseException)]
        for worker in workers:
            if isinstance(worker, _Worker):
                self.workers.setdefault(worker.env, []).append(worker)
        if failures:
            await self.shutdown()
            raise InfrastructureError(
                InfraCause.START_FAILED, f"{len(failures)} worker(s) failed: {failures[0]}"
            )
        await asyncio.gather(*(self._refill(w) for ws in self.workers.values() for w in ws))
        self._health_task = asyncio.create_task(self._health_loop())

    async def _start_worker(self, env: str, worker_id: str | None = None) -> _Worker:
        worker_id = worker_id or f"{env.replace('/', '_').split('/')[-1][-24:]}-{next(self._ids)}"
        spec = WorkerSpec(
            env_ref=env,
            worker_id=worker_id,
            backend=self.config.backend,
            owner=self.owner,
            image=self.config.image,
            process_limits=self.config.process_limits,
            memory_mb=self.config.container_memory_mb,
            cpus=self.config.container_cpus,
            pids=self.config.container_pids,
            start_timeout_s=self.config.start_timeout_s,
        )
        options: dict[str, Any] = (
            {"resources": self.config.worker_resources} if self.config.worker_resources else {}
        )
        # Where environments are found is the driver's choice, not the (possibly older) Ray worker's.
        # A Ray this process started already gives its workers these values: then no runtime env, so
        # the actor can take one of the workers Ray started in advance instead of a fresh process.
        located = _locations()
        if located and (_ray_address(), located) != _inherited_locations:
            options["runtime_env"] = {"env_vars": located}
        actor = EnvWorker.options(**options).remote(spec)
        try:
            endpoint = await actor.start.remote()
        except Exception:
            ray.kill(actor)
            raise
        return _Worker(env, worker_id, actor, endpoint, endpoint.control(), self._mcp_http(endpoint))

    def _mcp_http(self, endpoint: Endpoint) -> McpHttpClient:
        return endpoint.mcp_http(self.config.mcp_connections_per_worker)

    async def shutdown(self) -> None:
        """Close all sessions and stop every worker and its server; nothing is left running."""
        self._closed = True
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        for task in list(self._tasks):
            task.cancel()
        all_workers = [w for ws in self.workers.values() for w in ws]
        for worker in all_workers:
            for lease in list(worker.leases):
                lease.broken = InfrastructureError(InfraCause.POOL_CLOSED, "pool shut down", env=worker.env)
                await lease._close_client()
        await asyncio.gather(*(self._stop_worker(w) for w in all_workers), return_exceptions=True)
        self.workers.clear()

    async def _stop_worker(self, worker: _Worker) -> None:
        with contextlib.suppress(Exception):
            await worker.control.aclose()
        with contextlib.suppress(Exception):
            await worker.mcp.aclose()
        try:
            await asyncio.wait_for(worker.actor.stop.remote(), 30)
        except Exception:
            logger.warning("worker %s did not stop cleanly", worker.worker_id)
        ray.kill(worker.actor, no_restart=True)

    async def info(self, env: str) -> dict[str, Any]:
        """What a server of ``env`` says about it: name, category, tools, tables."""
        workers = self.workers[env]
        worker = next((w for w in workers if w.healthy), workers[0])
        return await worker.control.info()

    # -- leasing ------------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def session(self, env: str) -> AsyncIterator[Lease]:
        """``async with pool.session("airline") as s:`` one fresh isolated session, released on exit."""
        lease = await self.lease(env)
        try:
            yield lease
        finally:
            await self.release(lease)

    async def lease(self, env: str) -> Lease:
        """A fresh session on the least-loaded healthy worker of ``env``."""
        if self._closed:
            raise InfrastructureError(InfraCause.POOL_CLOSED, "pool is shut down", env=env)
        candidates = [w for w in self.workers.get(env, []) if w.healthy]
        if not candidates:
            if env not in self.workers:
                raise KeyError(f"environment {env!r} is not in this pool; it has {sorted(self.workers)}")
            raise InfrastructureError(
                InfraCause.NO_CAPACITY, f"no healthy worker for {env} right now", env=env
            )
        worker = min(candidates, key=lambda w: (len(w.leases), -len(w.warm)))
        if worker.warm:
            session_id = worker.warm.popleft()
        else:
            try:
                session_id = await worker.control.create_session()
            except ControlError as exc:
                raise InfrastructureError(
                    InfraCause.SERVER_UNREACHABLE, str(exc), env=env, worker=worker.worker_id
                ) from exc
        lease = Lease(self, worker, session_id)
        worker.leases.add(lease)
        self._spawn(self._refill(worker))
        return lease

    async def release(self, lease: Lease) -> None:
        """End the episode's session (its state is discarded)."""
        await lease._close_client()
        worker = lease.worker
        worker.leases.discard(lease)
        if lease.broken is None and worker.healthy and lease.generation == worker.generation:
            self._spawn(self._close_session(worker, lease.session_id))

    async def _close_session(self, worker: _Worker, session_id: str) -> None:
        with contextlib.suppress(ControlError):
            await worker.control.close_session(session_id)

    async def _refill(self, worker: _Worker) -> None:
        """Top the worker's warm queue up (one refill at a time per worker, so bursts do not stampede)."""
        if worker.refilling:
            return
        worker.refilling = True
        generation = worker.generation
        try:
            while (
                not self._closed
                and worker.healthy
                and generation == worker.generation
                and len(worker.warm) < self.config.warm_sessions_per_worker
            ):
                try:
                    session_id = await worker.control.create_session()
                except ControlError:
                    return
                if generation == worker.generation:
                    worker.warm.append(session_id)
        finally:
            worker.refilling = False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- failures -----------------------------------------------------------------------------------
    async def diagnose(self, lease: Lease, exc: BaseException) -> InfrastructureError:
        """Classify a failed data-plane or control call: a dead worker, or an unreachable server."""
        if lease.broken is not None:
            return lease.broken
        worker = lease.worker
        if lease.generation != worker.generation or await self._verdict(worker) == "dead":
            error = InfrastructureError(
                InfraCause.WORKER_DIED,
                f"worker {worker.worker_id} died mid-episode ({exc!r:.200})",
                env=worker.env,
                worker=worker.worker_id,
            )
            self.condemn(worker, error)
            return error
        return InfrastructureError(
            InfraCause.SERVER_UNREACHABLE,
            f"call failed: {exc!r:.300}",
            env=worker.env,
            worker=worker.worker_id,
        )

    async def _verdict(self, worker: _Worker) -> str:
        """The probe's verdict, asked twice when the first probe times out: a loaded machine can delay a
        dead worker's answer past one probe's timeout, and a death must not be reported as unreachable."""
        verdict = await self._probe(worker)
        return await self._probe(worker) if verdict == "unreachable" else verdict

    async def _probe(self, worker: _Worker) -> str:
        """The worker's verdict on its server (``EnvWorker.health``); ``"dead"`` when its actor is gone."""
        try:
            return str(await asyncio.wait_for(worker.actor.health.remote(), 5))
        except TimeoutError:
            return "unreachable"
        except Exception:
            return "dead"

    def condemn(self, worker: _Worker, error: InfrastructureError) -> None:
        """Mark a worker dead, break its leases, and replace it in the background."""
        if not worker.healthy:
            return
        worker.healthy = False
        worker.failed_checks, worker.failing_since = 0, None
        for lease in worker.leases:
            lease.broken = lease.broken or error
        worker.warm.clear()
        worker.replacing = asyncio.create_task(self._replace(worker))

    async def _replace(self, worker: _Worker) -> None:
        """Restart the server through its actor; if the actor itself is gone, start a new actor."""
        while not self._closed:
            try:
                try:
                    endpoint = await asyncio.wait_for(
                        worker.actor.restart.remote(), self.config.start_timeout_s
                    )
                except ray.exceptions.RayActorError:
                    fresh = await self._start_worker(worker.env, worker.worker_id)
                    worker.actor, endpoint = fresh.actor, fresh.endpoint
                    await fresh.control.aclose()
                    await fresh.mcp.aclose()
                await worker.control.aclose()
                await worker.mcp.aclose()
                worker.endpoint, worker.control = endpoint, endpoint.control()
                worker.mcp = self._mcp_http(endpoint)
                worker.generation += 1
                worker.leases = {lease for lease in worker.leases if lease.broken is None}
                worker.healthy = True
                self.replacements += 1
                await self._refill(worker)
                return
            except Exception:
                logger.exception("replacing worker %s failed; retrying", worker.worker_id)
                await asyncio.sleep(1.0)

    async def _health_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.health_interval_s)
            workers = [w for ws in self.workers.values() for w in ws if w.healthy]
            await asyncio.gather(*(self._check(worker) for worker in workers))

    async def _check(self, worker: _Worker) -> None:
        """One health check of ``worker``: condemn it when its server is gone, or has failed its checks
        ``health_failures`` times in a row over at least ``health_window_s``; expire old leases."""
        verdict = await self._probe(worker)
        now = time.monotonic()
        if verdict != "ok":
            worker.failed_checks += 1
            worker.failing_since = worker.failing_since or now
            lasting = now - worker.failing_since >= self.config.health_window_s
            if verdict == "dead" or (worker.failed_checks >= self.config.health_failures and lasting):
                what = "is gone" if verdict == "dead" else f"failed {worker.failed_checks} health checks"
                self.condemn(
                    worker,
                    InfrastructureError(
                        InfraCause.WORKER_DIED,
                        f"worker {worker.worker_id}'s server {what}",
                        env=worker.env,
                        worker=worker.worker_id,
                    ),
                )
            return
        worker.failed_checks, worker.failing_since = 0, None
        for lease in list(worker.leases):
            if lease.broken is None and now - lease.created_at > self.config.session_ttl_s:
                lease.broken = InfrastructureError(
                    InfraCause.SESSION_EXPIRED, "session TTL reached", env=worker.env
                )
                self._spawn(self._close_session(worker, lease.session_id))

    async def wait_healthy(self, timeout: float = 60.0) -> None:
        """Wait until every worker is healthy again (after faults)."""
        deadline = time.monotonic() + timeout
        while any(not w.healthy for ws in self.workers.values() for w in ws):
            if time.monotonic() > deadline:
                raise TimeoutError("workers did not recover in time")
            await asyncio.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        return {
            env: [
                {
                    "worker": w.worker_id,
                    "healthy": w.healthy,
                    "leases": len(w.leases),
                    "warm": len(w.warm),
                    "generation": w.generation,
                }
                for w in ws
            ]
            for env, ws in self.workers.items()
        }


def reap_orphan_containers() -> int:
    """Remove arena containers whose driver is gone (left behind by a killed driver)."""
    from arena.runtime.containers import reap_arena_containers
    from arena.runtime.engine import OWNER_LABEL, engine_client

    client = engine_client()
    if client is None:
        return 0
    owners = {
        c.labels.get(OWNER_LABEL, "")
        for c in client.containers.list(all=True, filters={"label": "agent-arena=1"})
    }
    return sum(
        reap_arena_containers(client, owner) for owner in owners if owner and not owner_is_alive(owner)
    )
