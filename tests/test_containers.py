"""Environment servers in hardened containers, for real: image build, serving over a Unix socket, isolation.

Needs a Docker-API engine (Podman here: ``infra/podman/setup.sh``). Skipped when none answers, unless
``CI`` is set: then a missing engine is a failure.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import string
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import httpx
import httpx2
import pytest
from docker.models.containers import Container
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from arena.runtime.containers import (
    CONTAINER_UID,
    SOCKET_BASE_URL,
    ContainerLimits,
    ContainerStartError,
    arena_labels,
    container_alive,
    reap_arena_containers,
    socket_path,
    start_env_container,
    wait_ready,
)
from arena.runtime.engine import ARENA_LABEL, OWNER_LABEL, engine_client
from arena.runtime.image import ImageBuildResult, build_image
from environments.serving.control import ControlClient
from environments.serving.options import control_socket
from tests.test_sandbox import escape

pytestmark = pytest.mark.container

TEMPLATE = Path(__file__).resolve().parents[1] / "environments" / "templates" / "env_init.py.tmpl"
ENV_NAME = "ct-helpdesk"
ENV_MOUNT = "/opt/arena/extra/ct_helpdesk"
TOKEN = secrets.token_urlsafe(16)

StartFn = Callable[..., tuple[Container, Path]]


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    client = engine_client()
    if client is None:
        message = "no container engine answers ($DOCKER_HOST, /run/podman.sock, /var/run/docker.sock)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {message}; run infra/podman/setup.sh or start Docker", pytrace=False)
        pytest.skip(message)
    yield client
    client.close()


@pytest.fixture(scope="session")
def image(engine: docker.DockerClient) -> ImageBuildResult:
    return build_image(client=engine)


@pytest.fixture(scope="session")
def env_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scaffolded environment package (from the ``arena env new`` template), mounted into containers."""
    package = tmp_path_factory.mktemp("envs") / "ct_helpdesk"
    package.mkdir()
    source = string.Template(TEMPLATE.read_text()).safe_substitute(name=ENV_NAME, title="Container test")
    (package / "__init__.py").write_text(source)
    package.chmod(0o755)
    package.parent.chmod(0o755)
    return package


def _arena_container_ids(engine: docker.DockerClient) -> set[str]:
    return {c.id for c in engine.containers.list(all=True, filters={"label": f"{ARENA_LABEL}=1"})}


@pytest.fixture(autouse=True)
def no_leaks(engine: docker.DockerClient) -> Iterator[None]:
    """Fail a test that leaves arena containers behind (containers of other users are not counted)."""
    before = _arena_container_ids(engine)
    yield
    leaked = _arena_container_ids(engine) - before
    for container_id in leaked:
        engine.containers.get(container_id).remove(force=True)
    assert not leaked, f"test leaked arena containers: {sorted(leaked)}"


@pytest.fixture
def owner(engine: docker.DockerClient) -> Iterator[str]:
    """A unique owner id; its containers are reaped after the test."""
    owner_id = f"test-{uuid.uuid4().hex[:8]}"
    yield owner_id
    reap_arena_containers(engine, owner_id)


@pytest.fixture
def start(
    engine: docker.DockerClient, image: ImageBuildResult, env_package: Path, owner: str, tmp_path: Path
) -> StartFn:
    """Start the scaffolded environment in a container; return it with its host socket path."""

    def _start(
        limits: ContainerLimits | None = None, env_ref: str = ENV_MOUNT, **labels: str
    ) -> tuple[Container, Path]:
        socket_dir = tmp_path / f"sock-{uuid.uuid4().hex[:6]}"
        container = start_env_container(
            engine,
            image=image.tag,
            env_ref=env_ref,
            socket_dir=socket_dir,
            control_token=TOKEN,
            limits=limits,
            labels=arena_labels(labels.pop("owner", owner), **labels),
            extra_mounts={env_package: ENV_MOUNT},
        )
        return container, socket_path(socket_dir)

    return _start


@pytest.fixture
def served(start: StartFn) -> tuple[Container, Path]:
    """A healthy container serving the scaffolded environment."""
    container, sock = start()
    wait_ready(container, sock, timeout=60)
    return container, sock


def _exec_python(container: Container, code: str) -> tuple[int, str]:
    result = container.exec_run(["python", "-c", code])
    return result.exit_code, result.output.decode(errors="replace")


def test_image_build_is_cached_on_second_call(engine: docker.DockerClient, image: ImageBuildResult) -> None:
    again = build_image(client=engine)
    if again.content_hash != image.content_hash:  # the tree changed in between (concurrent edits)
        again = build_image(client=engine)
    assert again.cached, again
    assert again.seconds < 2.0, again
    assert engine.images.get(image.tag).labels[ARENA_LABEL] == "1"


async def test_serves_environment_over_unix_socket(served: tuple[Container, Path]) -> None:
    _container, sock = served
    control = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(control_socket(sock))),
        base_url=SOCKET_BASE_URL,
        headers={"authorization": f"Bearer {TOKEN}"},
    )
    with control:
        health = control.get("/control/health").json()
        assert health["env"] == ENV_NAME and health["sandbox"] in ("bwrap", "process")
        session = control.post("/control/sessions", json={}).json()
    http_client = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=str(sock)))
    async with (
        http_client,
        Client(
            streamable_http_client(f"{SOCKET_BASE_URL}{session['mcp_path']}", http_client=http_client)
        ) as mcp,
    ):
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        assert {"find_customer", "open_ticket"} <= tools
        result = await mcp.call_tool("find_customer", {"email": "user1@example.com"})
    assert not result.is_error, result
    assert result.structured_content["email"] == "user1@example.com"


