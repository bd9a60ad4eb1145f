"""What tests that need an outside program share: a free loopback port, and a skip that becomes a
failure under CI (where infra/test.sh installs the program, so its absence is a broken setup)."""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def missing(message: str) -> None:
    """Skip the test for ``message``; fail it under CI."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
