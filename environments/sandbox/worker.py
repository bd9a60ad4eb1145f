"""A persistent sandboxed child for stateful third-party code: one per session, many calls over a pipe.

``Worker`` starts the sandbox child (``child.py``, the same bubblewrap command line, limits and ``auto``
fallback as generated programs and ``run_function``) in its ``serve`` mode: it runs a module's source
(standard library only, plus what ``readonly`` mounts and ``preload`` imports before the drop to uid
nobody) and answers one JSON line per request with that module's ``handle(message)``. The parent waits
for each answer blocking, up to the request's deadline, then SIGKILLs the child's process group: call
it from a worker thread, never from an event loop. A dead or killed child is started again on the next
request; whatever it held is gone, so callers keep the truth (e.g. the session's rows) themselves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from environments.sandbox.runner import (
    MODE_ENV,
    START_TIMEOUT_S,
    SandboxLimits,
    SandboxUnavailable,
    bwrap_command,
    process_command,
)

logger = logging.getLogger(__name__)
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
"""Children are started from this one long-lived thread: bubblewrap's ``--die-with-parent`` follows the
thread that forked it, and the server's worker threads come and go."""
_REAPER = ThreadPoolExecutor(1, thread_name_prefix="sandbox-reap")
_fallback: list[str] = []


class WorkerFailed(RuntimeError):
    """The child died, broke the protocol or ran past the deadline (it was killed)."""


class WorkerError(RuntimeError):
    """``handle`` raised in the child: its exception type and message."""


