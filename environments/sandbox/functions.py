"""Third-party tool code (e.g. an imported environment's released implementation) in the same sandbox.

``run_function`` runs a module's source and calls one of its functions in a fresh bubblewrap child:
no network, uid nobody, the standard library read-only, its data files in a size-limited tmpfs (sent in
over the pipe, the changed ones reported back in the result: the server never touches a folder the
code wrote), rlimits, SIGKILL at the deadline. It is synchronous (a tool call is): a cold child per
call, about 50-100 ms. The result comes back as JSON.

A ``Prelude`` (standard-library source text, since nothing else is mounted inside) can build the
``__builtins__`` the code runs with, e.g. seeded stand-ins for ``random`` so that replays reproduce.
``ARENA_SANDBOX=auto`` applies the same policy as generated programs (``runner.MODE_ENV``): bubblewrap
when it starts, else a plain child process with the same rlimits; the default ``bwrap`` never runs the
code unsandboxed and raises ``SandboxUnavailable`` instead.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from environments.sandbox.runner import (
    MODE_ENV,
    SandboxLimits,
    SandboxUnavailable,
    bwrap_command,
    process_command,
)

DATA_DIR = "/data"
"""Where the data folder (``files``) appears inside the sandbox: a tmpfs of ``SandboxLimits.data_mb``."""
NOBODY = 65534

logger = logging.getLogger(__name__)
_fallback: list[str] = []
"""``auto`` mode: set once bubblewrap failed to start here (then every call runs as a plain process)."""


@dataclass(frozen=True)
class Prelude:
    """Source run first in the child (full builtins): ``factory(**arguments)`` returns the builtins dict
    the code then runs with. Standard library only; ``modules`` are imported before the child drops
    privileges (a plain ``auto`` child as root cannot read an install under ``/root`` afterwards)."""

    source: str
    factory: str
    arguments: Mapping[str, Any]
    modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class FunctionResult:
    """``ok`` with the JSON ``value``, or the ``error`` the code raised (one line, bounded)."""

    ok: bool
    value: Any = None
    error: str | None = None
    files: dict[str, bytes | None] | None = None
    """With ``files`` given: the data files the call changed (``None``: deleted)."""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group, unless it was reaped (its id may be another's by now)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


class Running:
    """The child a tool call of one session runs in (a ``SessionResource``): ``interrupt`` kills it from
    any thread, and any child started after that, until the resource is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopped = False

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.add(proc)
            if self._stopped:
                _kill(proc)

    def detach(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def interrupt(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                _kill(proc)

    def close(self) -> None:
        self.interrupt()


def run_function(
    source: str,
    function: str,
    arguments: Mapping[str, Any],
    *,
    files: Mapping[str, bytes] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    limits: SandboxLimits | None = None,
    module: str = "tool",
    prelude: Prelude | None = None,
    data_dir_env: str | None = None,
    running: Running | None = None,
) -> FunctionResult:
    """Run ``source``, then ``function(**arguments)``, sandboxed; ``SandboxUnavailable`` without one.

    ``files`` (relative path -> content) are the code's data folder: the child writes them into a
    tmpfs of ``limits.data_mb`` (``/data``) before the call and reports what changed after it
    (``FunctionResult.files``); this process never reads or writes that folder. ``data_dir_env`` names
    an environment variable set to where the folder is seen by the code; ``running`` holds the child
    while it runs, so another thread can kill it (a session closed meanwhile)."""
    limits = limits or SandboxLimits()
    mode = os.environ.get(MODE_ENV, "bwrap")
    if mode not in ("bwrap", "auto"):
        raise SandboxUnavailable(f"{MODE_ENV}={mode!r}: use 'bwrap' (default) or 'auto'")
    request: dict[str, Any] = {
        "function": function,
        "module": module,
        "source": source,
        "arguments": dict(arguments),
        "timeout_s": timeout_s,
    }
    if files is not None:
        request["files"] = {path: base64.b64encode(data).decode("ascii") for path, data in files.items()}
        # The report of changed files is one line on stdout, a host file bounded by RLIMIT_FSIZE.
        report_mb = (limits.data_mb * 4) // 3 + limits.max_result_bytes // 2**20 + 2
        limits = replace(limits, file_mb=max(limits.file_mb, report_mb))
    if prelude is not None:
        request["prelude"] = {
            "source": prelude.source,
            "factory": prelude.factory,
            "arguments": dict(prelude.arguments),
        }
    run = (function, timeout_s, limits, request, env, data_dir_env, running)
    preload = prelude.modules if prelude is not None else ()
    if not _fallback:
        try:
            return _run_child(bwrap_command(limits, preload=preload, data=files is not None), None, *run)
        except SandboxUnavailable as exc:
            if mode != "auto":
                raise
            logger.warning("bubblewrap unavailable here (%s); tool code runs as plain child processes", exc)
            _fallback.append(str(exc))
    with tempfile.TemporaryDirectory(prefix="sandbox-data-") as scratch:
        if os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)  # the plain child drops to nobody too
        return _run_child(process_command(limits, preload), scratch, *run)


def _run_child(
    command: list[str],
    plain_dir: str | None,
    function: str,
    timeout_s: float,
    limits: SandboxLimits,
    request: dict[str, Any],
    env: Mapping[str, str] | None,
    data_dir_env: str | None,
    running: Running | None,
) -> FunctionResult:
    """One child: ``plain_dir`` is the data folder of ``auto`` mode's plain process (a host scratch
    directory it alone writes; ``None`` under bubblewrap, where it is the tmpfs ``/data``)."""
    plain = plain_dir is not None
    variables = dict(env or {})
    if "files" in request:
        request = {**request, "data_dir": plain_dir or DATA_DIR}
        if data_dir_env is not None:
            variables[data_dir_env] = plain_dir or DATA_DIR
    request = {**request, "env": variables}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,  # a file: the child's RLIMIT_FSIZE bounds what it can write
                stderr=err,
                cwd="/tmp" if plain else None,
                env={} if plain else None,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        if running is not None:
            running.attach(proc)
        try:
            proc.communicate(
                json.dumps(request, default=str).encode() + b"\n", timeout_s + limits.kill_grace_s
            )
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.wait()
            return FunctionResult(False, error=f"{function!r} ran longer than {timeout_s:g}s (killed)")
        finally:
            if running is not None:
                running.detach(proc)
        out.seek(0)
        lines = out.read(limits.file_mb * 2**20).splitlines()
        err.seek(0)
        stderr = err.read(2000).decode(errors="replace").strip()
    if not lines or lines[0].strip() != b'{"ready":true}':
        raise SandboxUnavailable(f"the sandbox did not start: {stderr or 'no output'}")
    try:
        message = json.loads(lines[-1]) if len(lines) > 1 else None
    except (ValueError, RecursionError):
        message = None
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict):
        return FunctionResult(False, error=f"{function!r} ended without a result (a resource limit?)")
    if result.get("ok") is not True:
        return FunctionResult(False, error=str(result.get("error"))[:4000])
    if "files" not in request:
        return FunctionResult(True, value=result.get("value"))
    try:
        changed = _changed_files(result.get("files"), limits.data_mb * 2**20)
    except ValueError as exc:
        return FunctionResult(False, error=f"{function!r}: {exc}")
    return FunctionResult(True, value=result.get("value"), files=changed)


def _changed_files(report: Any, limit: int) -> dict[str, bytes | None]:
    """The child's report of changed files (path -> base64, ``None`` when deleted), checked: relative
    paths of plain names only, at most ``limit`` bytes in all; ``ValueError`` otherwise."""
    if not isinstance(report, dict):
        raise ValueError("the sandbox reported no data files")
    changed: dict[str, bytes | None] = {}
    total = 0
    for path, text in report.items():
        parts = path.split("/") if isinstance(path, str) else [""]
        if len(path) > 1024 or "\0" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"the data folder holds a file with a bad path {str(path)[:100]!r}")
        if text is None:
            changed[path] = None
            continue
        data = base64.b64decode(str(text), validate=True)
        total += len(data)
        if total > limit:
            raise ValueError(f"the data folder is over its limit of {limit} bytes")
        changed[path] = data
    return changed
