"""``arena tasks ...``: list, show, verify, export and import the tasks in the store."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from arena.cli.tasks_view import task_view
from arena.store import Database, StoreError, TaskNotFound, TaskStore
from environments.registry import UnknownEnvironment
from environments.sdk.environment import EnvironmentSpecError
from task_synth.model import Task, Verdict

console = Console()
err_console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> int:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return code


def cmd_list(args: argparse.Namespace, store: TaskStore) -> int:
    tasks = store.list(env=args.env, difficulty=args.difficulty, kind=args.kind, limit=args.limit)
    if args.json:
        print(json.dumps([task.model_dump(mode="json") for task in tasks]))
        return 0
    table = Table(title=f"{len(tasks)} tasks")
    rows = [(t.id, t.env, str(t.difficulty), str(t.kind), " ".join(t.request.split())) for t in tasks]
    columns = ("id", "env", "level", "kind")
    widths = [max([len(column)] + [len(r[i]) for r in rows]) for i, column in enumerate(columns)]
    for column, width in zip(columns, widths, strict=True):
        table.add_column(column, no_wrap=True, min_width=width)
    request_width = max(20, console.width - sum(widths) - 16)
    table.add_column("request", no_wrap=True, overflow="ellipsis", max_width=request_width)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return 0


def cmd_show(args: argparse.Namespace, store: TaskStore) -> int:
    task = store.get(args.task_id)
    if args.json:
        print(task.model_dump_json(indent=2))
    else:
        console.print(task_view(task))
    return 0


def environment_of(task: Task, explicit: str | None) -> str:
    """The reference to serve ``task``'s environment from. A stored task's ``env`` resolves only as a
    *name* (built-in, registered or imported), never as a path: a task file cannot make the arena run an
    arbitrary ``.py``. ``explicit`` (``--env``, typed by the user) may be a path; the environment it
    loads must carry the task's name."""
    from environments.registry import canonical_ref, load_environment, load_registered

    if explicit is not None:
        env = load_environment(explicit)
        if env.name != task.env:
            raise UnknownEnvironment(
                f"--env {explicit} is environment {env.name!r}; this task needs {task.env!r}"
            )
        return canonical_ref(explicit)
    try:
        load_registered(task.env)
    except UnknownEnvironment as exc:
        source = task.provenance.get("env_source")
        if source is None:
            raise
        raise UnknownEnvironment(
            f"this task's environment {task.env!r} is not registered; it was synthesized from {source}: "
            f"pass --env {source}, or register it once (docs/authoring.md, 'Registering an environment')"
        ) from exc
    return task.env


async def verify(task: Task, submission: Any, env_ref: str | None = None) -> Verdict:
    """Verify a submission; tasks with a final-state check replay its calls in a fresh session of their
    environment (``env_ref``: from ``environment_of``)."""
    from task_synth.verify import verify_submission

    if task.verifier.state is None:
        return await verify_submission(None, task, submission)
    from arena.runtime.pool import EnvPool, PoolConfig
    from environments.registry import check_name

    # Without an explicit reference (from ``environment_of``), a stored ``env`` is only ever a name.
    ref = env_ref or check_name(task.env)
    async with EnvPool(PoolConfig(envs={ref: 1}, warm_sessions_per_worker=1)) as pool:
        return await verify_submission(pool, task, submission, env_ref=ref)


