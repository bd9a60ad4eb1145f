"""``arena view [--port 8765] [--host 127.0.0.1] [store.url=URL]``: serve the read-only web viewer of the
store (runs, episodes, evolve rounds) on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

console = Console()
err_console = Console(stderr=True)


class ViewError(ValueError):
    """The command line or the store cannot be used (the message is one line)."""


def store_url(overrides: list[str]) -> str | None:
    """The ``store.url=...`` override (the only one the viewer takes); None for the default store."""
    url = None
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or key.strip() != "store.url":
            raise ViewError(f"unknown argument {override!r}: the viewer takes only store.url=URL")
        url = value.strip() or None
    return url


def _check_sqlite_file(url: str | None) -> None:
    """A SQLite store must already exist: the viewer never creates an empty one for a mistyped path."""
    from arena.store import default_url

    try:
        parsed = make_url(url or default_url())
    except ArgumentError:
        return  # Database names the problem
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        if not path.is_file():
            raise ViewError(f"no store at {path} (run `arena eval` first, or pass store.url=URL)")


def cmd_view(args: argparse.Namespace) -> int:
    import uvicorn

    from arena.store import Database, StoreError
    from arena.view import create_app

    try:
        url = store_url(args.overrides)
        _check_sqlite_file(url)
        db = Database(url)
    except (ViewError, StoreError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    host = f"[{args.host}]" if ":" in args.host else args.host
    console.print(
        f"arena view of {db.display_url}: http://{host}:{args.port}/  (Ctrl-C stops it)", highlight=False
    )
    try:
        uvicorn.run(create_app(db), host=args.host, port=args.port, log_level="warning")
    finally:
        db.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "view", help="serve a read-only web page of the store's runs, episodes and evolve rounds"
    )
    parser.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="store.url=URL", help="the store (default: ARENA_HOME's)"
    )
    parser.set_defaults(func=cmd_view)
