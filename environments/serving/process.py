"""An environment server in a child process: start, wait for its ready line, stop the whole group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from environments.serving.control import ControlClient


class ServerStartError(RuntimeError):
    """The server process exited or stayed silent before it was ready; carries its stderr tail."""


@dataclass
class ServerProcess:
    """``python -m environments.serving ENV`` as a child in its own process group.

    ``preexec`` runs in the child before exec (e.g. to apply rlimits); ``env`` adds environment variables.
    """

    env_ref: str
    host: str = "127.0.0.1"
    port: int = 0
    extra_env: Mapping[str, str] = field(default_factory=dict)
    preexec: Callable[[], None] | None = None
    proc: subprocess.Popen[bytes] | None = None
    ready: dict[str, object] = field(default_factory=dict)
    _stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=40))

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Launch and block until the ready line arrives (or raise ``ServerStartError``)."""
        cmd = [
            sys.executable,
            "-m",
            "environments.serving",
            self.env_ref,
            "--transport",
            "http",
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"}

        def child_setup() -> None:
            os.setsid()
            if self.preexec is not None:
                self.preexec()

        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=child_setup,
        )
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.ready = self._read_ready(timeout)
        return self

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr_tail.append(raw.decode(errors="replace").rstrip())

    def _read_ready(self, timeout: float) -> dict[str, object]:
        assert self.proc is not None and self.proc.stdout is not None
        result: dict[str, object] = {}

        def reader() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("event") == "ready":
                    result.update(message)
                    return

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(timeout)
        if not result:
            self.stop()
            time.sleep(0.05)
            tail = "\n".join(self._stderr_tail) or "(no output)"
            raise ServerStartError(f"environment server {self.env_ref!r} did not become ready:\n{tail}")
        return result

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{self.ready['host']}:{self.ready['port']}"

    @property
    def control_url(self) -> str:
        """The control plane's listener (its own port: a data-plane flood cannot starve it)."""
        return f"http://{self.ready['host']}:{self.ready['control_port']}"

    @property
    def control_token(self) -> str:
        return str(self.ready["control_token"])

    def control(self) -> ControlClient:
        return ControlClient(self.control_url, self.control_token, data_url=self.base_url)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr_tail)

    def stop(self, grace: float = 3.0) -> None:
        """Terminate the process group; kill it if it does not exit within ``grace`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
