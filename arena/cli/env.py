"""``arena env ...``: list, show, scaffold, check, serve and import environments."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from environments.registry import UnknownEnvironment, all_names, load_environment
from environments.sdk.environment import Environment, EnvironmentSpecError
from environments.serving.options import add_serve_options

console = Console()
err_console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> int:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return code


def _load(ref: str) -> Environment:
    return load_environment(ref)


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    failures = []
    for name in all_names():
        try:
            env = _load(name)
        except (EnvironmentSpecError, UnknownEnvironment) as exc:
            failures.append(f"{name}: {exc}")
            continue
        rows.append(
            {
                "name": env.name,
                "category": env.info.category,
                "theme": env.info.theme,
                "tools": len(env.tools),
                "tables": len(env.metadata.tables),
                "version": env.info.version,
            }
        )
    if args.json:
        print(json.dumps(rows))
    else:
        table = Table(title="Agent Arena environments")
        for column in ("name", "category", "theme", "tools", "tables", "version"):
            table.add_column(column, justify="right" if column in ("tools", "tables") else "left")
        for row in rows:
            table.add_row(*(str(row[c]) for c in ("name", "category", "theme", "tools", "tables", "version")))
        console.print(table)
    for failure in failures:
        err_console.print(f"[yellow]skipped[/yellow] {failure}", highlight=False, soft_wrap=True)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from environments.sdk.state import StateStore

    env = _load(args.env)
    store = StateStore(env)
    counts = store.table_counts()
    store.close_all()
    if args.json:
        print(json.dumps({**env.describe(), "tables": counts}))
        return 0
    console.print(f"[bold]{env.name}[/bold] v{env.info.version} — {env.info.theme} ({env.info.category})")
    console.print(env.info.description)
    tables = Table(title="tables")
    tables.add_column("table")
    tables.add_column("rows", justify="right")
    for name, count in counts.items():
        tables.add_row(name, str(count))
    console.print(tables)
    tools = Table(title="tools", show_lines=True)
    for column in ("tool", "kind", "description", "input schema"):
        tools.add_column(column)
    for spec in env.tools.values():
        tools.add_row(
            spec.name,
            "write" if spec.mutates else "read",
            spec.description,
            _render_params(spec.input_schema),
        )
    console.print(tools)
    return 0


def _schema_type(prop: dict) -> str:
    if "enum" in prop:
        return "|".join(map(str, prop["enum"]))
    if "anyOf" in prop:
        return " or ".join(_schema_type(p) for p in prop["anyOf"])
    return str(prop.get("type", "any"))


def _render_params(schema: dict) -> str:
    """One line per argument: ``name*: type`` (``*`` marks required)."""
    required = set(schema.get("required", []))
    lines = [
        f"{name}{'*' if name in required else ''}: {_schema_type(prop)}"
        for name, prop in schema.get("properties", {}).items()
    ]
    return "\n".join(lines) or "(none)"


def cmd_new(args: argparse.Namespace) -> int:
    from environments.scaffold import scaffold_environment

    target = scaffold_environment(args.name, Path(args.dir))
    console.print(f"created {target} — edit it, then run: arena env check {target}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from environments.checks import check_environment

    report = check_environment(args.env, run_tests=not args.no_tests)
    for check in report.checks:
        mark = "[green]ok[/green]  " if check.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {check.name}: {check.detail}", highlight=False, soft_wrap=True)
    return 0 if report.ok else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from environments.serving.run import ServeError, run_from_args

    try:
        run_from_args(args)
    except ServeError as exc:
        return _fail(str(exc))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from environments.importers.cli import run_import

    return run_import(args.kind, Path(args.dir), replay=not args.no_replay)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``env`` command group."""
    env_parser = subparsers.add_parser(
        "env", help="list, inspect, scaffold, check, serve and import environments"
    )
    commands = env_parser.add_subparsers(dest="env_command", required=True, metavar="SUBCOMMAND")

    p = commands.add_parser("list", help="list environments")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_list)

    p = commands.add_parser("show", help="tools with schemas, tables with row counts")
    p.add_argument("env", help="environment name or path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = commands.add_parser("new", help="scaffold a working environment to edit")
    p.add_argument("name", help="name of the new environment (lower-case, e.g. helpdesk)")
    p.add_argument("--dir", default=".", help="parent directory (default: current)")
    p.set_defaults(func=cmd_new)

    p = commands.add_parser("check", help="validate an environment spec and run its tests")
    p.add_argument("env", help="environment name or path")
    p.add_argument("--no-tests", action="store_true", help="skip the environment's own tests")
    p.set_defaults(func=cmd_check)

    p = commands.add_parser("serve", help="serve an environment over MCP")
    p.add_argument("env", help="environment name or path")
    p.add_argument("--transport", choices=["stdio", "http"], default="http")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", type=Path, default=None, help="listen on a Unix socket instead of TCP")
    add_serve_options(p)
    p.set_defaults(func=cmd_serve)

    p = commands.add_parser("import", help="import environments from another format")
    p.add_argument("kind", choices=["agentworld"], help="source format")
    p.add_argument("dir", help="directory laid out like Agent-World's environment_mix/")
    p.add_argument("--no-replay", action="store_true", help="skip replaying the questions' tool chains")
    p.set_defaults(func=cmd_import)

    for sub in commands.choices.values():
        sub.set_defaults(func=_guarded(sub.get_default("func")))


Handler = Callable[[argparse.Namespace], int]


def _guarded(func: Handler) -> Handler:
    """Turn expected failures (unknown env, broken spec) into one clear line and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except UnknownEnvironment as exc:
            return _fail(str(exc).strip("'\""))
        except EnvironmentSpecError as exc:
            return _fail(f"broken environment spec: {exc}")
        except FileExistsError as exc:
            return _fail(str(exc))

    return run
