"""Building the environment server image through the Docker API (Docker Engine or Podman).

Two paths share one staged build context (``Dockerfile``, ``requirements.txt``, ``prebuild_seeds.py``,
``project/<wheel>``):

- online: ``infra/docker/Dockerfile`` on ``python:3.11-slim``, dependencies from PyPI;
- offline: ``infra/docker/Dockerfile.offline`` on a local base image made once by ``debootstrap``,
  dependencies from a wheelhouse made on the host (cached under ``~/.cache/agent-arena/wheelhouse``).

The image is labelled with a content hash of everything that goes into it; when the tag already
carries that hash the build is skipped.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound
from docker.models.images import Image

from arena.runtime.engine import ARENA_LABEL, CONTENT_HASH_LABEL, engine_client

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = PROJECT_ROOT / "infra" / "docker"
DEFAULT_TAG = "localhost/agent-arena-env:latest"
BASE_IMAGE = "localhost/arena-base:bookworm"
ONLINE_BASE = "docker.io/library/python:3.11-slim"
REGISTRY_PROBE = ("registry-1.docker.io", 443)
DEBIAN_MIRROR = os.environ.get("ARENA_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SERVER_PACKAGES = frozenset(
    {
        "mcp",
        "sqlalchemy",
        "pydantic",
        "starlette",
        "uvicorn",
        "httptools",
        "httpx",
        "jsonschema",
        "rich",
        "regex",
    }
)
"""The only runtime dependencies of ``python -m environments.serving`` (not ray, hydra, docker...)."""
PROJECT_PACKAGES = ("arena", "environments", "task_synth", "trainers")
PROJECT_SUFFIXES = frozenset({".py", ".yaml", ".json", ".md", ".txt", ".tmpl"})
# The interpreter inside the image (Debian bookworm and python:3.11-slim): wheels are fetched for it.
TARGET_PYTHON = "3.11"
TARGET_GLIBC_MINOR = 36
LOG_TAIL_LINES = 30

Progress = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """The image cannot be built; the message says why and carries the failing log tail."""


@dataclass(frozen=True)
class ImageBuildResult:
    """What ``build_image`` produced (or found already built)."""

    tag: str
    image_id: str
    size_bytes: int
    seconds: float
    cached: bool
    offline: bool
    content_hash: str

    def summary(self) -> str:
        """One line: tag, short id, size, seconds, cached/built."""
        state = "cached" if self.cached else "built"
        mode = "offline" if self.offline else "online"
        short_id = self.image_id.removeprefix("sha256:")[:12]
        size_mb = self.size_bytes / 1e6
        return f"{self.tag} {short_id} {size_mb:.0f} MB {self.seconds:.1f}s {state} ({mode})"


def _quiet(_: str) -> None:
    """Default progress sink."""


def build_image(
    offline: bool | None = None,
    force: bool = False,
    tag: str = DEFAULT_TAG,
    progress: Progress | None = None,
    client: docker.DockerClient | None = None,
) -> ImageBuildResult:
    """Build the environment server image ``tag`` unless it is already up to date.

    ``offline=None`` picks the offline path when no registry is reachable. ``force`` rebuilds even
    on a content-hash match. ``progress`` receives human-readable lines (build log included).
    Raises ``ImageBuildError`` when no engine answers, a tool is missing, or a build step fails.
    """
    started = time.monotonic()
    say = progress or _quiet
    client = client or _require_engine()
    requirements = server_requirements()
    modes = [False, True] if offline is None else [offline]
    digests = {mode: content_hash(requirements, _dockerfile(mode)) for mode in modes}
    hit = None if force else _cached_image(client, tag, digests)
    if hit is not None:
        mode, image = hit
        say(f"{tag} is up to date (content hash {digests[mode][:12]})")
    else:
        mode = _resolve_offline(client, offline, say)
        image = _build(client, tag, mode, requirements, digests[mode], say)
    return ImageBuildResult(
        tag=tag,
        image_id=image.id or "",
        size_bytes=int(image.attrs.get("Size") or 0),
        seconds=time.monotonic() - started,
        cached=hit is not None,
        offline=mode,
        content_hash=digests[mode],
    )


def _dockerfile(offline: bool) -> Path:
    return DOCKER_DIR / ("Dockerfile.offline" if offline else "Dockerfile")


def _build(
    client: docker.DockerClient, tag: str, offline: bool, requirements: list[str], digest: str, say: Progress
) -> Image:
    try:
        if offline:
            ensure_base_image(client, say)
        with tempfile.TemporaryDirectory(prefix="arena-image-") as context:
            stage_context(Path(context), _dockerfile(offline), requirements, offline, say)
            return _run_build(client, Path(context), tag, digest, say)
    except DockerException as exc:
        raise ImageBuildError(f"container engine error: {exc}") from exc


def _require_engine() -> docker.DockerClient:
    client = engine_client()
    if client is None:
        raise ImageBuildError(
            "no container engine answers (tried $DOCKER_HOST, unix:///run/podman.sock, "
            "unix:///var/run/docker.sock); run `infra/podman/setup.sh` as root or start Docker"
        )
    return client


# -- inputs and their hash -------------------------------------------------------------------------


def server_requirements(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """The project's dependency specifiers that the environment server needs, as written in pyproject."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return sorted(dep for dep in deps if _requirement_name(dep) in SERVER_PACKAGES)


