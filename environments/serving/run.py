"""Starting an environment server: bind first (so errors are immediate and clear), then serve.

On start the server prints one JSON line to stdout, ``{"event": "ready", ...}``, naming the port or
socket and the control token, so a supervisor (``EnvWorker``) can connect without guessing.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from environments.serving.limits import (
    CONTROL_LIMITS,
    DATA_LIMITS,
    HttpLimits,
    from_env,
    guarded_protocol,
    raise_open_files,
)
from environments.serving.options import add_serve_options, control_socket
from environments.serving.secrecy import hide_process_memory
from environments.serving.server import EnvServer

CONTROL_TOKEN_ENV = "ARENA_CONTROL_TOKEN"
GRACEFUL_STOP_S = 2.0
"""How long a stopping server lets requests in flight finish before it cancels them."""


class ServeError(RuntimeError):
    """The server cannot start (port in use, bad socket path...)."""


@dataclass(frozen=True)
class Listener:
    """Where the HTTP server listens: a TCP host/port or a Unix socket path, for the data plane; the
    control plane listens beside it (``control_port``, ephemeral by default, or ``<uds>.control``)."""

    host: str = "127.0.0.1"
    port: int = 0
    uds: Path | None = None
    control_port: int = 0

    def control(self) -> Listener:
        if self.uds is not None:
            return Listener(uds=control_socket(self.uds))
        return Listener(self.host, self.control_port)


def bind(listener: Listener, backlog: int = DATA_LIMITS.backlog) -> socket.socket:
    """Bind the listening socket, turning OS errors into one clear ``ServeError``."""
    if listener.uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.uds.unlink(missing_ok=True)
            sock.bind(str(listener.uds))
            os.chmod(listener.uds, 0o666)
        except OSError as exc:
            sock.close()
            raise ServeError(f"cannot listen on socket {listener.uds}: {exc.strerror}") from None
    else:
        family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        # A restart on the same port must not wait for the old connections' TIME_WAIT to pass.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listener.host, listener.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise ServeError(f"port {listener.port} on {listener.host} is already in use") from None
            raise ServeError(f"cannot listen on {listener.host}:{listener.port}: {exc.strerror}") from None
    if listener.uds is None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def ready_line(server: EnvServer, listener: Listener, sock: socket.socket, control: socket.socket) -> str:
    info: dict[str, object] = {"event": "ready", "env": server.env.name, "pid": os.getpid()}
    if listener.uds is not None:
        info["uds"] = str(listener.uds)
        info["control_uds"] = str(control_socket(listener.uds))
    else:
        info.update(host=listener.host, port=sock.getsockname()[1], control_port=control.getsockname()[1])
    info["control_token"] = server.control_token
    return json.dumps(info)


def connect_hint(server: EnvServer, listener: Listener, sock: socket.socket, control: socket.socket) -> str:
    """How a plain MCP client connects (printed to stderr beside the machine-read ready line)."""
    if listener.uds is not None:
        base = f"http://localhost (over the Unix socket {listener.uds})"
        control_base = f"http://localhost (over the Unix socket {control_socket(listener.uds)})"
    else:
        host = f"[{listener.host}]" if ":" in listener.host else listener.host
        base = f"http://{host}:{sock.getsockname()[1]}"
        control_base = f"http://{host}:{control.getsockname()[1]}"
    shared = (
        f"MCP client: point a streamable-HTTP client at {base}/mcp (one shared state, for a single client). "
        if server.shared_mcp
        else "No shared /mcp (start with --shared-mcp for a single desktop client). "
    )
    return (
        f"{shared}Isolated sessions: POST {control_base}/control/sessions with 'Authorization: Bearer "
        f"<control_token>', then connect to {base}/s/<session_id>/mcp."
    )


def _uvicorn(app: Any, sock: socket.socket, limits: HttpLimits, lifespan: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        log_level="warning",
        access_log=False,
        lifespan=lifespan,
        timeout_keep_alive=limits.keep_alive_s,
        # On SIGTERM requests in flight (a program, a third-party call) get this long, then are cancelled.
        timeout_graceful_shutdown=GRACEFUL_STOP_S,
        # uvicorn answers 503 once connections reach this; the protocol already caps them at max_connections.
        limit_concurrency=limits.max_connections + 1,
        backlog=limits.backlog,
        # Nothing proxies these servers and nothing reads the client address or these headers.
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )
    return uvicorn.Server(config)


async def serve_http(server: EnvServer, listener: Listener) -> None:
    """Serve the data plane and the control plane, each on its own listener, until cancelled or signalled."""
    data_limits, control_limits = from_env(DATA_LIMITS), from_env(CONTROL_LIMITS)
    sock = bind(listener, data_limits.backlog)
    control_sock = bind(listener.control(), control_limits.backlog)
    raise_open_files(data_limits.max_connections + control_limits.max_connections)
    # Over a Unix socket no browser can reach the server: the DNS-rebinding Host check is moot there.
    data = _uvicorn(
        server.data_app(host="unix-socket" if listener.uds is not None else listener.host),
        sock,
        data_limits,
        "on",
    )
    control = _uvicorn(server.control_app(), control_sock, control_limits, "off")
    print(ready_line(server, listener, sock, control_sock), flush=True)
    print(connect_hint(server, listener, sock, control_sock), file=sys.stderr, flush=True)
    tasks = [
        asyncio.create_task(data.serve(sockets=[sock])),
        asyncio.create_task(control.serve(sockets=[control_sock])),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        data.should_exit = control.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def run(
    env_ref: str,
    transport: str,
    listener: Listener,
    *,
    shared_mcp: bool = False,
    allowed_hosts: tuple[str, ...] = (),
) -> None:
    """Load ``env_ref`` and serve it over ``transport`` (``http`` or ``stdio``)."""
    from environments.registry import load_environment

    hide_process_memory()  # the control token, in this process's environment and memory
    env = load_environment(env_ref)
    server = EnvServer(
        env,
        control_token=os.environ.get(CONTROL_TOKEN_ENV),
        shared_mcp=shared_mcp,
        allowed_hosts=allowed_hosts,
    )
    if transport == "stdio":
        asyncio.run(server.run_stdio())
    elif transport == "http":
        asyncio.run(serve_http(server, listener))
    else:
        raise ServeError(f"unknown transport {transport!r}; use stdio or http")


def run_from_args(args: argparse.Namespace) -> None:
    """``run`` with the parsed options of ``main`` or ``arena env serve`` (``add_serve_options``)."""
    run(
        args.env,
        args.transport,
        Listener(args.host, args.port, args.uds, args.control_port),
        shared_mcp=args.shared_mcp,
        allowed_hosts=tuple(args.allowed_host),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m environments.serving NAME [--transport http|stdio] [--host H] [--port P] [--uds PATH]``."""
    from environments.registry import UnknownEnvironment
    from environments.sdk.environment import EnvironmentSpecError

    parser = argparse.ArgumentParser(prog="python -m environments.serving", description=main.__doc__)
    parser.add_argument("env", help="environment name or path")
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--uds", type=Path, default=None, help="listen on a Unix socket instead of TCP")
    add_serve_options(parser)
    args = parser.parse_args(argv)
    try:
        run_from_args(args)
    except (ServeError, UnknownEnvironment, EnvironmentSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
