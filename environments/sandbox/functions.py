"""Third-party tool code (e.g. an imported environment's released implementation) in the same sandbox.

``run_function`` runs a module's source and calls one of its functions in a fresh bubblewrap child:
no network, uid nobody, the standard library read-only, one host directory read-write (the tool's
data files), rlimits, SIGKILL at the deadline. It is synchronous (a tool call is): a cold child per
call, about 50-100 ms. The result comes back as JSON; the files the code changed are on the host side.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.sandbox.runner import SandboxLimits, SandboxUnavailable, bwrap_command

DATA_DIR = "/data"
"""Where ``writable_dir`` appears inside the sandbox."""
NOBODY = 65534


@dataclass(frozen=True)
class FunctionResult:
    """``ok`` with the JSON ``value``, or the ``error`` the code raised (one line, bounded)."""

    ok: bool
    value: Any = None
    error: str | None = None


def _hand_to_nobody(directory: Path) -> None:
    """A privileged bwrap runs the code as uid 65534: let it write ``directory`` (a private scratch dir)."""
    for root, dirs, files in os.walk(directory):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, NOBODY, NOBODY)


def run_function(
    source: str,
    function: str,
    arguments: Mapping[str, Any],
    *,
    writable_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    limits: SandboxLimits | None = None,
) -> FunctionResult:
    """Run ``source``, then ``function(**arguments)``, sandboxed; ``SandboxUnavailable`` without bwrap."""
    limits = limits or SandboxLimits()
    writable = {str(writable_dir): DATA_DIR} if writable_dir is not None else None
    command = bwrap_command(limits, writable)
    if writable_dir is not None and os.geteuid() == 0:
        _hand_to_nobody(writable_dir)
    request = {"function": function, "source": source, "arguments": dict(arguments), "timeout_s": timeout_s}
    request["env"] = dict(env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            subprocess.run(
                command,
                input=json.dumps(request, default=str).encode() + b"\n",
                stdout=out,  # a file: the child's RLIMIT_FSIZE bounds what it can write
                stderr=err,
                timeout=timeout_s + limits.kill_grace_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return FunctionResult(False, error=f"{function!r} ran longer than {timeout_s:g}s (killed)")
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        out.seek(0)
        lines = out.read(limits.max_result_bytes + 1024).splitlines()
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
    if result.get("ok") is True:
        return FunctionResult(True, value=result.get("value"))
    return FunctionResult(False, error=str(result.get("error"))[:4000])
