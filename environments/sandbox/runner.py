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
import inspect
import json
import logging
import os
import select
import shutil
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("child.py")
SANDBOX_CHILD = "/sandbox/child.py"
START_TIMEOUT_S = 10.0
MAX_RESULT_DEPTH = 64
"""How deeply lists and dicts may nest in a program's result (the child checks it too)."""
MODE_ENV = "ARENA_SANDBOX"
"""``bwrap`` (the default: bubblewrap or an error) or ``auto`` (inside a hardened container: bubblewrap
when it can start there, else a plain child process with the same rlimits, the container being the OS
boundary). Anything else is an error."""

logger = logging.getLogger(__name__)


class SandboxUnavailable(RuntimeError):
    """No sandbox can be started here (bubblewrap missing or refused); programs are never run without one."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run."""

    address_space_mb: int = 512
    scratch_mb: int = 16
    file_mb: int = 8
    """RLIMIT_FSIZE: the largest file the child may write (its stdout and stderr files included)."""
    data_mb: int = 32
    """Third-party tool code's data folder (``functions.run_function``): a tmpfs of this size, all
    files together."""
    max_result_bytes: int = 1_000_000
    """The program's JSON return value, encoded."""
    max_message_bytes: int = 4_000_000
    """One tool call line from the program (its arguments)."""
    max_call_bytes: int = 4_000_000
    """All the tool call lines of one run that the server applies and keeps (``calls``); past it a call
    is answered ``LIMIT_EXCEEDED`` and neither applied nor kept (the server's memory per run)."""
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


ToolCall = Callable[[str, Mapping[str, Any]], tuple[bool, Any] | Awaitable[tuple[bool, Any]]]
"""Applies one tool call to the run's session: ``(ok, value)``, or an awaitable of it. It may raise to
abort the run."""


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
    made: set[str] = set()
    outside_usr = sorted(d for d in python_dirs if not d.startswith("/usr/") and d != "/usr")
    for directory in outside_usr:
        if not any(Path(directory).is_relative_to(other) for other in outside_usr if other != directory):
            # Parents bwrap creates are 0700: the child, once nobody, could not reach the install.
            for parent in reversed(Path(directory).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", directory, directory]
    return args


def _child_arguments(limits: SandboxLimits, preload: Sequence[str], path: Sequence[str]) -> list[str]:
    arguments = [f"{limits.address_space_mb}:{limits.file_mb}"]
    if preload or path:
        arguments.append(",".join(preload))
    if path:
        arguments.append(os.pathsep.join(path))
    return arguments


def bwrap_command(
    limits: SandboxLimits,
    preload: Sequence[str] = (),
    readonly: Mapping[str, str] | None = None,
    path: Sequence[str] = (),
    *,
    data: bool = False,
) -> list[str]:
    """The command line that starts one sandboxed child (nothing is writable inside but its tmpfs);
    ``readonly`` maps host directories to places bound read-only (e.g. a third-party package); ``path``
    is put first on the child's ``sys.path`` and ``preload`` names modules it imports before it drops
    privileges; ``data`` adds a second tmpfs of ``limits.data_mb`` at ``/data``, writable by the child."""
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
        *(["--perms", "01777", "--size", str(limits.data_mb * 2**20), "--tmpfs", "/data"] if data else []),
        *[arg for host, inside in (readonly or {}).items() for arg in ("--ro-bind", host, inside)],
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
        *_child_arguments(limits, preload, path),
    ]


def process_command(
    limits: SandboxLimits, preload: Sequence[str] = (), path: Sequence[str] = ()
) -> list[str]:
    """``auto`` mode's fallback inside a container: the child alone (its own process, rlimits, pipes),
    which drops to uid nobody before it reads a request. Once it is nobody it imports only what that
    uid can read: ``preload`` is imported before. A server that is not root could not give the child
    another uid (it could signal the server, ptrace or open its files): ``SandboxUnavailable`` then."""
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot start here and a plain child would share this server's uid {os.geteuid()} "
            "(it could signal the server or open its files): refused; let bubblewrap start in the "
            "container, or run the server as root so that the child drops to uid nobody"
        )
    command = [os.path.realpath(sys.executable), "-I", "-S", "-B", str(CHILD)]
    return command + _child_arguments(limits, preload, path)


