"""``EnvWorker``: a Ray actor that owns one environment server (process or container) and its health."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field

import httpx
import ray

from arena.runtime.backends import ContainerBackend, ProcessBackend, ProcessLimits, ServerBackend
from arena.runtime.endpoint import Endpoint

PROBE_KEEPALIVE_S = 90.0
"""How long the health probe's connection may idle before it is dropped (the control listener keeps
an idle connection 120 s; the pool probes every second)."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to start its server; plain data so it can travel to the actor."""

    env_ref: str
    worker_id: str
    backend: str = "process"
    owner: str = ""
    image: str = "localhost/agent-arena-env:latest"
    process_limits: ProcessLimits = field(default_factory=ProcessLimits)
    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256
    start_timeout_s: float = 60.0

    def make_backend(self) -> ServerBackend:
        if self.backend == "process":
            return ProcessBackend(self.env_ref, self.worker_id, self.process_limits)
        if self.backend == "container":
            return ContainerBackend(
                self.env_ref, self.worker_id, self.owner, self.image, self.memory_mb, self.cpus, self.pids
            )
        raise ValueError(f"unknown backend {self.backend!r}; use 'process' or 'container'")


@ray.remote(num_cpus=0, max_restarts=0)
class EnvWorker:
    """Starts, watches, restarts and stops one environment server.

    The arena's data plane does not pass through this actor: rollouts talk MCP straight to the
    server at ``endpoint()``; the actor only handles lifecycle (the control plane).
    """

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.backend: ServerBackend = spec.make_backend()
        self._endpoint: Endpoint | None = None
        self._probe: httpx.AsyncClient | None = None

    async def start(self) -> Endpoint:
        self._endpoint = await asyncio.to_thread(self.backend.start, self.spec.start_timeout_s)
        return self._endpoint

    async def endpoint(self) -> Endpoint | None:
        return self._endpoint

    async def health(self, timeout: float = 2.0) -> str:
        """``"ok"``: the server runs and answers ``/control/health`` (on the control plane's own
        listener: a busy data plane or a long program does not make it look dead); ``"dead"``: its
        process or container is gone; ``"unreachable"``: it runs but did not answer this time.

        The probe keeps one connection open to the server (authenticated, kept alive between
        probes): a local process that fills the control listener's connection cap delays only new
        connections, so it cannot make a healthy server look dead."""
        if self._endpoint is None or not self.backend.alive():
            return "dead"
        try:
            response = await self._prober().get(
                f"{self._endpoint.control_base}/control/health", timeout=timeout
            )
        except httpx.HTTPError:
            return "unreachable"
        return "ok" if response.status_code == 200 else "unreachable"

    def _prober(self) -> httpx.AsyncClient:
        if self._probe is None:
            assert self._endpoint is not None
            uds = self._endpoint.control_uds or self._endpoint.uds
            self._probe = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=uds) if uds else None,
                headers={"authorization": f"Bearer {self._endpoint.control_token}"},
                limits=httpx.Limits(max_connections=1, keepalive_expiry=PROBE_KEEPALIVE_S),
            )
        return self._probe

    async def _close_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            await probe.aclose()

    async def restart(self) -> Endpoint:
        """Replace the server with a fresh one (all its sessions are lost, so the old one is killed at
        once: a server being replaced is often stuck and would only use up a graceful-stop timeout)."""
        await self._close_probe()
        await asyncio.to_thread(self.backend.kill)
        await asyncio.to_thread(self.backend.stop)
        self.backend = self.spec.make_backend()
        return await self.start()

    async def kill_server(self) -> None:
        """Fault injection for tests: kill the server without telling anyone."""
        await asyncio.to_thread(self.backend.kill)

    async def describe(self) -> dict[str, object]:
        info: dict[str, object] = {
            "spec": asdict(self.spec),
            "alive": self.backend.alive(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }
        pid = getattr(self.backend, "pid", None)
        if pid is not None:
            info["pid"] = pid
        return info

    async def stop(self) -> None:
        await self._close_probe()
        await asyncio.to_thread(self.backend.stop)
        self._endpoint = None
