"""Running environment servers in hardened containers, reached through a Unix socket.

The container has no network at all (``network_mode="none"``). The server listens on
``/run/arena/env.sock`` inside it; that directory is a bind mount of a host directory, so the host
reaches the MCP server (and the control plane) through the socket file on its side. Everything the
arena starts is labelled ``agent-arena=1`` plus an owner id, so it can be found and reaped.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
from docker.errors import NotFound
from docker.models.containers import Container

from arena.runtime.engine import ARENA_LABEL, ENV_LABEL, OWNER_LABEL
from environments.serving.options import control_socket

CONTAINER_UID = 10001
"""The ``arena`` user of the image; the server never runs as root."""
CONTAINER_SOCKET_DIR = "/run/arena"
SOCKET_NAME = "env.sock"
TMPFS_PATHS = ("/tmp", "/run", "/var/tmp")
ENV_SLOT_RESOURCE = "arena_env_slots"
"""Ray custom resource a node advertises when it can run environment containers (one unit each)."""
SOCKET_BASE_URL = "http://localhost:8000"
"""Base URL for requests over the socket. The port means nothing on a Unix socket, but the MCP server's
DNS-rebinding guard only accepts ``localhost:<port>`` Host headers, so one must be present."""
LOG_TAIL_LINES = 40
POLL_INTERVAL = 0.02
STATE_CHECK_INTERVAL = 0.25


class ContainerStartError(RuntimeError):
    """A container exited or did not become healthy in time; the message carries its log tail."""


@dataclass(frozen=True)
class ContainerLimits:
    """Resource limits of one environment container (``tmpfs_mb`` bounds each of ``TMPFS_PATHS``)."""

    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256
    tmpfs_mb: int = 64


def arena_labels(owner: str, **extra: str) -> dict[str, str]:
    """The labels of an arena container owned by ``owner`` (a pool or worker id), plus ``extra``."""
    return {ARENA_LABEL: "1", OWNER_LABEL: owner, **extra}


def socket_path(socket_dir: Path) -> Path:
    """The host-side path of the server socket of a container started with ``socket_dir``."""
    return socket_dir / SOCKET_NAME


def hardening_options(limits: ContainerLimits) -> dict[str, Any]:
    """``containers.run`` keyword arguments that confine an environment server."""
    memory = f"{limits.memory_mb}m"
    return {
        "network_mode": "none",
        "read_only": True,
        # Podman mounts unbounded tmpfs on /run and /var/tmp of read-only containers; bound them too.
        "tmpfs": {path: f"rw,nosuid,nodev,noexec,size={limits.tmpfs_mb}m,mode=1777" for path in TMPFS_PATHS},
        "user": f"{CONTAINER_UID}:{CONTAINER_UID}",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
    }


def _prepare_socket_dir(socket_dir: Path) -> None:
    """Create ``socket_dir`` so that the container user can create its socket there."""
    socket_dir.mkdir(parents=True, exist_ok=True)
    socket_path(socket_dir).unlink(missing_ok=True)
    if os.geteuid() == 0:
        os.chown(socket_dir, CONTAINER_UID, CONTAINER_UID)
        socket_dir.chmod(0o750)
    else:
        # Without root the directory cannot be given to uid 10001; open it up instead.
        socket_dir.chmod(0o777)


def start_env_container(
    client: docker.DockerClient,
    *,
    image: str,
    env_ref: str,
    socket_dir: Path,
    control_token: str,
    limits: ContainerLimits | None = None,
    labels: Mapping[str, str],
    name: str | None = None,
    extra_mounts: Mapping[Path, str] | None = None,
) -> Container:
    """Start a hardened container serving ``env_ref`` on ``socket_dir/env.sock`` and return it at once.

    ``extra_mounts`` maps host paths to in-container paths, mounted read-only (e.g. an environment
    package outside the image, then passed as ``env_ref``). Call ``wait_ready`` before use.
    """
    _prepare_socket_dir(socket_dir)
    volumes = {str(socket_dir): {"bind": CONTAINER_SOCKET_DIR, "mode": "rw"}}
    for host_path, container_path in (extra_mounts or {}).items():
        volumes[str(host_path)] = {"bind": container_path, "mode": "ro"}
    command = [env_ref, "--transport", "http", "--uds", f"{CONTAINER_SOCKET_DIR}/{SOCKET_NAME}"]
    return client.containers.run(
        image,
        command=command,
        name=name,
        detach=True,
        labels={**labels, ARENA_LABEL: "1", ENV_LABEL: env_ref},
        # Programs run under bubblewrap when it can start in the container, else as plain child processes
        # with the container as their OS boundary (see docs/security.md).
        environment={"ARENA_CONTROL_TOKEN": control_token, "ARENA_SANDBOX": "auto"},
        volumes=volumes,
        **hardening_options(limits or ContainerLimits()),
    )


def container_alive(container: Container) -> bool:
    """Whether the container still exists and is running (refreshes its state from the engine)."""
    try:
        container.reload()
    except NotFound:
        return False
    return container.status == "running"


def logs_tail(container: Container, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the container's output (empty when it is gone)."""
    try:
        tail = container.logs(tail=lines)
        if not tail.strip():  # Podman's Docker API sometimes answers a tail request with a bare newline
            tail = b"\n".join(container.logs().splitlines()[-lines:])
        return tail.decode(errors="replace")
    except NotFound:
        return ""


def wait_ready(container: Container, socket_path: Path, timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``GET /control/health`` over the control socket beside the data socket ``socket_path`` until
    it answers; return its JSON body.

    Raises ``ContainerStartError`` (with the container's log tail) if the container exits first
    or no healthy answer comes within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    next_state_check = 0.0
    socket_path = control_socket(socket_path)
    transport = httpx.HTTPTransport(uds=str(socket_path))
    with httpx.Client(transport=transport, timeout=2.0) as http:
        while True:
            if socket_path.exists():
                with contextlib.suppress(httpx.TransportError):
                    response = http.get(f"{SOCKET_BASE_URL}/control/health")
                    if response.status_code == 200:
                        return response.json()
            now = time.monotonic()
            if now >= next_state_check:  # asking the engine is dearer than the socket: 4 times a second
                next_state_check = now + STATE_CHECK_INTERVAL
                _raise_if_exited(container)
            if now > deadline:
                raise ContainerStartError(
                    f"container {container.name} not healthy after {timeout:.0f}s; "
                    f"log tail:\n{logs_tail(container)}"
                )
            time.sleep(POLL_INTERVAL)


def _raise_if_exited(container: Container) -> None:
    if not container_alive(container):
        code = container.attrs.get("State", {}).get("ExitCode")
        raise ContainerStartError(
            f"container {container.name} exited (code {code}) before it was healthy; "
            f"log tail:\n{logs_tail(container)}"
        )


def reap_arena_containers(client: docker.DockerClient, owner: str | None = None) -> int:
    """Force-remove every arena-labelled container (only ``owner``'s when given); return how many."""
    filters = [f"{ARENA_LABEL}=1"] + ([f"{OWNER_LABEL}={owner}"] if owner else [])
    removed = 0
    for container in client.containers.list(all=True, filters={"label": filters}):
        with contextlib.suppress(NotFound):
            container.remove(force=True)
            removed += 1
    return removed
