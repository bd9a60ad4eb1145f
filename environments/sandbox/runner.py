"""Running a generated program in a bubblewrap sandbox, its tool calls applied by the server to one session.

Each run gets a fresh process (``child.py`` under ``bwrap``): new pid, network, IPC and UTS namespaces
(no network at all), an unprivileged uid, only the Python standard library mounted read-only, a small
tmpfs as its only writable place, and rlimits (address space, CPU, files, processes, file size). Processes
are started ahead of use (``warm``), so a run pays a pipe round trip rather than an interpreter start;
each serves exactly one run and is killed after it, so nothing one program leaves behind reaches the next.

The program's ``tools.call`` becomes one JSON line on a pipe; the server applies it to the session the
run was started for (and to nothing else), counts it against the budget, and answers. The server's
event loop never waits on the program: it reads the pipe asynchronously and SIGKILLs the process group at
the deadline, whatever the program does (bare ``except``, finalizers, a long C call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("child.py")
SANDBOX_CHILD = "/sandbox/child.py"
START_TIMEOUT_S = 10.0


class SandboxUnavailable(RuntimeError):
    """No sandbox can be started here (bubblewrap missing or refused); programs are never run without one."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run."""

    address_space_mb: int = 512
    scratch_mb: int = 16
    max_result_bytes: int = 1_000_000
    """The program's JSON return value, encoded."""
    max_message_bytes: int = 4_000_000
    """One tool call line from the program (its arguments)."""
    kill_grace_s: float = 0.25
    """How long past its deadline a program may take to report the timeout itself before it is killed."""
    warm: int = 2
    concurrency: int = 8


@dataclass
class ProgramRun:
    """What a program did: its return value or the error (with a traceback), and every tool call."""

    ok: bool
    value: Any = None
    error: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "value": self.value, "error": self.error, "calls": self.calls}


ToolCall = Callable[[str, Mapping[str, Any]], tuple[bool, Any]]
"""Applies one tool call to the run's session: ``(ok, value)``. It may raise to abort the run."""


