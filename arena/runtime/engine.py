"""Finding a container engine that speaks the Docker API (Docker Engine or Podman's compat service)."""

from __future__ import annotations

import os
from pathlib import Path

import docker
from docker.errors import DockerException

ARENA_LABEL = "agent-arena"
"""Every container and image the arena creates carries ``agent-arena=1``; reaping keys on it."""
OWNER_LABEL = f"{ARENA_LABEL}.owner"
"""Who started a container (a pool or worker id), so one owner's containers can be reaped alone."""
ENV_LABEL = f"{ARENA_LABEL}.env"
"""The environment a container serves."""
CONTENT_HASH_LABEL = f"{ARENA_LABEL}.content-hash"
"""On images: digest of what went into the image, for cache hits."""

PODMAN_SOCKET = "unix:///run/podman.sock"
DOCKER_SOCKET = "unix:///var/run/docker.sock"


def candidate_urls() -> list[str]:
    """Engine URLs to try, in order: ``$DOCKER_HOST``, the Podman socket, the Docker socket."""
    urls = [os.environ["DOCKER_HOST"]] if os.environ.get("DOCKER_HOST") else []
    urls += [url for url in (PODMAN_SOCKET, DOCKER_SOCKET) if url not in urls]
    return urls


def _ping(url: str, timeout: float) -> docker.DockerClient | None:
    if url.startswith("unix://") and not Path(url.removeprefix("unix://")).is_socket():
        return None
    try:
        client = docker.DockerClient(base_url=url, timeout=timeout)
    except DockerException:
        return None
    try:
        if client.ping():
            return client
    except (DockerException, OSError):
        pass
    client.close()
    return None


def engine_client(timeout: float = 5) -> docker.DockerClient | None:
    """A client for the first engine that answers a ping, or ``None`` when none does.

    ``timeout`` bounds each ping and becomes the client's default API timeout.
    """
    for url in candidate_urls():
        client = _ping(url, timeout)
        if client is not None:
            return client
    return None
