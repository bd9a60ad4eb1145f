"""``arena env import KIND DIR``: run an importer, print a table, end with one JSON line."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from environments.importers.agentworld import ImportReport, import_directory

IMPORTERS = {"agentworld": import_directory}
_STATUS_STYLE = {"imported": "green", "replayed": "green", "skipped": "red"}
PIPE_WIDTH = 160  # rich assumes 80 columns when stdout is not a terminal (logs, CI)


def report_table(report: ImportReport) -> Table:
    """One row per environment: id, name, tools, records, questions, replayed, reproduced, status."""
    table = Table(title=f"Imported from {report.source}", title_justify="left")
    for column in ("id", "name", "tools", "records", "questions", "replayed", "reproduced", "status"):
        table.add_column(column, justify="right" if column not in ("id", "name", "status") else "left")
    for row in report.rows:
        style = _STATUS_STYLE.get(row.status, "yellow")
        status = f"[{style}]{row.status}[/{style}]" + (f": {row.reason}" if row.reason else "")
        replay = [str(row.replayed), str(row.reproduced)] if report.replayed_run else ["-", "-"]
        counts = [str(row.tools), str(row.records), str(row.questions)] if row.imported else ["-", "-", "-"]
        table.add_row(row.env_id, row.name, *counts, *replay, status)
    return table


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else f"{part}/0"


def summary_line(report: ImportReport) -> str:
    """Share imported, and the replay's groups over the questions of imported environments."""
    totals = report.to_json()
    line = f"imported {_share(totals['environments'], totals['environments_found'])} environments"
    if totals["skipped"]:
        line += f" ({len(totals['skipped'])} skipped, {totals['questions_in_skipped']} questions)"
    if report.replayed_run:
        groups = ", ".join(f"{name} {n}" for name, n in totals["verdicts"].items() if name != "reproduced")
        line += f"; reproduced {_share(totals['reproduced'], totals['questions'])} questions; {groups}"
    return line


def run_import(kind: str, src: Path, *, replay: bool = True) -> int:
    """Import ``src`` with the ``kind`` importer; non-zero only when nothing could be imported."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=PIPE_WIDTH)
    importer = IMPORTERS.get(kind)
    if importer is None:
        console.print(f"[red]unknown importer {kind!r}; known: {', '.join(sorted(IMPORTERS))}[/red]")
        return 2
    if not Path(src).is_dir():
        console.print(f"[red]{src} is not a directory[/red]")
        return 2
    report = importer(Path(src), replay=replay)
    console.print(report_table(report))
    console.print(summary_line(report), highlight=False)
    print(json.dumps(report.to_json(), ensure_ascii=False), flush=True)
    return 0 if report.imported else 1