class Worker:
    """One sandboxed child serving ``handle`` of the module ``source`` (one caller at a time).

    ``readonly`` maps host directories to where they are mounted inside, ``path`` (places inside) goes
    first on the child's ``sys.path``; ``plain_path`` is that list for ``auto`` mode's plain process
    (host places, no mounts)."""

    def __init__(
        self,
        source: str,
        *,
        name: str = "worker",
        limits: SandboxLimits | None = None,
        readonly: Mapping[str, str] | None = None,
        path: Sequence[str] = (),
        plain_path: Sequence[str] | None = None,
        preload: Sequence[str] = (),
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.source = source
        self.name = name
        self.limits = limits or SandboxLimits()
        self.readonly = dict(readonly or {})
        self.path = list(path)
        self.plain_path = list(path if plain_path is None else plain_path)
        self.preload = list(preload)
        self.max_message_bytes = max_message_bytes
        self.kind = "bwrap"
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = bytearray()
        self._lock = threading.Lock()

    def key(self) -> tuple[Any, ...]:
        """What makes two workers interchangeable before their first request."""
        config = (self.source, self.name, self.limits, sorted(self.readonly.items()), self.path)
        return (*config, self.plain_path, self.preload, self.max_message_bytes, os.environ.get(MODE_ENV))

    def clone(self) -> Worker:
        """A new, unstarted worker configured like this one."""
        return Worker(
            self.source,
            name=self.name,
            limits=self.limits,
            readonly=self.readonly,
            path=self.path,
            plain_path=self.plain_path,
            preload=self.preload,
            max_message_bytes=self.max_message_bytes,
        )

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the child now unless it runs (``SandboxUnavailable`` when none starts)."""
        with self._lock:
            if not self.alive:
                self._reap()
                self._start()

    @property
    def pid(self) -> int | None:
        """The process id of the running child (bubblewrap's), ``None`` before the first request."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # -- starting ---------------------------------------------------------------------------------
    def _commands(self) -> list[tuple[str, list[str]]]:
        mode = os.environ.get(MODE_ENV, "bwrap")
        if mode not in ("bwrap", "auto"):
            raise SandboxUnavailable(f"{MODE_ENV}={mode!r}: use 'bwrap' (default) or 'auto'")
        if _fallback and mode == "auto":
            return [("process", process_command(self.limits, self.preload, self.plain_path))]
        try:
            boxed = bwrap_command(self.limits, self.preload, self.readonly, self.path)
        except SandboxUnavailable:
            if mode != "auto":
                raise
            return [("process", process_command(self.limits, self.preload, self.plain_path))]
        if mode != "auto":
            return [("bwrap", boxed)]
        try:
            return [
                ("bwrap", boxed),
                ("process", process_command(self.limits, self.preload, self.plain_path)),
            ]
        except SandboxUnavailable:  # no plain fallback here: bubblewrap or nothing
            return [("bwrap", boxed)]

    def _start(self) -> None:
        problem = "no command"
        for kind, command in self._commands():
            try:
                self._spawn(kind, command)
                self.kind = kind
                self.starts += 1
                return
            except SandboxUnavailable as exc:
                problem = str(exc)
                if kind == "bwrap" and os.environ.get(MODE_ENV) == "auto":
                    logger.warning("bubblewrap unavailable here (%s); workers run as plain processes", exc)
                    _fallback.append(problem)
        raise SandboxUnavailable(problem)

    def _spawn(self, kind: str, command: list[str]) -> None:
        plain = kind == "process"
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept with the child) a file: the child's RLIMIT_FSIZE bounds it, nothing blocks
        try:
            proc = _SPAWNER.submit(
                subprocess.Popen,
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                cwd="/tmp" if plain else None,
                env={} if plain else None,
            ).result()
        except OSError as exc:
            stderr.close()
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from None
        self._proc, self._stderr, self._buffer = proc, stderr, bytearray()
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)  # every write is bounded by a deadline (``_write``)
        try:
            ready = self._read(time.monotonic() + START_TIMEOUT_S, 1024)
            if ready.strip() != b'{"ready":true}':
                raise WorkerFailed("no ready line")
            self._write(
                {"serve": {"source": self.source, "name": self.name}}, time.monotonic() + START_TIMEOUT_S
            )
            serving = self._read(time.monotonic() + START_TIMEOUT_S, 1 << 20)
            if serving.strip() != b'{"serving":true}':
                raise WorkerFailed("the worker module did not start")
        except (WorkerFailed, TimeoutError) as exc:
            detail = self._stderr_tail() or str(exc) or "no answer"
            self._reap()
            raise SandboxUnavailable(f"the sandbox did not start: {detail}") from None

    # -- the pipe ---------------------------------------------------------------------------------
    def _write(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one line, waiting for the pipe no later than ``deadline`` (``TimeoutError``, the child
        killed): a child that stops reading, or shrinks its pipe, cannot hold the caller past it."""
        assert self._proc is not None and self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        data = memoryview(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        while data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                self.interrupt()
                raise TimeoutError
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                continue
            except OSError:
                return  # the child is gone: the read that follows says so

    def _read(self, deadline: float, limit: int) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > limit:
                self.interrupt()
                raise WorkerFailed(f"the worker sent a message over {limit} bytes")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.interrupt()
                raise TimeoutError
            try:
                data = os.read(fd, 1 << 20)
            except OSError:
                data = b""
            if not data:
                return b""
            self._buffer += data

    def request(self, message: Mapping[str, Any], timeout_s: float) -> Any:
        """``handle(message)``'s JSON answer; ``WorkerError`` for what it raised, ``WorkerFailed`` when
        the child died or ran past ``timeout_s`` (then it is killed), ``SandboxUnavailable`` when none
        starts."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._reap()
                self._start()
            deadline = time.monotonic() + timeout_s + self.limits.kill_grace_s
            try:
                self._write(message, deadline)
                line = self._read(deadline, self.max_message_bytes)
            except TimeoutError:
                self._reap()
                raise WorkerFailed(f"ran longer than {timeout_s:g}s (killed)") from None
            except WorkerFailed:
                self._reap()
                raise
            if not line:
                code = self._reap()
                raise WorkerFailed(f"the sandboxed process ended (status {code}; a resource limit?)")
            try:
                answer = json.loads(line)
            except (ValueError, RecursionError):
                answer = None
            if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
                self.interrupt()
                self._reap()
                raise WorkerFailed("the sandboxed process broke the protocol")
            if not answer["ok"]:
                raise WorkerError(str(answer.get("error"))[:4000])
            return answer.get("value")

    # -- ending -----------------------------------------------------------------------------------
    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read(2000).decode(errors="replace").strip()
        return ""

    def interrupt(self) -> None:
        """SIGKILL the child's process group now (any thread; a request in flight fails at once)."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                self._proc = proc
                self.interrupt()
                self._proc = None
            code = proc.wait()
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return code

    def close(self) -> None:
        """Kill the child now; it is reaped and its pipes released on a background thread, so closing
        a session costs its server's event loop no wait (the next request would start a new child)."""
        self.interrupt()
        with self._lock:
            proc, stderr = self._proc, self._stderr
            self._proc, self._stderr, self._buffer = None, None, bytearray()
        if proc is not None or stderr is not None:
            _REAPER.submit(_release, proc, stderr)


def _release(proc: subprocess.Popen[bytes] | None, stderr: IO[bytes] | None) -> None:
    if proc is not None:
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
    if stderr is not None:
        stderr.close()


class WarmWorkers:
    """Workers started ahead of use on a background thread, so a session's first request does not wait
    for a child to start; each is handed out once (to one session) and never returns here."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._ready: deque[Worker] = deque()
        self._starting = 0
        self._lock = threading.Lock()
        self._failed = False

    def take(self, worker: Worker) -> Worker:
        """A started worker interchangeable with ``worker`` if one is ready, else ``worker`` itself (not
        started); starts replacements in the background."""
        key, found, stale = worker.key(), None, []
        with self._lock:
            while self._ready and found is None:
                candidate = self._ready.popleft()
                if candidate.key() == key and candidate.alive:
                    found = candidate
                else:
                    stale.append(candidate)
            missing = 0 if self._failed else max(0, self.size - len(self._ready) - self._starting)
            self._starting += missing
        for old in stale:
            old.close()
        for _ in range(missing):
            threading.Thread(target=self._fill, args=(worker.clone(),), daemon=True).start()
        return found or worker

    def _fill(self, worker: Worker) -> None:
        try:
            worker.start()
        except SandboxUnavailable:
            worker.close()
            with self._lock:
                self._starting -= 1
                self._failed = True  # the session's own request reports why
            return
        with self._lock:
            self._starting -= 1
            self._ready.append(worker)
