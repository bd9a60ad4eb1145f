"""One MCP server process per environment, hosting many isolated sessions.

Data plane (what the agent sees): ``/s/{session_id}/mcp`` is a streamable-HTTP MCP endpoint bound
to one episode state; the session id is an unguessable token handed out by the control plane.
``/mcp`` (a shared default state, for a single human-driven client) exists only with
``shared_mcp=True`` (``arena env serve --shared-mcp``), never on pool workers: it would be a channel
between episodes. Over stdio the one client gets the default state.

Control plane (what only the arena sees): ``/control/...`` JSON routes behind a bearer token
(create/close sessions, reset, snapshot, restore, hash, diff, schema and data sample, programs),
served on a listener of its own (``control_app``) so a flood of the data plane cannot starve it. None
of these are MCP tools, so they never appear in ``tools/list`` and cannot be called by an agent.
Generated programs run in the OS sandbox of ``environments.sandbox`` (see ``docs/security.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import INTERNAL_ERROR
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from environments.sandbox import Sandbox, SandboxUnavailable
from environments.sdk.environment import Environment
from environments.sdk.errors import ErrorCode
from environments.sdk.execution import ToolOutcome, execute_tool
from environments.sdk.state import EpisodeState, StateError, StateStore
from environments.sdk.tools import ToolSpec
from environments.serving.secrecy import process_memory_hidden

logger = logging.getLogger(__name__)

DEFAULT_STATE_ID = "default"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_PROGRAM_SECONDS = 30.0
MAX_PROGRAM_CALLS = 5000
MAX_TOOL_RESULT_BYTES = 4_000_000
"""A tool result larger than this (as JSON) becomes a LIMIT_EXCEEDED error result."""
MAX_ERROR_CHARS = 4000
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_session_id(session_id: str) -> str:
    """A session id chosen by the control client: a short name (it may become a file name)."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise ValueError("session_id must be 1-64 letters, digits, '-' or '_'")
    return session_id


def _too_large(size: int) -> types.CallToolResult:
    message = f"the result is {size} bytes of JSON, over the server's limit of {MAX_TOOL_RESULT_BYTES}"
    error = {"code": "LIMIT_EXCEEDED", "message": message}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"LIMIT_EXCEEDED: {message}")],
        structured_content={"error": error},
        is_error=True,
    )


def outcome_to_result(outcome: ToolOutcome) -> types.CallToolResult:
    """Map a tool outcome to an MCP result: JSON text plus structured content; errors carry ``isError``.

    Results over ``MAX_TOOL_RESULT_BYTES`` become a LIMIT_EXCEEDED error; error messages are cut short."""
    if outcome.ok:
        structured = outcome.value if isinstance(outcome.value, dict) else {"result": outcome.value}
        try:
            text = json.dumps(outcome.value, separators=(",", ":"), default=str)
        except RecursionError:
            return _too_large(-1)
        if len(text) > MAX_TOOL_RESULT_BYTES:
            return _too_large(len(text))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )
    error = dict(outcome.value)
    error["message"] = str(error.get("message", ""))[:MAX_ERROR_CHARS]
    if len(json.dumps(error.get("details"), default=str)) > MAX_ERROR_CHARS:
        error.pop("details", None)
    text = f"{error['code']}: {error['message']}"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"error": error},
        is_error=True,
    )


