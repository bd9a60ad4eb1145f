"""Starting an environment server: bind first (so errors are immediate and clear), then serve.

On start the server prints one JSON line to stdout, ``{"event": "ready", ...}``, naming the port or
socket and the control token, so a supervisor (``EnvWorker``) can connect without guessing.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from environments.serving.server import EnvServer

CONTROL_TOKEN_ENV = "ARENA_CONTROL_TOKEN"


class ServeError(RuntimeError):
    """The server cannot start (port in use, bad socket path...)."""


@dataclass(frozen=True)
class Listener:
    """Where the HTTP server listens: a TCP host/port or a Unix socket path."""

    host: str = "127.0.0.1"
    port: int = 0
    uds: Path | None = None


def bind(listener: Listener) -> socket.socket:
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
        try:
            sock.bind((listener.host, listener.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise ServeError(f"port {listener.port} on {listener.host} is already in use") from None
            raise ServeError(f"cannot listen on {listener.host}:{listener.port}: {exc.strerror}") from None
    if listener.uds is None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def ready_line(server: EnvServer, listener: Listener, sock: socket.socket) -> str:
    info: dict[str, object] = {"event": "ready", "env": server.env.name, "pid": os.getpid()}
    if listener.uds is not None:
        info["uds"] = str(listener.uds)
    else:
        info.update(host=listener.host, port=sock.getsockname()[1])
    info["control_token"] = server.control_token
    return json.dumps(info)


def connect_hint(listener: Listener, sock: socket.socket) -> str:
    """How a plain MCP client connects (printed to stderr beside the machine-read ready line)."""
    if listener.uds is not None:
        base = f"http://localhost (over the Unix socket {listener.uds})"
    else:
        host = f"[{listener.host}]" if ":" in listener.host else listener.host
        base = f"http://{host}:{sock.getsockname()[1]}"
    return (
        f"MCP client: point a streamable-HTTP client at {base}/mcp (one shared state, for a single "
        f"client). Isolated sessions: POST {base}/control/sessions with 'Authorization: Bearer "
        "<control_token>', then connect to the returned /s/<session_id>/mcp."
    )


async def serve_http(server: EnvServer, listener: Listener) -> None:
    """Serve the data and control planes over HTTP until cancelled."""
    sock = bind(listener)
    config = uvicorn.Config(
        # Over a Unix socket no browser can reach the server: the DNS-rebinding Host check is moot there.
        server.http_app(host="unix-socket" if listener.uds is not None else listener.host),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=120,
        backlog=2048,
        # Nothing proxies these servers and nothing reads the client address or these headers.
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )
    http = uvicorn.Server(config)
    print(ready_line(server, listener, sock), flush=True)
    print(connect_hint(listener, sock), file=sys.stderr, flush=True)
    await http.serve(sockets=[sock])


def run(env_ref: str, transport: str, listener: Listener) -> None:
    """Load ``env_ref`` and serve it over ``transport`` (``http`` or ``stdio``)."""
    from environments.registry import load_environment

    env = load_environment(env_ref)
    server = EnvServer(env, control_token=os.environ.get(CONTROL_TOKEN_ENV))
    if transport == "stdio":
        asyncio.run(server.run_stdio())
    elif transport == "http":
        asyncio.run(serve_http(server, listener))
    else:
        raise ServeError(f"unknown transport {transport!r}; use stdio or http")


def main(argv: list[str] | None = None) -> int:
    """``python -m environments.serving NAME [--transport http|stdio] [--host H] [--port P] [--uds PATH]``."""
    import argparse

    from environments.registry import UnknownEnvironment
    from environments.sdk.environment import EnvironmentSpecError

    parser = argparse.ArgumentParser(prog="python -m environments.serving", description=main.__doc__)
    parser.add_argument("env", help="environment name or path")
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--uds", type=Path, default=None, help="listen on a Unix socket instead of TCP")
    args = parser.parse_args(argv)
    try:
        run(args.env, args.transport, Listener(args.host, args.port, args.uds))
    except (ServeError, UnknownEnvironment, EnvironmentSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
