"""A real PostgreSQL server for tests: a fresh cluster in a temporary folder, on a Unix socket, stopped
and removed afterwards. Debian's ``postgresql`` package provides the binaries (infra/test.sh installs
it); as root the server runs as the ``postgres`` user, since PostgreSQL refuses to run as root."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.needs import free_port, missing

DATABASE = "arena"


def _bin_dir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a cluster in a fresh temporary folder; yields its SQLAlchemy URL (``postgresql+psycopg``)."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        missing("PostgreSQL is not installed under /usr/lib/postgresql (infra/test.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="arena-pg-"))  # outside pytest's root-only folders
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (root, sockets):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = free_port()
    run = {"check": True, "capture_output": True, "timeout": 120}
    subprocess.run(
        _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "arena"]), **run
    )
    options = f"-k {sockets} -p {port} -c listen_addresses='' -c fsync=off"
    pg_ctl = str(bin_dir / "pg_ctl")
    start = [pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start"]
    subprocess.run(_as_server_user(start), check=True, timeout=120, stdout=subprocess.DEVNULL)
    try:
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", str(sockets), "-p", str(port), "-U", "arena", DATABASE], **run
        )
        yield f"postgresql+psycopg://arena@/{DATABASE}?host={sockets}&port={port}"
    finally:
        subprocess.run(
            _as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]), check=False
        )
        shutil.rmtree(root, ignore_errors=True)