def _requirement_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec.strip())
    return match.group(0).lower().replace("_", "-") if match else ""


def project_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """The project files that go into the image's wheel (a superset is fine: it only costs a rebuild)."""
    files = [root / name for name in ("pyproject.toml", "README.md") if (root / name).is_file()]
    for package in PROJECT_PACKAGES:
        files.extend(
            path
            for path in (root / package).rglob("*")
            if path.suffix in PROJECT_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
        )
    return sorted(files)


def content_hash(requirements: Iterable[str], dockerfile: Path, root: Path = PROJECT_ROOT) -> str:
    """SHA-256 over the requirements, the Dockerfile, the seed prebuild script and the project sources."""
    digest = hashlib.sha256()
    digest.update("\n".join(requirements).encode())
    for path in [dockerfile, DOCKER_DIR / "prebuild_seeds.py", *project_files(root)]:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _cached_image(
    client: docker.DockerClient, tag: str, digests: dict[bool, str]
) -> tuple[bool, Image] | None:
    """``(offline, image)`` when ``tag`` exists and carries one of ``digests`` (keyed by offline)."""
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    label = image.labels.get(CONTENT_HASH_LABEL)
    for mode, digest in digests.items():
        if label == digest:
            return mode, image
    return None


# -- online or offline -----------------------------------------------------------------------------


def _resolve_offline(client: docker.DockerClient, offline: bool | None, say: Progress) -> bool:
    if offline is not None:
        return offline
    if _has_image(client, ONLINE_BASE) or registry_reachable():
        return False
    say(f"no registry reachable ({REGISTRY_PROBE[0]}): using the offline build")
    return True


def registry_reachable(timeout: float = 3.0) -> bool:
    """Whether the default registry accepts a TCP connection (DNS failure or refusal fail fast)."""
    try:
        with socket.create_connection(REGISTRY_PROBE, timeout=timeout):
            return True
    except OSError:
        return False


def _has_image(client: docker.DockerClient, name: str) -> bool:
    try:
        client.images.get(name)
    except ImageNotFound:
        return False
    return True


# -- offline base image ----------------------------------------------------------------------------


def ensure_base_image(client: docker.DockerClient, say: Progress) -> None:
    """Make ``localhost/arena-base:bookworm`` with debootstrap unless the engine already has it."""
    if _has_image(client, BASE_IMAGE):
        say(f"base image {BASE_IMAGE} present")
        return
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is missing: `apt-get install debootstrap` (infra/podman/setup.sh does)"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("making the offline base image with debootstrap needs root")
    with tempfile.TemporaryDirectory(prefix="arena-rootfs-", dir="/var/tmp") as work:
        rootfs, tarball = Path(work) / "rootfs", Path(work) / "rootfs.tar"
        say(f"debootstrap bookworm from {DEBIAN_MIRROR} (about a minute, once)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,bubblewrap",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            "debootstrap",
            say,
        )
        _slim_rootfs(rootfs)
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], "tar", say)
        say(f"importing {BASE_IMAGE}")
        # The repository may carry the tag (Docker API); Podman ignores a separate ``tag``.
        client.api.import_image_from_file(
            str(tarball), repository=BASE_IMAGE, changes=[f"LABEL {ARENA_LABEL}=1", 'CMD ["/bin/bash"]']
        )
    if not _has_image(client, BASE_IMAGE):
        raise ImageBuildError(f"importing the debootstrap root fs did not produce {BASE_IMAGE}")


