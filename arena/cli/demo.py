"""``arena demo``: serve an environment (name or path) through the pool and run a scripted episode."""

from __future__ import annotations

import argparse
import asyncio
import json

from rich.console import Console
from rich.table import Table

from arena.runtime.pool import EnvPool, PoolConfig
from environments.registry import UnknownEnvironment, canonical_ref, load_environment
from environments.sdk.environment import EnvironmentSpecError

console = Console()


def _preview(value: object, width: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


async def scripted_episode(env_name: str) -> bool:
    """List tools over MCP, call every read tool that needs no arguments, make a malformed call,
    then show the episode's database diff and reset it to the seed. Returns True if all went as expected."""
    env_name = canonical_ref(env_name)
    env = load_environment(env_name)
    config = PoolConfig(envs={env_name: 1}, warm_sessions_per_worker=2)
    async with EnvPool(config) as pool, pool.session(env_name) as lease:
        console.print(
            f"[bold]{env.name}[/bold]: session {lease.session_id[:8]}… at {lease.endpoint.base_url}"
        )
        async with lease.client() as client:
            tools = (await client.list_tools()).tools
        table = Table(title=f"{len(tools)} tools over MCP")
        for column in ("tool", "result"):
            table.add_column(column)
        ok = True
        for tool in tools:
            if tool.input_schema.get("required"):
                continue
            result = await lease.call_tool(tool.name, {})
            ok &= not result.is_error
            table.add_row(tool.name, _preview(result.structured_content))
        specs = list(env.tools.values())
        malformed = next((spec for spec in specs if spec.mutates), specs[0])
        bad = await lease.call_tool(malformed.name, {"unexpected": 1})
        table.add_row(f"{malformed.name} (malformed)", _preview(bad.structured_content["error"]["code"]))
        ok &= bad.is_error and bad.structured_content["error"]["code"] == "VALIDATION_ERROR"
        console.print(table)
        seed_hash = (await lease.worker.control.info())["seed_hash"]
        diff = await lease.diff()
        changed = sum(len(v["inserted"]) + len(v["changed"]) + len(v["deleted"]) for v in diff.values())
        console.print(f"database rows changed in this episode: {changed}")
        await lease.reset()
        ok &= await lease.state_hash() == seed_hash
        console.print(f"reset → seed hash {seed_hash[:12]}… restored: {ok}")
    return ok


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        return 0 if asyncio.run(scripted_episode(args.env)) else 1
    except (UnknownEnvironment, EnvironmentSpecError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser("demo", help="serve an environment and run a scripted episode against it")
    parser.add_argument("--env", default="ecommerce", help="environment name or path (default: ecommerce)")
    parser.set_defaults(func=cmd_demo)
