"""The ``arena`` command line: one sub-command per module ``arena.cli.<command>``, each exposing
``register(subparsers)``. Only the module of the command being run is imported (each pulls its own
heavy dependencies: Ray, torch, matplotlib...); ``arena --help`` and an unknown command import them all."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = (
    "bfcl",
    "demo",
    "env",
    "eval",
    "evolve",
    "image",
    "model",
    "report",
    "synth",
    "tasks",
    "train",
    "view",
)
REQUIRED = ("env",)
"""Commands whose module must import; the others pull optional dependencies and are left out if absent."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default ``sys.argv[1:]``): its command's group, or every group."""
    parser = argparse.ArgumentParser(
        prog="arena", description="Agent Arena: MCP tool environments and RL training."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    args = sys.argv[1:] if argv is None else list(argv)
    named = args[0] if args and args[0] in COMMANDS else None
    for command in (named,) if named else COMMANDS:
        _register(subparsers, command)
    return parser


def _register(subparsers: argparse._SubParsersAction, command: str) -> None:
    module_name = f"arena.cli.{command}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name and command not in REQUIRED:
            return
        raise
    module.register(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