def _host_address() -> str:
    """An address of this host that a container with a network could reach."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def test_container_has_no_network(served: tuple[Container, Path]) -> None:
    container, _sock = served
    code = f"""
import json, os, socket
results = {{}}
for host, port in [("1.1.1.1", 53), ({_host_address()!r}, 22), ("10.88.0.1", 80)]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        results[host] = "connected"
    except OSError as exc:
        results[host] = type(exc).__name__ + ": " + str(exc)
results["interfaces"] = sorted(os.listdir("/sys/class/net"))
print(json.dumps(results))
"""
    exit_code, output = _exec_python(container, code)
    assert exit_code == 0, output
    results = json.loads(output)
    assert results.pop("interfaces") == ["lo"]
    assert all(outcome != "connected" for outcome in results.values()), results


def test_runs_as_non_root_with_read_only_root_and_no_capabilities(served: tuple[Container, Path]) -> None:
    container, _sock = served
    code = """
import json, os
status = dict(line.split(":", 1) for line in open("/proc/1/status"))
try:
    open("/opt/arena/probe", "w")
    root_fs = "writable"
except OSError as exc:
    root_fs = exc.strerror
open("/tmp/probe", "w").write("ok")
print(json.dumps({
    "uid": os.getuid(), "pid1_uid": status["Uid"].split()[0], "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(), "root_fs": root_fs,
}))
"""
    exit_code, output = _exec_python(container, code)
    assert exit_code == 0, output
    facts = json.loads(output)
    assert facts["uid"] == 10001
    assert facts["pid1_uid"] == "10001"
    assert int(facts["cap_eff"], 16) == 0
    assert facts["no_new_privs"] == "1"
    assert facts["root_fs"] == "Read-only file system"


def test_memory_hog_is_killed_by_the_memory_limit(start: StartFn) -> None:
    container, sock = start(limits=ContainerLimits(memory_mb=160))
    wait_ready(container, sock, timeout=60)
    exit_code, output = _exec_python(
        container, "blocks = [bytearray(16 << 20) for _ in range(64)]; print('survived')"
    )
    assert "survived" not in output
    assert exit_code == 137, (exit_code, output)  # SIGKILL from the cgroup's OOM killer


def test_wait_ready_reports_a_container_that_exits(start: StartFn) -> None:
    container, sock = start(env_ref="no-such-environment")
    with pytest.raises(ContainerStartError, match="unknown environment"):
        wait_ready(container, sock, timeout=60)
    assert not container_alive(container)


def test_reap_removes_everything_labelled(engine: docker.DockerClient, start: StartFn) -> None:
    mine = [start(owner="reap-a")[0], start(owner="reap-a")[0]]
    other, _ = start(owner="reap-b")
    assert reap_arena_containers(engine, "reap-a") == 2
    assert not any(container_alive(c) for c in mine)
    assert container_alive(other)
    assert reap_arena_containers(engine) >= 1
    assert not container_alive(other)
    assert not engine.containers.list(all=True, filters={"label": f"{OWNER_LABEL}=reap-b"})


async def test_an_escaped_program_in_a_container_cannot_read_the_control_token(
    served: tuple[Container, Path],
) -> None:
    """Whichever sandbox the container gets (bubblewrap, or ``auto`` mode's plain child of the server's
    uid), the server's environment and memory are out of reach: the server is not dumpable."""
    _container, sock = served
    control = ControlClient(SOCKET_BASE_URL, TOKEN, uds=control_socket(sock))
    try:
        health = await control.health()
        assert health["memory_hidden"] is True, health
        source = escape("""
found = {}
for pid in sorted({os.getppid(), 1}):
    for name in ("environ", "mem", "cmdline"):
        path = "/proc/%d/%s" % (pid, name)
        try:
            found[path] = os.read(os.open(path, os.O_RDONLY), 4096).decode(errors="replace")
        except Exception as exc:
            found[path] = exc.__class__.__name__
found["own"] = sorted(os.environ)
return found
""")
        run = await control.run_program(await control.create_session(), source)
    finally:
        await control.aclose()
    assert run["ok"], run["error"]
    assert TOKEN not in json.dumps(run["value"]), (health["sandbox"], run["value"])
    assert "ARENA_CONTROL_TOKEN" not in json.dumps(run["value"])


def test_another_process_of_the_servers_uid_cannot_read_its_environment(
    served: tuple[Container, Path],
) -> None:
    """What ``auto`` mode's plain sandbox child would be, where bubblewrap cannot start: a process of the
    server's own uid, in its container, reading the server's ``/proc`` files."""
    container, _sock = served
    code = """
import json, os
found = {}
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        continue
    if b"environments.serving" in cmdline:
        for name in ("environ", "mem"):
            try:
                found[f"{pid}/{name}"] = open(f"/proc/{pid}/{name}", "rb").read(4096).decode(errors="replace")
            except OSError as exc:
                found[f"{pid}/{name}"] = type(exc).__name__
print(json.dumps(found))
"""
    result = container.exec_run(["python", "-c", code], user=str(CONTAINER_UID))
    assert result.exit_code == 0, result.output
    found = json.loads(result.output.decode().strip().splitlines()[-1])
    assert found, "the server's process was not found"
    assert TOKEN not in json.dumps(found), found
    assert all(value == "PermissionError" for value in found.values()), found
