"""The ``arena`` command line: one sub-command group per module, each exposing ``register(subparsers)``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from arena.cli import env as env_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arena", description="Agent Arena: MCP tool environments and RL training."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    env_cli.register(subparsers)
    _register_optional(subparsers)
    return parser


def _register_optional(subparsers: argparse._SubParsersAction) -> None:
    """Groups whose modules pull heavier dependencies are imported only if present."""
    import importlib

    for module_name in (
        "arena.cli.bfcl",
        "arena.cli.demo",
        "arena.cli.eval",
        "arena.cli.evolve",
        "arena.cli.image",
        "arena.cli.model",
        "arena.cli.report",
        "arena.cli.synth",
        "arena.cli.tasks",
        "arena.cli.train",
        "arena.cli.view",
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
