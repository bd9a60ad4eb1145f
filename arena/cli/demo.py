"""``arena demo``: serve a built-in environment through the pool and run a scripted episode against it."""

from __future__ import annotations

import argparse
import asyncio
import json

from rich.console import Console
from rich.table import Table

from arena.runtime.pool import EnvPool, PoolConfig
from environments.registry import load_environment

console = Console()


def _preview(value: object, width: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


async def scripted_episode(env_name: str) -> bool:
    """List tools over MCP, call every read tool that needs no arguments, make a malformed call,
    then show the episode's database diff and reset it to the seed. Returns True if all went as expected."""
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
        write = next(spec for spec in env.tools.values() if spec.mutates)
        bad = await lease.call_tool(write.name, {"unexpected": 1})
        table.add_row(f"{write.name} (malformed)", _preview(bad.structured_content["error"]["code"]))
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
    return 0 if asyncio.run(scripted_episode(args.env)) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser("demo", help="serve an environment and run a scripted episode against it")
    parser.add_argument("--env", default="ecommerce", help="environment name or path (default: ecommerce)")
    parser.set_defaults(func=cmd_demo)
