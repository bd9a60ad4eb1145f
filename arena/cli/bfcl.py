"""``arena bfcl fetch|where``: the BFCL v4 multi-turn package (``bfcl-eval``, unpacked without its
dependencies into the arena's data folder; see docs/bfcl.md)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

err_console = Console(stderr=True)


def cmd_bfcl(args: argparse.Namespace) -> int:
    from environments.bfcl.package import VERSION, BfclMissing, fetch, is_fetched, package_root

    if args.action == "where":
        print(json.dumps({"version": VERSION, "root": str(package_root()), "present": is_fetched()}))
        return 0
    try:
        root = fetch()
    except BfclMissing as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1
    print(json.dumps({"version": VERSION, "root": str(root), "present": True}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bfcl", help="fetch the BFCL v4 multi-turn package (no dependencies)")
    parser.add_argument("action", choices=["fetch", "where"], help="fetch it once, or say where it is")
    parser.set_defaults(func=cmd_bfcl)
