"""Where an environment server runs: a local child process (with rlimits) or a hardened container."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import secrets
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from docker.errors import APIError, NotFound
from docker.models.containers import Container

from arena.runtime.containers import (
    ContainerLimits,
    arena_labels,
    container_alive,
    socket_path,
    start_env_container,
    wait_ready,
)
from arena.runtime.endpoint import UDS_BASE_URL, Endpoint
from arena.runtime.engine import engine_client
from environments.serving.options import control_socket
from environments.serving.process import ServerProcess

PR_SET_PDEATHSIG = 1
CONTAINER_ENV_ROOT = "/opt/arena/envs"


@dataclass(frozen=True)
class ProcessLimits:
    """rlimits applied to a local environment server process (None = unlimited)."""

    address_space_mb: int | None = 2048
    cpu_seconds: int | None = None
    open_files: int = 4096


class ServerBackend(Protocol):
    """One environment server's lifecycle, independent of where it runs."""

    kind: str

    def start(self, timeout: float) -> Endpoint: ...
    def alive(self) -> bool: ...
    def stop(self) -> None: ...
    def kill(self) -> None: ...


def _limit_child(limits: ProcessLimits) -> None:
    """Runs in the child before exec: die with the parent, run at normal priority, then apply rlimits.

    Ray starts its workers (our ``EnvWorker`` actors) at nice 15; a server inheriting that loses the CPU to
    every normal-priority process whenever cores are contended, and agents' calls wait behind them.
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    with contextlib.suppress(PermissionError):  # lowering niceness needs CAP_SYS_NICE or RLIMIT_NICE
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    if limits.address_space_mb is not None:
        size = limits.address_space_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if limits.cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))


@dataclass
class ProcessBackend:
    """The server as a child process in its own process group, killed with its parent (PDEATHSIG)."""

    env_ref: str
    worker_id: str
    limits: ProcessLimits = field(default_factory=ProcessLimits)
    kind: str = "process"
    server: ServerProcess | None = None

    def start(self, timeout: float) -> Endpoint:
        limits = self.limits
        self.server = ServerProcess(self.env_ref, preexec=lambda: _limit_child(limits)).start(timeout)
        server = self.server
        return Endpoint(
            self.env_ref,
            self.worker_id,
            server.base_url,
            server.control_token,
            control_url=server.control_url,
        )

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def kill(self) -> None:
        if self.server is not None and self.server.alive():
            os.killpg(self.server.pid, signal.SIGKILL)

    @property
    def pid(self) -> int | None:
        return self.server.pid if self.server is not None else None


@dataclass
class ContainerBackend:
    """The server in a hardened container without network, reached through a Unix socket."""

    env_ref: str
    worker_id: str
    owner: str
    image: str
    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256
    kind: str = "container"
    container: Container | None = None
    socket_dir: Path | None = None

    def start(self, timeout: float) -> Endpoint:
        client = engine_client()
        if client is None:
            raise RuntimeError("no container engine reachable (set DOCKER_HOST; see infra/podman/setup.sh)")
        token = secrets.token_urlsafe(24)
        self.socket_dir = Path(tempfile.mkdtemp(prefix=f"arena-sock-{self.worker_id}-"))
        env_ref, mounts = self.env_ref, {}
        local = Path(self.env_ref)
        if local.is_dir():  # an environment package outside the image: mount it read-only
            env_ref = f"{CONTAINER_ENV_ROOT}/{local.name}"
            mounts = {local.resolve(): env_ref}
        name = f"arena-{self.worker_id}-{secrets.token_hex(3)}"
        try:
            self.container = start_env_container(
                client,
                image=self.image,
                env_ref=env_ref,
                socket_dir=self.socket_dir,
                control_token=token,
                limits=ContainerLimits(memory_mb=self.memory_mb, cpus=self.cpus, pids=self.pids),
                labels=arena_labels(self.owner, **{"agent-arena.worker": self.worker_id}),
                name=name,
                extra_mounts=mounts,
            )
        except APIError:  # created but not started: remove it, nothing else tracks it
            with contextlib.suppress(APIError):
                client.containers.get(name).remove(force=True)
            raise
        sock = socket_path(self.socket_dir)
        control = control_socket(sock)
        wait_ready(self.container, sock, timeout)
        return Endpoint(
            self.env_ref, self.worker_id, UDS_BASE_URL, token, uds=str(sock), control_uds=str(control)
        )

    def alive(self) -> bool:
        return self.container is not None and container_alive(self.container)

    def stop(self) -> None:
        if self.container is not None:
            with contextlib.suppress(NotFound):
                self.container.remove(force=True)
            self.container = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def kill(self) -> None:
        if self.container is not None:
            with contextlib.suppress(APIError):  # already exited (crashed, OOM-killed) or gone
                self.container.kill()


def pool_owner_id() -> str:
    """Identifies this driver process; containers carry it so orphans can be recognised later."""
    return f"pool-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def owner_is_alive(owner: str) -> bool:
    """Whether the driver that labelled a container as ``owner`` still runs (on this host)."""
    parts = owner.split("-")
    if len(parts) < 4 or parts[0] != "pool":
        return True
    host, pid = "-".join(parts[1:-2]), parts[-2]
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