def _slim_rootfs(rootfs: Path) -> None:
    """Drop package caches and docs the server never needs."""
    for sub in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
    ):
        target = rootfs / sub
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()


def _run(cmd: list[str], what: str, say: Progress) -> None:
    """Run a host command, streaming its output to ``say``; fail with the log tail."""
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}  # setuptools deprecation banners drown the log
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            say(line.rstrip())
    if proc.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}); last lines:\n" + "\n".join(tail))


# -- build context ---------------------------------------------------------------------------------


def stage_context(
    context: Path, dockerfile: Path, requirements: list[str], offline: bool, say: Progress
) -> None:
    """Fill ``context`` with the Dockerfile, requirements, seed script, project wheel (and wheelhouse)."""
    shutil.copyfile(dockerfile, context / "Dockerfile")
    shutil.copyfile(DOCKER_DIR / "prebuild_seeds.py", context / "prebuild_seeds.py")
    (context / "requirements.txt").write_text("\n".join(requirements) + "\n")
    build_project_wheel(context / "project", say)
    if offline:
        shutil.copytree(wheelhouse(requirements, say), context / "wheels")


def build_project_wheel(out_dir: Path, say: Progress, root: Path = PROJECT_ROOT) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the project sources (the tree itself is not touched)."""
    say("building the project wheel")
    with tempfile.TemporaryDirectory(prefix="arena-src-") as src:
        for path in project_files(root):
            target = Path(src) / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out_dir), src],
            "pip wheel",
            say,
        )
    wheels = list(out_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise ImageBuildError(f"expected one project wheel in {out_dir}, found {len(wheels)}")
    return wheels[0]


def wheelhouse(requirements: list[str], say: Progress) -> Path:
    """A directory of wheels for ``requirements`` (and their dependencies) for the image's Python.

    Cached under ``~/.cache/agent-arena/wheelhouse/<hash>`` keyed by the requirement list and target.
    """
    machine = platform.machine()
    key = hashlib.sha256("\n".join([*requirements, TARGET_PYTHON, machine]).encode()).hexdigest()[:16]
    target = Path.home() / ".cache" / "agent-arena" / "wheelhouse" / key
    if (target / ".complete").exists():
        say(f"wheelhouse {target} (cached)")
        return target
    say(f"downloading wheels into {target}")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(target), "--only-binary=:all:"]
    cmd += ["--python-version", TARGET_PYTHON, "--implementation", "cp"]
    for abi in (f"cp{TARGET_PYTHON.replace('.', '')}", "abi3", "none"):
        cmd += ["--abi", abi]
    for platform_tag in _glibc_platforms(machine):
        cmd += ["--platform", platform_tag]
    cmd += requirements
    _run(cmd, "pip download", say)
    (target / ".complete").touch()
    return target


def _glibc_platforms(machine: str) -> list[str]:
    """Wheel platform tags that run on the image's glibc (bookworm: 2.36); pip does not expand them."""
    return [f"manylinux_2_{minor}_{machine}" for minor in range(TARGET_GLIBC_MINOR, 16, -1)] + [
        f"manylinux2014_{machine}"  # pip adds manylinux2010 and manylinux1 for this one
    ]


# -- the build -------------------------------------------------------------------------------------


def _run_build(client: docker.DockerClient, context: Path, tag: str, digest: str, say: Progress) -> Image:
    say(f"building {tag}")
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    labels = {ARENA_LABEL: "1", CONTENT_HASH_LABEL: digest}
    try:
        stream = client.api.build(
            path=str(context), tag=tag, labels=labels, rm=True, forcerm=True, decode=True
        )
        _follow_build(stream, tail, say)
    except (APIError, BuildError) as exc:
        raise ImageBuildError(f"image build failed: {exc}\nlast lines:\n" + "\n".join(tail)) from None
    try:
        return client.images.get(tag)
    except (ImageNotFound, DockerException) as exc:
        raise ImageBuildError(f"the build finished but {tag} is missing: {exc}") from None


def _follow_build(stream: Iterator[dict[str, object]], tail: deque[str], say: Progress) -> None:
    for chunk in stream:
        if "error" in chunk:
            raise ImageBuildError(f"image build failed: {chunk['error']}\nlast lines:\n" + "\n".join(tail))
        for line in str(chunk.get("stream", "")).splitlines():
            if line.strip():
                tail.append(line)
                say(line)
