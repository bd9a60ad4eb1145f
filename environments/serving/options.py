"""Command-line options of ``python -m environments.serving`` and ``arena env serve``; socket names."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def add_serve_options(parser: Any) -> None:
    """The options ``python -m environments.serving`` and ``arena env serve`` share."""
    parser.add_argument("--control-port", type=int, default=0, help="control plane port (default: any free)")
    parser.add_argument(
        "--shared-mcp",
        action="store_true",
        help="also serve /mcp: one state shared by every client (one desktop client only; never in pools)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name clients use to reach the server (DNS-rebinding check); repeatable",
    )


def control_socket(uds: Path) -> Path:
    """The control plane's Unix socket beside the data plane's ``uds``."""
    return uds.with_name(uds.name + ".control")