class _TooLong(Exception):
    pass


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``limit`` levels (checked without recursion:
    the child's own check is not trusted)."""
    pending = [(value, 0)]
    while pending:
        item, level = pending.pop()
        if level > limit:
            return True
        if isinstance(item, dict | list):
            pending.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return False


class _Child:
    """One sandboxed process and our ends of its pipes (non-blocking; read and written without threads)."""

    def __init__(self, proc: asyncio.subprocess.Process, read_fd: int, write_fd: int, err_fd: int) -> None:
        self.proc = proc
        self.read_fd, self.write_fd, self.err_fd = read_fd, write_fd, err_fd
        self._buffer = bytearray()
        self._eof = False

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and not self._eof

    def _fill(self) -> None:
        try:
            data = os.read(self.read_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._buffer += data
        else:
            self._eof = True

    def _line(self, limit: int) -> bytes | None:
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > limit:
                raise _TooLong
            return None
        if end > limit:
            raise _TooLong
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    async def readline(self, limit: int, spin_s: float = 0.0) -> bytes:
        """The next line (``b""`` at end of file); ``_TooLong`` past ``limit``. Waits up to ``spin_s``
        blocking for a quick answer before it waits in the event loop."""
        while True:
            line = self._line(limit)
            if line is not None:
                return line
            if self._eof:
                return b""
            if spin_s > 0 and select.select([self.read_fd], [], [], spin_s)[0]:
                self._fill()
                continue
            spin_s = 0.0
            await self._wait(self.read_fd, writable=False)
            self._fill()

    async def _wait(self, fd: int, *, writable: bool) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        add, remove = (
            (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader, loop.remove_reader)
        )
        add(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            remove(fd)

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.write_fd, view) :]
            except BlockingIOError:
                await self._wait(self.write_fd, writable=True)
            except OSError:  # the child is gone: its end of the story comes from readline
                return

    def stderr_tail(self) -> str:
        try:
            return os.read(self.err_fd, 2000).decode(errors="replace").strip()
        except OSError:
            return ""

    def signal_kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def kill(self) -> None:
        self.signal_kill()
        await self.proc.wait()
        for fd in (self.read_fd, self.write_fd, self.err_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class Sandbox:
    """Runs programs in sandboxed children of this process (create and use it in one event loop)."""

    FAST_PATH_S = 0.001
    """How long the server waits blocking for the program's next tool call before it waits in the
    event loop (a program calling tools in a loop answers within microseconds)."""
    FAST_PATH_BUDGET_S = 0.005
    """Blocking waits stop for a turn once a run has held the event loop this long without a break."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self._command: list[str] | None = None
        self._warm: deque[_Child] = deque()
        self._running: set[_Child] = set()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        self.mode = os.environ.get(MODE_ENV, "bwrap")
        self.kind = "bwrap"
        """What isolates programs: ``bwrap``, or ``process`` (``auto`` mode where bubblewrap cannot start)."""

    async def _start(self) -> _Child:
        if self._command is None:
            if self.mode not in ("bwrap", "auto"):
                raise SandboxUnavailable(f"{MODE_ENV}={self.mode!r}: use 'bwrap' (default) or 'auto'")
            try:
                self._command = bwrap_command(self.limits)
                return await self._spawn()
            except SandboxUnavailable as exc:
                if self.mode != "auto":
                    self._command = None
                    raise
                logger.warning("bubblewrap unavailable here (%s); programs run as plain child processes", exc)
                self._command, self.kind = process_command(self.limits), "process"
        return await self._spawn()

    async def _spawn(self) -> _Child:
        assert self._command is not None
        to_child, from_parent = os.pipe()
        from_child, to_parent = os.pipe()
        err_read, err_write = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command,
                stdin=to_child,
                stdout=to_parent,
                stderr=err_write,
                start_new_session=True,
                cwd="/tmp" if self.kind == "process" else None,
                env={} if self.kind == "process" else None,
            )
        except OSError as exc:
            for fd in (to_child, from_parent, from_child, to_parent, err_read, err_write):
                os.close(fd)
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        for fd in (to_child, to_parent, err_write):
            os.close(fd)
        for fd in (from_parent, from_child, err_read):
            os.set_blocking(fd, False)
        child = _Child(proc, from_child, from_parent, err_read)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                line = await child.readline(1024)
        except (TimeoutError, _TooLong):
            line = b""
        except BaseException:  # cancelled (the run's session closed, the server stopping)
            await asyncio.shield(child.kill())
            raise
        if line.strip() != b'{"ready":true}':
            await asyncio.sleep(0.05)
            detail = child.stderr_tail() or "no output"
            await child.kill()
            raise SandboxUnavailable(f"the sandbox did not start: {detail}")
        return child

    async def _refill(self) -> None:
        try:
            child = await self._start()
        except SandboxUnavailable:
            return
        finally:
            self._starting -= 1
        if self._closed:
            await child.kill()
        else:
            self._warm.append(child)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule_refill(self) -> None:
        while not self._closed and len(self._warm) + self._starting < self.limits.warm:
            self._starting += 1
            self._background(self._refill())

    async def _take(self) -> _Child:
        while self._warm:
            child = self._warm.popleft()
            if child.alive:
                self._schedule_refill()
                return child
            await child.kill()
        child = await self._start()
        self._schedule_refill()
        return child

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
            child = await self._take()
            self._running.add(child)
            try:
                return await self._drive(child, call, source, entry, max(0.0, timeout_s), max_calls)
            finally:
                self._running.discard(child)
                child.signal_kill()  # at once; reaping it need not delay the answer
                self._background(child.kill())

    async def _drive(
        self, child: _Child, call: ToolCall, source: str, entry: str, timeout_s: float, max_calls: int
    ) -> ProgramRun:
        """The run's whole exchange with the child, reads and writes alike, bounded by its deadline: a
        child that stops reading its pipe (or shrinks it) cannot hold the server past it."""
        deadline = asyncio.get_running_loop().time() + timeout_s + self.limits.kill_grace_s
        calls: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout_at(deadline):
                return await self._exchange(child, call, source, entry, timeout_s, max_calls, calls)
        except TimeoutError:
            return ProgramRun(False, error=f"ran longer than {timeout_s:g}s (killed)", calls=calls)

    async def _exchange(
        self,
        child: _Child,
        call: ToolCall,
        source: str,
        entry: str,
        timeout_s: float,
        max_calls: int,
        calls: list[dict[str, Any]],
    ) -> ProgramRun:
        loop = asyncio.get_running_loop()
        request = {"source": source, "entry": entry, "timeout_s": timeout_s}
        await child.write(json.dumps(request).encode() + b"\n")
        held_since = loop.time()
        spin = self.FAST_PATH_S
        retained = 0
        while True:
            if loop.time() - held_since > self.FAST_PATH_BUDGET_S:
                await asyncio.sleep(0)  # let other requests in
                held_since = loop.time()
            try:
                line = await child.readline(self.limits.max_message_bytes, spin)
            except _TooLong:
                limit = self.limits.max_message_bytes
                return ProgramRun(False, error=f"the program sent a message over {limit} bytes", calls=calls)
            if not line:
                code = await child.proc.wait()
                error = f"the program's process ended without a result (status {code}; a resource limit?)"
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
            elif retained + len(line) > self.limits.max_call_bytes:
                limit = self.limits.max_call_bytes
                answer = {"limit": f"LIMIT_EXCEEDED: the run's tool calls passed {limit} bytes of arguments"}
            else:
                retained += len(line)
                calls.append({"tool": name, "arguments": arguments})
                applied = call(name, arguments)
                ok, value = await applied if inspect.isawaitable(applied) else applied
                answer = {"ok": ok, "value": value}
            await child.write(json.dumps(answer, separators=(",", ":"), default=str).encode() + b"\n")
            spin = self.FAST_PATH_S

    def _result(self, result: Any, size: int, calls: list[dict[str, Any]]) -> ProgramRun:
        if not isinstance(result, dict):
            return ProgramRun(False, error="the program broke the sandbox protocol", calls=calls)
        if result.get("ok") is True:
            if size > self.limits.max_result_bytes:
                error = f"the result is larger than {self.limits.max_result_bytes} bytes of JSON"
                return ProgramRun(False, error=error, calls=calls)
            if _deeper_than(result.get("value"), MAX_RESULT_DEPTH):
                error = f"the result is not JSON: nested deeper than {MAX_RESULT_DEPTH} levels"
                return ProgramRun(False, error=error, calls=calls)
            return ProgramRun(True, value=result.get("value"), calls=calls)
        return ProgramRun(False, error=str(result.get("error"))[:20_000], calls=calls)

    async def aclose(self) -> None:
        """Kill the warm children and those still running a program (their runs end at once)."""
        self._closed = True
        for child in self._running:
            child.signal_kill()
        if self._tasks:  # refills in flight kill what they start once they see ``_closed``
            await asyncio.wait(list(self._tasks), timeout=START_TIMEOUT_S)
        while self._warm:
            await self._warm.popleft().kill()
