"""``arena bfcl fetch|where|export``: the BFCL v4 multi-turn package (``bfcl-eval``, unpacked without its
dependencies into the arena's data folder; see docs/bfcl.md), and its entries as training tasks (JSONL,
for ``arena tasks import``)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

err_console = Console(stderr=True)


def cmd_bfcl(args: argparse.Namespace) -> int:
    from environments.bfcl.package import VERSION, BfclMissing, fetch, is_fetched, package_root

    if args.action == "export":
        return _export(args)
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


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from environments.bfcl.data import UnknownCategory
    from environments.bfcl.package import BfclMissing
    from task_synth.bfcl import bfcl_tasks

    if not args.file:
        err_console.print("[red]error:[/red] export needs --out FILE (JSONL)", highlight=False)
        return 2
    try:
        tasks = bfcl_tasks(args.categories or None)
    except (BfclMissing, UnknownCategory) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    out = Path(args.file).expanduser()
    out.write_text("".join(t.model_dump_json() + "\n" for t in tasks), encoding="utf-8")
    print(json.dumps({"tasks": len(tasks), "file": str(out)}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bfcl", help="fetch the BFCL v4 multi-turn package (no dependencies)")
    parser.add_argument(
        "action", choices=["fetch", "where", "export"], help="fetch it once, say where it is, or export tasks"
    )
    parser.add_argument("--out", dest="file", help="export: the JSONL file to write")
    parser.add_argument(
        "--categories", nargs="*", help="export: base, long_context, miss_func, miss_param (default all)"
    )
    parser.set_defaults(func=cmd_bfcl)
