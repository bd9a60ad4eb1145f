"""``arena report RUN_ID... [--out DIR] [--store URL]``: regenerate a run's report, or compare runs."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def cmd_report(args: argparse.Namespace) -> int:
    from arena.eval.report import write_report
    from arena.store import Database, RunNotFound, RunStore, StoreError
    from environments.paths import arena_home

    try:
        db = Database(args.store)
    except StoreError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    try:
        runs = RunStore(db)
        for run_id in args.run_ids:
            runs.get(run_id)
        name = (
            args.run_ids[0]
            if len(args.run_ids) == 1
            else "compare-" + hashlib.sha256(" ".join(args.run_ids).encode()).hexdigest()[:10]
        )
        out = Path(args.out).expanduser() if args.out else arena_home() / "reports" / name
        report = write_report(runs, list(args.run_ids), out)
    except RunNotFound as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    finally:
        db.close()
    console.print(f"report: {report.markdown}", highlight=False)
    print(json.dumps({"runs": args.run_ids, **report.headline, "report": str(report.markdown)}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="regenerate the report of stored runs, or compare several")
    parser.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    parser.add_argument("--out", help="report folder (default $ARENA_HOME/reports/<run or comparison>)")
    parser.add_argument("--store", help="store URL (default sqlite:///$ARENA_HOME/arena.db)")
    parser.set_defaults(func=cmd_report)