def cmd_verify(args: argparse.Namespace, store: TaskStore) -> int:
    task = store.get(args.task_id)
    try:
        submission = json.loads(Path(args.answer).read_text(encoding="utf-8"))
    except OSError as exc:
        return _fail(f"cannot read {args.answer}: {exc.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _fail(f"{args.answer} is not valid JSON: {exc}")
    from task_synth.verify import parse_submission

    try:
        parse_submission(task, submission)
    except ValueError as exc:
        return _fail(f"{args.answer}: {exc}")
    env_ref = None
    if task.verifier.state is not None:
        try:
            env_ref = environment_of(task, args.env)
        except (UnknownEnvironment, EnvironmentSpecError) as exc:
            return _fail(str(exc).strip("'\""))
    verdict = asyncio.run(verify(task, submission, env_ref))
    if verdict.passed:
        console.print(f"[bold green]PASS[/bold green] {task.id}")
        return 0
    console.print(f"[bold red]FAIL[/bold red] {task.id}")
    for reason in verdict.reasons:
        console.print(f"  - {reason}", highlight=False, markup=False)
    return 1


def cmd_export(args: argparse.Namespace, store: TaskStore) -> int:
    path = Path(args.file)
    if args.format == "verl":
        if path.exists() and not path.is_dir():
            return _fail(f"{path} is a file; --format verl writes a directory (train.parquet, val.parquet)")
        if not 0.0 <= args.val_fraction < 1.0:
            return _fail(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
        from trainers.verl.dataset import export

        counts = export(store.stream(args.env, args.difficulty), path, args.val_fraction)
        console.print(
            f"exported {counts['train']} train and {counts['val']} validation tasks to {path}",
            highlight=False,
        )
        return 0
    count = store.export_jsonl(path, env=args.env, difficulty=args.difficulty)
    console.print(f"exported {count} tasks to {path}", highlight=False)
    return 0


def cmd_import(args: argparse.Namespace, store: TaskStore) -> int:
    path = Path(args.file)
    if not path.is_file():
        return _fail(f"no such file: {path}")
    skipped: list[int] = []

    def report(line: int, reason: str) -> None:
        skipped.append(line)
        err_console.print(f"[yellow]skipped[/yellow] {path}:{line}: {reason}", highlight=False)

    added = store.import_jsonl(path, on_error=report)
    console.print(f"imported {added} new tasks from {path}; {len(skipped)} line(s) skipped", highlight=False)
    return 1 if skipped else 0


def _run(args: argparse.Namespace) -> int:
    try:
        db = Database(args.store)
    except StoreError as exc:
        return _fail(str(exc))
    try:
        return args.handler(args, TaskStore(db))
    except TaskNotFound as exc:
        return _fail(str(exc))
    finally:
        db.close()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tasks`` command group."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", metavar="URL", help="SQLAlchemy URL (default sqlite:///$ARENA_HOME/arena.db)"
    )
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--env", help="only this environment")
    filters.add_argument("--difficulty", type=int, choices=range(1, 6), metavar="N", help="only level N")

    parser = subparsers.add_parser("tasks", help="list, show, verify, export and import synthesized tasks")
    commands = parser.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND")

    list_ = commands.add_parser("list", parents=[common, filters], help="list tasks")
    list_.add_argument("--kind", choices=["graph", "state", "program", "imported"])
    list_.add_argument("--limit", type=int)
    list_.add_argument("--json", action="store_true", help="print the tasks as a JSON array")
    list_.set_defaults(handler=cmd_list)

    show = commands.add_parser("show", parents=[common], help="show one task")
    show.add_argument("task_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)

    check = commands.add_parser(
        "verify", parents=[common], help="verify a submission (exit 0 pass, 1 fail, 2 bad input)"
    )
    check.add_argument("task_id", metavar="ID")
    check.add_argument("--answer", metavar="FILE", required=True, help="the submission, a JSON file")
    check.add_argument(
        "--env", metavar="REF", help="serve the task's environment from this path or name (state tasks)"
    )
    check.set_defaults(handler=cmd_verify)

    export = commands.add_parser(
        "export",
        parents=[common, filters],
        help="write tasks to a JSONL file, or verl parquet (--format verl)",
    )
    export.add_argument("file", metavar="PATH", help="the JSONL file, or the verl output directory")
    export.add_argument(
        "--format",
        choices=["jsonl", "verl"],
        default="jsonl",
        help="verl: OUT/train.parquet + OUT/val.parquet",
    )
    export.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="share of tasks in val.parquet (stable hash of the id)",
    )
    export.set_defaults(handler=cmd_export)

    load = commands.add_parser("import", parents=[common], help="add the tasks of a JSONL file")
    load.add_argument("file", metavar="FILE")
    load.set_defaults(handler=cmd_import)

    parser.set_defaults(func=_run)