def _root_dirs() -> list[str]:
    """bwrap arguments mounting the system libraries and the Python install read-only."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    python_dirs = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.realpath(sys.executable))}
    for directory in sorted(python_dirs):
        if not directory.startswith("/usr/") and directory != "/usr":
            args += ["--ro-bind", directory, directory]
    return args


def bwrap_command(limits: SandboxLimits) -> list[str]:
    """The command line that starts one sandboxed child."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(
            "bubblewrap is not installed (apt-get install bubblewrap); "
            "generated programs never run unsandboxed"
        )
    if os.geteuid() == 0:
        # Privileged bwrap: namespaces without a user namespace; the child keeps only the capability to
        # drop to uid/gid 65534, which it does before anything else.
        identity = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        identity = ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    return [
        bwrap,
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *identity,
        *_root_dirs(),
        "--dev",
        "/dev",
        "--size",
        str(limits.scratch_mb * 1024 * 1024),
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        str(CHILD),
        SANDBOX_CHILD,
        "--chdir",
        "/tmp",
        "--clearenv",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        os.path.realpath(sys.executable),
        "-I",
        "-S",
        "-B",
        SANDBOX_CHILD,
        str(limits.address_space_mb),
    ]


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class Sandbox:
    """Runs programs in sandboxed children of this process (create and use it in one event loop)."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self._command: list[str] | None = None
        self._warm: deque[asyncio.subprocess.Process] = deque()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._closed = False

    async def _start(self) -> asyncio.subprocess.Process:
        if self._command is None:
            self._command = bwrap_command(self.limits)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=self.limits.max_message_bytes + 1024,
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b'{"ready":true}':
            _kill(proc)
            detail = b""
            with contextlib.suppress(TimeoutError):
                detail = await asyncio.wait_for(proc.stderr.read(2000), 1.0)
            await proc.wait()
            message = detail.decode(errors="replace").strip() or "no output"
            raise SandboxUnavailable(f"the sandbox did not start: {message}")
        return proc

    async def _refill(self) -> None:
        try:
            proc = await self._start()
        except SandboxUnavailable:
            return
        finally:
            self._starting -= 1
        if self._closed:
            _kill(proc)
            await proc.wait()
        else:
            self._warm.append(proc)

    def _schedule_refill(self) -> None:
        while not self._closed and len(self._warm) + self._starting < self.limits.warm:
            self._starting += 1
            task = asyncio.create_task(self._refill())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _take(self) -> asyncio.subprocess.Process:
        while self._warm:
            proc = self._warm.popleft()
            if proc.returncode is None:
                self._schedule_refill()
                return proc
        proc = await self._start()
        self._schedule_refill()
        return proc

    async def run(
        self,
        call: ToolCall,
        source: str,
        *,
        entry: str = "solve",
        timeout_s: float = 5.0,
        max_calls: int = 500,
    ) -> ProgramRun:
        """Run ``source``'s ``entry(tools)`` in a fresh sandbox; never raises for what the program does
        (``SandboxUnavailable`` when no sandbox starts; whatever ``call`` raises aborts the run)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.concurrency)
        async with self._slots:
            proc = await self._take()
            try:
                return await self._drive(proc, call, source, entry, max(0.0, timeout_s), max_calls)
            finally:
                _kill(proc)
                await proc.wait()

    async def _drive(
        self,
        proc: asyncio.subprocess.Process,
        call: ToolCall,
        source: str,
        entry: str,
        timeout_s: float,
        max_calls: int,
    ) -> ProgramRun:
        assert proc.stdin is not None and proc.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s + self.limits.kill_grace_s
        calls: list[dict[str, Any]] = []
        request = {"source": source, "entry": entry, "timeout_s": timeout_s}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    await proc.stdin.drain()
                    line = await proc.stdout.readline()
            except TimeoutError:
                return ProgramRun(False, error=f"ran longer than {timeout_s:g}s (killed)", calls=calls)
            except (ValueError, asyncio.LimitOverrunError):
                limit = self.limits.max_message_bytes
                return ProgramRun(False, error=f"the program sent a message over {limit} bytes", calls=calls)
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            if not line:
                code = await proc.wait()
                error = (
                    f"the program's process ended without a result (exit status {code}; a resource limit?)"
                )
                return ProgramRun(False, error=error, calls=calls)
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                message = None
            if not isinstance(message, dict):
                return ProgramRun(False, error="the program broke the sandbox protocol", calls=calls)
            if "result" in message:
                return self._result(message["result"], len(line), calls)
            name, arguments = message.get("call"), message.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return ProgramRun(False, error="the program broke the sandbox protocol", calls=calls)
            if len(calls) >= max_calls:
                answer: dict[str, Any] = {"limit": f"more than {max_calls} tool calls"}
            else:
                calls.append({"tool": name, "arguments": arguments})
                ok, value = call(name, arguments)
                answer = {"ok": ok, "value": value}
            proc.stdin.write(json.dumps(answer, separators=(",", ":"), default=str).encode() + b"\n")

    def _result(self, result: Any, size: int, calls: list[dict[str, Any]]) -> ProgramRun:
        if not isinstance(result, dict):
            return ProgramRun(False, error="the program broke the sandbox protocol", calls=calls)
        if result.get("ok") is True:
            if size > self.limits.max_result_bytes:
                error = f"the result is larger than {self.limits.max_result_bytes} bytes of JSON"
                return ProgramRun(False, error=error, calls=calls)
            return ProgramRun(True, value=result.get("value"), calls=calls)
        return ProgramRun(False, error=str(result.get("error"))[:20_000], calls=calls)

    async def aclose(self) -> None:
        """Kill the warm children."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        while self._warm:
            proc = self._warm.popleft()
            _kill(proc)
            await proc.wait()
