"""``arena image build``: build the environment server container image (online or offline)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from arena.runtime.image import DEFAULT_TAG, ImageBuildError, build_image

console = Console(stderr=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``image`` command group (``image build``) to the ``arena`` CLI."""
    image = subparsers.add_parser("image", help="build the environment server container image")
    commands = image.add_subparsers(dest="image_command", required=True, metavar="SUBCOMMAND")
    build = commands.add_parser(
        "build",
        help="build the image (skipped when the tag already holds the same content)",
        description="Build the environment server image through Docker or Podman's Docker API.",
    )
    mode = build.add_mutually_exclusive_group()
    mode.add_argument(
        "--offline", action="store_true", help="debootstrap base + host wheelhouse, no registry"
    )
    mode.add_argument("--online", action="store_true", help="python:3.11-slim base and PyPI")
    build.add_argument("--force", action="store_true", help="rebuild even if the content hash matches")
    build.add_argument("--tag", default=DEFAULT_TAG, help=f"image tag (default {DEFAULT_TAG})")
    build.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    build.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    """Build the image; print progress to stderr and one summary line to stdout."""
    offline = True if args.offline else False if args.online else None

    def progress(line: str) -> None:
        if not args.quiet:
            console.print(f"[dim]{escape(line)}[/dim]", highlight=False, soft_wrap=True)

    try:
        result = build_image(offline=offline, force=args.force, tag=args.tag, progress=progress)
    except ImageBuildError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 1
    print(result.summary())
    return 0
