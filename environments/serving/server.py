"""One MCP server process per environment, hosting many isolated sessions.

Data plane (what the agent sees): ``/s/{session_id}/mcp`` is a streamable-HTTP MCP endpoint bound
to one episode state; the session id is an unguessable token handed out by the control plane.
``/mcp`` serves a shared default state, for a single human-driven client. Over stdio the one
client gets the default state.

Control plane (what only the arena sees): ``/control/...`` JSON routes behind a bearer token
(create/close sessions, reset, snapshot, restore, hash, diff, schema and data sample). None of
these are MCP tools, so they never appear in ``tools/list`` and cannot be called by an agent.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from environments.sdk.environment import Environment
from environments.sdk.execution import ToolOutcome, execute_tool
from environments.sdk.state import EpisodeState, StateError, StateStore
from environments.serving.programs import run_program

logger = logging.getLogger(__name__)

DEFAULT_STATE_ID = "default"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_PROGRAM_SECONDS = 30.0


def outcome_to_result(outcome: ToolOutcome) -> types.CallToolResult:
    """Map a tool outcome to an MCP result: JSON text plus structured content; errors carry ``isError``."""
    if outcome.ok:
        structured = outcome.value if isinstance(outcome.value, dict) else {"result": outcome.value}
        text = json.dumps(outcome.value, separators=(",", ":"), default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )
    error = outcome.value
    text = f"{error['code']}: {error['message']}"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"error": error},
        is_error=True,
    )


class EnvServer:
    """An environment's states plus its MCP server and control API."""

    def __init__(
        self, env: Environment, *, store: StateStore | None = None, control_token: str | None = None
    ) -> None:
        self.env = env
        self.store = store or StateStore(env)
        self.control_token = control_token or secrets.token_urlsafe(24)
        self.mcp_tools = [
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=spec.input_schema,
                annotations=types.ToolAnnotations(
                    read_only_hint=not spec.mutates, destructive_hint=spec.mutates
                ),
            )
            for spec in env.tools.values()
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
        spec = self.env.tools.get(name)
        return spec.input_schema if spec is not None else None

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.mcp_tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        state = self._state_for_request(ctx.request)
        return outcome_to_result(execute_tool(self.env, state, params.name, params.arguments))

    def _state_for_request(self, request: Request | None) -> EpisodeState:
        sid = request.path_params.get("sid") if request is not None else None
        if sid is None:
            return self.default_state()
        return self.store.get(sid)

    def default_state(self) -> EpisodeState:
        """The shared state of ``/mcp`` and stdio, created on first use."""
        if DEFAULT_STATE_ID not in self.store.states:
            self.store.create(DEFAULT_STATE_ID)
        return self.store.states[DEFAULT_STATE_ID]

    # -- transports -----------------------------------------------------------------------------
    async def run_stdio(self) -> None:
        """Serve one client over stdin/stdout, on the default state."""
        async with stdio_server() as (read_stream, write_stream):
            await self.mcp.run(read_stream, write_stream, self.mcp.create_initialization_options())

    def http_app(self, host: str = "127.0.0.1") -> Starlette:
        """The ASGI app: MCP data plane plus bearer-protected control plane."""
        security = None
        if host not in LOOPBACK_HOSTS:
            # Reached through a cluster network or a container port map under another Host name;
            # the unguessable session token in the URL is the access control there.
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.mcp.streamable_http_app(
            stateless_http=True,
            json_response=True,
            host=host,
            transport_security=security,
            session_idle_timeout=None,
        )
        manager = self.mcp.session_manager
        mcp_asgi = StreamableHTTPASGIApp(manager)
        routes = [
            Route("/s/{sid}/mcp", endpoint=self._session_gate(mcp_asgi)),
            Route("/mcp", endpoint=mcp_asgi),
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
        return Starlette(routes=routes, lifespan=lambda app: manager.run())

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
                return JSONResponse({"error": str(exc)}, status_code=404)
            except (ValueError, KeyError, json.JSONDecodeError) as exc:
                return JSONResponse({"error": f"bad request: {exc}"}, status_code=400)

        return guarded

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "env": self.env.name, "sessions": len(self.store.states)})

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
        state = self.store.create(body.get("session_id"))
        return JSONResponse({"session_id": state.state_id, "mcp_path": f"/s/{state.state_id}/mcp"})

    async def _close(self, request: Request) -> Response:
        self.store.close(request.path_params["sid"])
        return JSONResponse({"ok": True})

    async def _reset(self, request: Request) -> Response:
        self.store.get(request.path_params["sid"]).reset()
        return JSONResponse({"ok": True})

    async def _snapshot(self, request: Request) -> Response:
        return JSONResponse({"snapshot_id": self.store.get(request.path_params["sid"]).snapshot()})

    async def _restore(self, request: Request) -> Response:
        body = await _json_body(request)
        self.store.get(request.path_params["sid"]).restore(body["snapshot_id"])
        return JSONResponse({"ok": True})

    async def _hash(self, request: Request) -> Response:
        state = self.store.get(request.path_params["sid"])
        return JSONResponse({"hash": state.state_hash(request.query_params.get("ref", "current"))})

    async def _diff(self, request: Request) -> Response:
        state = self.store.get(request.path_params["sid"])
        before = request.query_params.get("before", "seed")
        after = request.query_params.get("after", "current")
        return _json_response({"diff": state.diff(before, after)})

    async def _call(self, request: Request) -> Response:
        body = await _json_body(request)
        state = self.store.get(request.path_params["sid"])
        outcome = execute_tool(self.env, state, body["name"], body.get("arguments") or {})
        return _json_response({"ok": outcome.ok, "value": outcome.value})

    async def _program(self, request: Request) -> Response:
        body = await _json_body(request)
        source = body["source"]
        if not isinstance(source, str):
            raise ValueError('"source" must be a string of Python code')
        state = self.store.get(request.path_params["sid"])
        run = run_program(
            self.env,
            state,
            source,
            entry=str(body.get("entry", "solve")),
            timeout_s=min(float(body.get("timeout_s", 5.0)), MAX_PROGRAM_SECONDS),
            max_calls=int(body.get("max_calls", 500)),
        )
        return _json_response(run.to_dict())


class _SessionGate:
    """ASGI wrapper answering 404 for unknown or closed sessions before MCP parses anything."""

    def __init__(self, app: StreamableHTTPASGIApp, store: StateStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sid = scope["path_params"]["sid"]
        if sid not in self.store.states:
            response = JSONResponse({"error": f"unknown or closed session {sid!r}"}, status_code=404)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _json_response(content: Any) -> Response:
    """JSON in one pass, values JSON lacks (dates, decimals) as strings."""
    body = json.dumps(content, separators=(",", ":"), default=str, ensure_ascii=False)
    return Response(body, media_type="application/json")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body
