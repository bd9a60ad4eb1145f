"""llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``, built by infra/test.sh) on loopback,
serving a GGUF the tests write: the real model server the arena's ``policy=openai`` and LLM synthesis are
tested against. ``--chat_format chatml-function-calling`` is the format whose tool calls that server
supports; it honours ``tool_choice`` ``auto`` and a named function (it refuses ``required``)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.needs import free_port, missing

MODEL_ALIAS = "tiny"
START_TIMEOUT_S = 120.0


def require_llama_server() -> None:
    """Skip (fail under CI) when ``llama_cpp.server`` cannot be imported: its native build is missing."""
    probe = subprocess.run(
        [sys.executable, "-c", "import llama_cpp.server.app"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode == 0:
        return
    reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    message = f"llama-cpp-python[server] is not importable ({reason}); infra/test.sh builds it"
    missing(message)


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def llama_server(model: Path, log: Path, n_ctx: int = 8192) -> Iterator[str]:
    """Serve ``model`` as ``MODEL_ALIAS``; yields the base URL (``.../v1``). The server's output goes to
    ``log`` (quoted when it fails to start); it is stopped afterwards."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    base_url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        server = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(base_url):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