class EnvServer:
    """An environment's states plus its MCP server and control API."""

    def __init__(
        self,
        env: Environment,
        *,
        store: StateStore | None = None,
        control_token: str | None = None,
        shared_mcp: bool = False,
        allowed_hosts: tuple[str, ...] = (),
        sandbox: Sandbox | None = None,
    ) -> None:
        self.env = env
        self.store = store or StateStore(env)
        self.control_token = control_token or secrets.token_urlsafe(24)
        self.shared_mcp = shared_mcp
        self.allowed_hosts = allowed_hosts
        self.sandbox = sandbox or Sandbox()
        self._locks: dict[str, asyncio.Lock] = {}
        """One per session: a tool call on a worker thread (``ToolSpec.blocking``) holds its session's
        until it ends; whatever else touches that session's database waits for it."""
        self._runs: dict[str, set[asyncio.Task[Any]]] = {}
        """The programs running on each session: closing it cancels them (their children are killed)."""
        self.agent_tools = {name: spec for name, spec in env.tools.items() if not spec.arena_only}
        """The tools an agent (or a generated program) may see and call: arena-only ones are reachable
        on the control plane alone."""
        self.mcp_tools = [
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=spec.input_schema,
                annotations=types.ToolAnnotations(
                    read_only_hint=not spec.mutates, destructive_hint=spec.mutates
                ),
            )
            for spec in self.agent_tools.values()
        ]
        self.mcp = Server(
            env.name,
            version=env.info.version,
            description=env.info.description,
            instructions=env.info.description,
            # Without this lookup the SDK runs the whole tools/list handler on every tools/call to
            # validate Mcp-Param headers (~15% of a call's server time).
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # -- MCP handlers -------------------------------------------------------------------------
    def _input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self.agent_tools.get(name)
        return spec.input_schema if spec is not None else None

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.mcp_tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        state = self._state_for_request(ctx.request)
        try:
            outcome = await self.execute(state.state_id, params.name, params.arguments, arena=False)
        except SandboxUnavailable as exc:  # infrastructure: a JSON-RPC error, never a tool result
            raise MCPError(INTERNAL_ERROR, f"sandbox unavailable: {str(exc)[:MAX_ERROR_CHARS]}") from None
        return outcome_to_result(outcome)

    def _state_for_request(self, request: Request | None) -> EpisodeState:
        sid = request.path_params.get("sid") if request is not None else None
        if sid is None:
            return self.default_state()
        return self.store.get(sid)

    @contextlib.asynccontextmanager
    async def session(self, sid: str) -> AsyncIterator[EpisodeState]:
        """The live state ``sid``, held against tool calls running on worker threads; ``StateError``
        when it is unknown, or was closed while this waited."""
        state = self.store.get(sid)
        lock = self._locks.setdefault(sid, asyncio.Lock())
        async with lock:
            if self.store.states.get(sid) is not state:
                raise StateError(f"session {sid!r} was closed")
            yield state

    async def execute(self, sid: str, name: str, arguments: Any, *, arena: bool) -> ToolOutcome:
        """One tool call on session ``sid``: inline, or on a worker thread for a ``blocking`` tool (its
        code waits on a sandboxed child) so the event loop goes on serving everything else. Only the
        arena (``arena=True``: the control plane) reaches ``arena_only`` tools; to anyone else they do
        not exist."""
        spec: ToolSpec | None = (self.env.tools if arena else self.agent_tools).get(name)
        if spec is None and not arena:
            known = ", ".join(sorted(self.agent_tools))
            message = f"unknown tool {str(name)[:200]!r}; tools: {known}"
            return ToolOutcome(False, {"code": str(ErrorCode.UNKNOWN_TOOL), "message": message})
        async with self.session(sid) as state:
            if spec is None or not spec.blocking:
                return execute_tool(self.env, state, name, arguments)
            outcome = await anyio.to_thread.run_sync(execute_tool, self.env, state, name, arguments)
            if self.store.states.get(sid) is not state:  # closed meanwhile (its child killed): 404
                raise StateError(f"session {sid!r} was closed during the call")
            return outcome

    def default_state(self) -> EpisodeState:
        """The shared state of ``/mcp`` and stdio, created on first use."""
        if DEFAULT_STATE_ID not in self.store.states:
            self.store.create(DEFAULT_STATE_ID)
        return self.store.states[DEFAULT_STATE_ID]

    # -- transports -----------------------------------------------------------------------------
    async def run_stdio(self) -> None:
        """Serve one client over stdin/stdout, on the default state."""
        async with stdio_server() as (read_stream, write_stream):
            forward, messages = anyio.create_memory_object_stream[Any](16)

            async def answer_unparsable() -> None:
                # The SDK drops a line it cannot parse; JSON-RPC wants a -32700 answer (id null).
                async with forward:
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            error = types.ErrorData(code=types.PARSE_ERROR, message="Parse error")
                            reply = types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
                            await write_stream.send(SessionMessage(reply))
                        else:
                            await forward.send(item)

            async with anyio.create_task_group() as group:
                group.start_soon(answer_unparsable)
                await self.mcp.run(messages, write_stream, self.mcp.create_initialization_options())
                group.cancel_scope.cancel()

    def transport_security(self, host: str) -> TransportSecuritySettings:
        """Host/Origin checks (DNS rebinding) for any bind address: the loopback names, the bind host and
        ``allowed_hosts`` (names a cluster network or port map reaches the server under)."""
        names = {"127.0.0.1", "localhost", "[::1]", *self.allowed_hosts}
        if host not in ("0.0.0.0", "::", "unix-socket"):
            names.add(f"[{host}]" if ":" in host else host)
        hosts = sorted({*names, *(f"{name}:*" for name in names)})
        origins = sorted({f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")})
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )

    def http_app(self, host: str = "127.0.0.1") -> Starlette:
        """Data plane and control plane in one ASGI app (tests, single-listener use)."""
        data = self.data_app(host)
        return Starlette(routes=[*data.routes, *self.control_routes()], lifespan=data.router.lifespan_context)

    def data_app(self, host: str = "127.0.0.1") -> Starlette:
        """The agent-facing MCP app: ``/s/{sid}/mcp`` (and ``/mcp`` with ``shared_mcp``)."""
        security = self.transport_security(host)
        self.mcp.streamable_http_app(
            stateless_http=True,
            json_response=True,
            host=host,
            transport_security=security,
            session_idle_timeout=None,
        )
        manager = self.mcp.session_manager
        mcp_asgi = StreamableHTTPASGIApp(manager)
        routes = [Route("/s/{sid}/mcp", endpoint=self._session_gate(mcp_asgi))]
        if self.shared_mcp:
            routes.append(Route("/mcp", endpoint=mcp_asgi))

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                try:
                    yield
                finally:
                    await self.sandbox.aclose()

        return Starlette(routes=routes, lifespan=lifespan)

    def control_app(self) -> Starlette:
        """The arena-facing control app (bearer token), for a listener of its own."""
        return Starlette(routes=self.control_routes())

    def control_routes(self) -> list[Route]:
        return [
            Route("/control/health", self._health, methods=["GET"]),
            Route("/control/info", self._guard(self._info), methods=["GET"]),
            Route("/control/sample", self._guard(self._sample), methods=["GET"]),
            Route("/control/sessions", self._guard(self._create), methods=["POST"]),
            Route("/control/sessions/{sid}", self._guard(self._close), methods=["DELETE"]),
            Route("/control/sessions/{sid}/reset", self._guard(self._reset), methods=["POST"]),
            Route("/control/sessions/{sid}/snapshot", self._guard(self._snapshot), methods=["POST"]),
            Route("/control/sessions/{sid}/restore", self._guard(self._restore), methods=["POST"]),
            Route("/control/sessions/{sid}/hash", self._guard(self._hash), methods=["GET"]),
            Route("/control/sessions/{sid}/diff", self._guard(self._diff), methods=["GET"]),
            Route("/control/sessions/{sid}/call", self._guard(self._call), methods=["POST"]),
            Route("/control/sessions/{sid}/program", self._guard(self._program), methods=["POST"]),
        ]

    def _session_gate(self, app: StreamableHTTPASGIApp) -> _SessionGate:
        return _SessionGate(app, self.store)

    # -- control plane ----------------------------------------------------------------------------
    def _guard(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        expected = f"Bearer {self.control_token}"

        async def guarded(request: Request) -> Response:
            if not secrets.compare_digest(request.headers.get("authorization", ""), expected):
                return JSONResponse({"error": "control token missing or wrong"}, status_code=401)
            try:
                return await handler(request)
            except StateError as exc:
                return JSONResponse({"error": str(exc)[:MAX_ERROR_CHARS]}, status_code=404)
            except SandboxUnavailable as exc:
                return JSONResponse({"error": str(exc)[:MAX_ERROR_CHARS]}, status_code=503)
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                return JSONResponse({"error": f"bad request: {str(exc)[:MAX_ERROR_CHARS]}"}, status_code=400)

        return guarded

    async def _health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "ok": True,
                "env": self.env.name,
                "sessions": len(self.store.states),
                "sandbox": self.sandbox.kind,
                "memory_hidden": process_memory_hidden(),
            }
        )

    async def _info(self, request: Request) -> Response:
        info = self.env.describe()
        info.update(
            tables=self.store.table_counts(),
            ddl=self.env.ddl(),
            seed_hash=self.store.seed_hash,
            sessions=len(self.store.states),
        )
        return JSONResponse(info)

    async def _sample(self, request: Request) -> Response:
        rows = int(request.query_params.get("rows", "5"))
        return _json_response(self.store.sample(rows))

    async def _create(self, request: Request) -> Response:
        body = await _json_body(request)
        requested = body.get("session_id")
        state = self.store.create(None if requested is None else check_session_id(requested))
        return JSONResponse({"session_id": state.state_id, "mcp_path": f"/s/{state.state_id}/mcp"})

    async def _close(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        state = self.store.detach(sid)  # unknown from now on: requests in flight on it answer 404
        state.interrupt()  # a call in flight on a worker thread ends now (its sandboxed child killed)
        for run in self._runs.pop(sid, ()):
            run.cancel()  # a program running on it ends now, waiting or not (its child killed)
        lock = self._locks.setdefault(sid, asyncio.Lock())
        async with lock:
            state.close()
        if not lock.locked() and self._locks.get(sid) is lock:
            del self._locks[sid]
        return JSONResponse({"ok": True})

    async def _reset(self, request: Request) -> Response:
        async with self.session(request.path_params["sid"]) as state:
            state.reset()
        return JSONResponse({"ok": True})

    async def _snapshot(self, request: Request) -> Response:
        async with self.session(request.path_params["sid"]) as state:
            return JSONResponse({"snapshot_id": state.snapshot()})

    async def _restore(self, request: Request) -> Response:
        body = await _json_body(request)
        async with self.session(request.path_params["sid"]) as state:
            state.restore(body["snapshot_id"])
        return JSONResponse({"ok": True})

    async def _hash(self, request: Request) -> Response:
        async with self.session(request.path_params["sid"]) as state:
            return JSONResponse({"hash": state.state_hash(request.query_params.get("ref", "current"))})

    async def _diff(self, request: Request) -> Response:
        before = request.query_params.get("before", "seed")
        after = request.query_params.get("after", "current")
        async with self.session(request.path_params["sid"]) as state:
            return _json_response({"diff": state.diff(before, after)})

    async def _call(self, request: Request) -> Response:
        body = await _json_body(request)
        outcome = await self.execute(
            request.path_params["sid"], body["name"], body.get("arguments") or {}, arena=True
        )
        return _json_response({"ok": outcome.ok, "value": outcome.value})

    async def _program(self, request: Request) -> Response:
        body = await _json_body(request)
        source = body["source"]
        if not isinstance(source, str):
            raise ValueError('"source" must be a string of Python code')
        sid = request.path_params["sid"]
        self.store.get(sid)
        timeout_s = float(body.get("timeout_s", 5.0))
        if not 0 < timeout_s <= MAX_PROGRAM_SECONDS:  # NaN fails too
            raise ValueError(f'"timeout_s" must be in (0, {MAX_PROGRAM_SECONDS:g}]')
        max_calls = int(body.get("max_calls", 500))
        if not 0 <= max_calls <= MAX_PROGRAM_CALLS:
            raise ValueError(f'"max_calls" must be in [0, {MAX_PROGRAM_CALLS}]')

        async def call(name: str, arguments: Any) -> tuple[bool, Any]:
            # Looked up on every call: a session closed meanwhile aborts the run (404), and the
            # program can reach this session and no other.
            outcome = await self.execute(sid, name, arguments, arena=False)
            return outcome.ok, outcome.value

        running = asyncio.ensure_future(
            self.sandbox.run(
                call, source, entry=str(body.get("entry", "solve")), timeout_s=timeout_s, max_calls=max_calls
            )
        )
        runs = self._runs.setdefault(sid, set())
        runs.add(running)
        try:
            run = await running
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if running.cancelled() and (current is None or not current.cancelling()):
                raise StateError(f"session {sid!r} was closed during the program") from None
            raise
        finally:
            runs.discard(running)
            if not runs and self._runs.get(sid) is runs:
                del self._runs[sid]
        return _json_response(run.to_dict())


class _SessionGate:
    """ASGI wrapper answering 404 for unknown or closed sessions: before MCP parses anything, and instead
    of the MCP answer when the session was closed while the request ran."""

    def __init__(self, app: StreamableHTTPASGIApp, store: StateStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sid = scope["path_params"]["sid"]
        if sid not in self.store.states:
            response = JSONResponse({"error": f"unknown or closed session {sid!r}"}, status_code=404)
            await response(scope, receive, send)
            return
        closed = False

        async def gated_send(message: Any) -> None:
            nonlocal closed
            if message["type"] == "http.response.start" and sid not in self.store.states:
                closed = True
                gone = JSONResponse({"error": f"session {sid!r} was closed"}, status_code=404)
                await gone(scope, receive, send)
            if not closed:
                await send(message)

        await self.app(scope, receive, gated_send)


def _json_response(content: Any) -> Response:
    """JSON in one pass, values JSON lacks (dates, decimals) as strings."""
    try:
        body = json.dumps(content, separators=(",", ":"), default=str, ensure_ascii=False)
    except RecursionError:
        return JSONResponse({"error": "the answer is nested too deeply to encode"}, status_code=422)
    return Response(body, media_type="application/json")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError("the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body
