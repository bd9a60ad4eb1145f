"""``arena model fetch|where|list``: the pretrained models of the catalog, fetched once from their pinned
registry wheel and converted into ``$ARENA_HOME/models`` (``arena.models``; see docs/models.md)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


def describe(name: str) -> dict[str, Any]:
    """Where the model ``name`` lives, whether it is there, and the package pin it comes from."""
    from arena.models.catalog import pinned
    from arena.models.fetch import is_fetched, model_dir

    model = pinned(name)
    return {
        "name": model.name,
        "path": str(model_dir(name)),
        "present": is_fetched(name),
        "package": model.requirement,
        "wheel_sha256": model.wheel_sha256,
        "license": model.license,
    }


def cmd_model(args: argparse.Namespace) -> int:
    from arena.models.catalog import CATALOG, UnknownModel
    from arena.models.convert import ModelError
    from arena.models.fetch import fetch

    try:
        if args.action == "fetch":
            if not args.name:
                err_console.print(
                    "[red]error:[/red] fetch needs a model name", highlight=False, soft_wrap=True
                )
                return 2
            started = time.monotonic()
            fetch(args.name, wheel=Path(args.wheel).expanduser() if args.wheel else None)
            print(json.dumps(describe(args.name) | {"seconds": round(time.monotonic() - started, 1)}))
            return 0
        names = [args.name] if args.name else sorted(CATALOG)
        rows = [describe(name) for name in names]
    except (ModelError, UnknownModel) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    for row in rows:
        if args.json:
            print(json.dumps(row))
        elif args.action == "where":
            print(f"{row['path']}\t{'present' if row['present'] else 'absent'}\t{row['package']}")
        else:
            state = "present" if row["present"] else "absent"
            print(f"{row['name']:<16} {row['package']:<22} {row['license']:<11} {state}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "model", help="fetch a pretrained model of the catalog once (pinned registry wheel -> HF folder)"
    )
    parser.add_argument(
        "action",
        choices=["fetch", "where", "list"],
        help="fetch it once, say where it is, or list the catalog",
    )
    parser.add_argument("name", nargs="?", help="a model of the catalog (`arena model list`)")
    parser.add_argument("--wheel", help="fetch: the pinned wheel already on disk (its sha256 is checked)")
    parser.add_argument("--json", action="store_true", help="where/list: one JSON line per model")
    parser.set_defaults(func=cmd_model)
